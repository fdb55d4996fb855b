//go:build linux

package child

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// maxAncestors bounds the parent walk; real trees are a dozen deep.
const maxAncestors = 256

// Now is the current time as /proc reports start times: clock ticks since
// boot (CLOCK_BOOTTIME at USER_HZ 100). A connection's peer started no later
// than the moment its connection was accepted.
func Now() uint64 {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_BOOTTIME, &ts); err != nil {
		return ^uint64(0)
	}
	return uint64(ts.Nano()) / 1e7
}

// Agent judges pid, a process that existed at notAfter (a Now stamp). The
// start time makes it safe against pid reuse: a process started after
// notAfter is not the one asked about, and a parent started after its child
// is not its parent.
func (l *Lineage) Agent(pid int, notAfter uint64) Verdict {
	if pid <= 0 {
		return Verdict{Agent: true, Why: "the peer's pid is not visible here (another pid namespace)"}
	}
	if pid == l.Self {
		return Verdict{}
	}
	first, err := readLink(pid)
	if err != nil {
		return Verdict{Agent: true, Why: fmt.Sprintf("the peer process %d cannot be examined: %v", pid, err)}
	}
	if first.Start > notAfter {
		return Verdict{Agent: true, Why: fmt.Sprintf("pid %d started after the connection was made: the peer is gone and its pid reused", pid)}
	}
	v := l.ancestry(first)
	if !v.Agent {
		v = l.inCgroup(pid)
	}
	if !v.Agent {
		v = hasMark(pid)
	}
	if !v.Agent {
		v = hasLimitMark(pid)
	}
	// What was read must be of the process asked about, not of a newcomer
	// that took its pid meanwhile.
	if again, err := readLink(pid); err != nil || again.Start != first.Start {
		return Verdict{Agent: true, Why: fmt.Sprintf("the peer process %d exited while it was examined", pid)}
	}
	return v
}

// link is what the parent walk needs of a process.
type link struct {
	Pid, Ppid int
	Start     uint64
}

// readLink reads pid's parent and start time from /proc/PID/stat: one
// read into a stack buffer, the peer check's main cost.
func readLink(pid int) (link, error) {
	var path [32]byte
	p := append(append(append(path[:0], "/proc/"...), strconv.Itoa(pid)...), "/stat"...)
	fd, err := unix.Open(string(p), unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return link{}, fmt.Errorf("%w: pid %d: %v", ErrNoProcess, pid, err)
	}
	var buf [1024]byte
	n, err := unix.Read(fd, buf[:])
	_ = unix.Close(fd)
	if err != nil || n <= 0 {
		return link{}, fmt.Errorf("%w: pid %d: read stat: %v", ErrNoProcess, pid, err)
	}
	// pid (comm) state ppid pgrp session tty_nr tpgid flags minflt cminflt
	// majflt cmajflt utime stime cutime cstime priority nice num_threads
	// itrealvalue starttime: comm may hold spaces and parentheses, so the
	// fields count from the last ')'.
	b := buf[:n]
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return link{}, fmt.Errorf("child: pid %d: malformed stat", pid)
	}
	f := bytes.Fields(b[i+1:])
	if len(f) < 20 {
		return link{}, fmt.Errorf("child: pid %d: malformed stat", pid)
	}
	ppid, err1 := strconv.Atoi(string(f[1]))
	start, err2 := strconv.ParseUint(string(f[19]), 10, 64)
	if err1 != nil || err2 != nil {
		return link{}, fmt.Errorf("child: pid %d: malformed stat", pid)
	}
	return link{Pid: pid, Ppid: ppid, Start: start}, nil
}

// ancestry walks the parent chain from st.
func (l *Lineage) ancestry(st link) Verdict {
	cur := st
	for range maxAncestors {
		if p := lookup(cur.Pid); p != nil && p.start == cur.Start {
			if cur.Pid == st.Pid {
				return Verdict{Agent: true, Why: fmt.Sprintf("pid %d is an agent process", cur.Pid)}
			}
			return Verdict{Agent: true, Why: fmt.Sprintf("pid %d descends from agent process %d", st.Pid, cur.Pid)}
		}
		if cur.Ppid <= 1 {
			return Verdict{}
		}
		if cur.Ppid == l.Self {
			if l.Adopts {
				return Verdict{Agent: true, Why: fmt.Sprintf("pid %d descends from pid %d, which this daemon adopted from an agent's tree", st.Pid, cur.Pid)}
			}
			return Verdict{}
		}
		parent, err := readLink(cur.Ppid)
		if err != nil || parent.Start > cur.Start {
			// The parent exited (its pid perhaps reused): the child was
			// re-parented meanwhile; read where it went.
			again, rerr := readLink(cur.Pid)
			if rerr != nil || again.Start != cur.Start {
				return Verdict{Agent: true, Why: fmt.Sprintf("the parent chain of pid %d changed while it was walked", st.Pid)}
			}
			if again.Ppid == cur.Ppid {
				return Verdict{Agent: true, Why: fmt.Sprintf("the parent %d of pid %d cannot be examined", cur.Ppid, cur.Pid)}
			}
			cur = again
			continue
		}
		cur = parent
	}
	return Verdict{Agent: true, Why: fmt.Sprintf("the parent chain of pid %d is deeper than %d", st.Pid, maxAncestors)}
}

// inCgroup reports whether pid is in an agents' cgroup subtree: this
// daemon's, or any named as OpenCgroups names them — an earlier daemon's
// on the same state file that the startup sweep could not empty, or
// another daemon's. The daemon itself never runs in one, so whatever is in
// one is an agent's, wherever in the subtree it moved.
func (l *Lineage) inCgroup(pid int) Verdict {
	l.once.Do(func() {
		if l.Cgroups == nil {
			return
		}
		if mount, err := cgroup2Mount(); err == nil {
			if rel, err := filepath.Rel(mount, l.Cgroups.Dir); err == nil && !strings.HasPrefix(rel, "..") {
				l.cgRel = "/" + rel
			}
		}
	})
	path := cgroupPath(pid)
	if path == "" {
		return Verdict{}
	}
	if l.cgRel != "" && (path == l.cgRel || strings.HasPrefix(path, l.cgRel+"/")) {
		return Verdict{Agent: true, Why: fmt.Sprintf("pid %d is in the agents' cgroup %s", pid, path)}
	}
	for _, part := range strings.Split(path, "/") {
		if _, ok := subtreeName(part); ok {
			return Verdict{Agent: true, Why: fmt.Sprintf("pid %d is in cgroup %s, in an agents' subtree not this daemon's own", pid, path)}
		}
	}
	return Verdict{}
}

// inOpenSubtree reports whether pid is in a subtree this process has open.
func inOpenSubtree(pid int) bool {
	mount, err := cgroup2Mount()
	path := cgroupPath(pid)
	if err != nil || path == "" {
		return false
	}
	dir, in := filepath.Join(mount, path), false
	openSubtrees.Range(func(k, _ any) bool {
		in = dir == k.(string) || strings.HasPrefix(dir, k.(string)+"/")
		return !in
	})
	return in
}

// hasLimitMark reports whether pid carries an agent's rlimit mark
// (LimitMark): one a process cannot raise back, so it survives a cleared
// environment and a move out of every agent cgroup.
func hasLimitMark(pid int) Verdict {
	if v := hardRTTime(pid); isLimitMark(v) {
		return Verdict{Agent: true, Why: fmt.Sprintf("pid %d carries an agent's rlimit mark (hard RLIMIT_RTTIME %d)", pid, v)}
	}
	return Verdict{}
}

// hasMark reports whether pid's environment carries an agent's mark.
func hasMark(pid int) Verdict {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/environ")
	if err != nil {
		return Verdict{}
	}
	for _, kv := range bytes.Split(b, []byte{0}) {
		if v, ok := bytes.CutPrefix(kv, []byte(MarkEnv+"=")); ok && validMark(string(v)) {
			return Verdict{Agent: true, Why: fmt.Sprintf("pid %d carries an agent's %s", pid, MarkEnv)}
		}
	}
	return Verdict{}
}
