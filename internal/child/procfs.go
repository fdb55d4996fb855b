package child

import "errors"

// ErrNoProcess means no process has the pid asked about.
var ErrNoProcess = errors.New("child: no such process")

// Stat is what residentd reads of a process in the process table.
type Stat struct {
	Pid   int
	State byte   // 'R', 'S', 'Z' (zombie), …
	Ppid  int    // parent
	Pgrp  int    // process group
	Start uint64 // start time in clock ticks since boot
	RSS   int64  // resident set in bytes (Linux)
}

// Zombie reports whether the process has exited and waits to be reaped.
func (s Stat) Zombie() bool { return s.State == 'Z' }

// Tree is the live processes of the agent whose pid (and process group)
// is pid, from the table all: the members of its group and every
// descendant of theirs, however far down and in whatever group or
// session (a setsid child, a double fork whose middle is still alive).
// What the agent started and then left — an orphan that re-parented to
// a subreaper or init — is in it only while it stays in the group.
func Tree(pid int, all []Stat) []Stat {
	children := map[int][]Stat{}
	var out []Stat
	in := map[int]bool{}
	for _, st := range all {
		if st.Zombie() {
			continue
		}
		children[st.Ppid] = append(children[st.Ppid], st)
		if st.Pgrp == pid || st.Pid == pid {
			out = append(out, st)
			in[st.Pid] = true
		}
	}
	for i := 0; i < len(out); i++ {
		for _, c := range children[out[i].Pid] {
			if !in[c.Pid] {
				in[c.Pid] = true
				out = append(out, c)
			}
		}
	}
	return out
}

// Group lists the live (non-zombie) processes in group pgid.
func Group(pgid int) ([]Stat, error) {
	all, err := All()
	if err != nil {
		return nil, err
	}
	var out []Stat
	for _, st := range all {
		if st.Pgrp == pgid && !st.Zombie() {
			out = append(out, st)
		}
	}
	return out, nil
}
