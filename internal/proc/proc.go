// Package proc reads the Linux process table (/proc): a process's state,
// parent, group and start time, and the processes of a group. The startup
// sweep uses it to tell a leftover agent from a stranger that reuses its pid;
// tests use it to prove that no agent, grandchild or zombie is left behind.
package proc

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// ErrNoProcess means no process has the pid asked about.
var ErrNoProcess = errors.New("proc: no such process")

// Stat is the part of /proc/<pid>/stat residentd reads.
type Stat struct {
	Pid   int
	State byte   // 'R', 'S', 'Z' (zombie), …
	Ppid  int    // parent
	Pgrp  int    // process group
	Start uint64 // start time in clock ticks since boot
}

// Zombie reports whether the process has exited and waits to be reaped.
func (s Stat) Zombie() bool { return s.State == 'Z' }

// Read returns the stat of pid; a pid with no process gives an error
// wrapping ErrNoProcess.
func Read(pid int) (Stat, error) {
	if runtime.GOOS != "linux" {
		// Without /proc every pid would look absent.
		return Stat{}, errors.New("proc: reading processes needs Linux's /proc")
	}
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ESRCH) {
		return Stat{}, fmt.Errorf("%w: pid %d", ErrNoProcess, pid)
	}
	if err != nil {
		return Stat{}, fmt.Errorf("proc: read stat of pid %d: %w", pid, err)
	}
	return Parse(pid, b)
}

// Parse reads fields 3 (state), 4 (ppid), 5 (pgrp) and 22 (starttime) of a
// stat line. The command name (field 2) may hold blanks and parentheses, so
// fields are counted from its last ')'.
func Parse(pid int, b []byte) (Stat, error) {
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return Stat{}, fmt.Errorf("proc: stat of pid %d: no command field", pid)
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 20 || len(f[0]) != 1 {
		return Stat{}, fmt.Errorf("proc: stat of pid %d: %d fields after the command", pid, len(f))
	}
	st := Stat{Pid: pid, State: f[0][0]}
	var err error
	if st.Ppid, err = strconv.Atoi(f[1]); err != nil {
		return Stat{}, fmt.Errorf("proc: stat of pid %d: ppid %q: %w", pid, f[1], err)
	}
	if st.Pgrp, err = strconv.Atoi(f[2]); err != nil {
		return Stat{}, fmt.Errorf("proc: stat of pid %d: pgrp %q: %w", pid, f[2], err)
	}
	if st.Start, err = strconv.ParseUint(f[19], 10, 64); err != nil {
		return Stat{}, fmt.Errorf("proc: stat of pid %d: starttime %q: %w", pid, f[19], err)
	}
	return st, nil
}

// All returns the stat of every process that exists while it looks;
// processes that exit meanwhile are left out.
func All() ([]Stat, error) {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil, fmt.Errorf("proc: list processes: %w", err)
	}
	var out []Stat
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if st, err := Read(pid); err == nil {
			out = append(out, st)
		}
	}
	return out, nil
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

// RSS returns the resident set size of pid in bytes (/proc/<pid>/statm).
func RSS(pid int) (int64, error) {
	if runtime.GOOS != "linux" {
		return 0, errors.New("proc: reading processes needs Linux's /proc")
	}
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/statm")
	if errors.Is(err, fs.ErrNotExist) {
		return 0, fmt.Errorf("%w: pid %d", ErrNoProcess, pid)
	}
	if err != nil {
		return 0, fmt.Errorf("proc: read statm of pid %d: %w", pid, err)
	}
	f := strings.Fields(string(b))
	if len(f) < 2 {
		return 0, fmt.Errorf("proc: statm of pid %d: %q", pid, b)
	}
	pages, err := strconv.ParseInt(f[1], 10, 64)
	if err != nil {
		return 0, fmt.Errorf("proc: statm of pid %d: resident %q: %w", pid, f[1], err)
	}
	return pages * int64(os.Getpagesize()), nil
}

// BootTime is the btime line of /proc/stat: start ticks count from it.
func BootTime() (time.Time, error) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return time.Time{}, fmt.Errorf("proc: read boot time: %w", err)
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "btime "); ok {
			s, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			if err != nil {
				return time.Time{}, fmt.Errorf("proc: boot time %q: %w", v, err)
			}
			return time.Unix(s, 0), nil
		}
	}
	return time.Time{}, errors.New("proc: no btime in /proc/stat")
}
