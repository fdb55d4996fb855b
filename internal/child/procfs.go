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
}

// Zombie reports whether the process has exited and waits to be reaped.
func (s Stat) Zombie() bool { return s.State == 'Z' }

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
