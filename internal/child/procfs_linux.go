//go:build linux

package child

import (
	"errors"
	"fmt"
	"io/fs"
	"syscall"
	"time"

	"github.com/prometheus/procfs"
)

// Read returns the stat of pid; a pid with no process gives an error
// wrapping ErrNoProcess.
func Read(pid int) (Stat, error) {
	st, err := procStat(pid)
	if err != nil {
		return Stat{}, err
	}
	return fromProcfs(st), nil
}

func procStat(pid int) (procfs.ProcStat, error) {
	p, err := procfs.NewProc(pid)
	if err == nil {
		var st procfs.ProcStat
		if st, err = p.Stat(); err == nil {
			return st, nil
		}
	}
	if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ESRCH) {
		return procfs.ProcStat{}, fmt.Errorf("%w: pid %d", ErrNoProcess, pid)
	}
	return procfs.ProcStat{}, fmt.Errorf("child: read stat of pid %d: %w", pid, err)
}

func fromProcfs(st procfs.ProcStat) Stat {
	var state byte
	if st.State != "" {
		state = st.State[0]
	}
	return Stat{Pid: st.PID, State: state, Ppid: st.PPID, Pgrp: st.PGRP, Start: st.Starttime, RSS: int64(st.ResidentMemory())}
}

// All returns the stat of every process that exists while it looks;
// processes that exit meanwhile are left out.
func All() ([]Stat, error) {
	procs, err := procfs.AllProcs()
	if err != nil {
		return nil, fmt.Errorf("child: list processes: %w", err)
	}
	out := make([]Stat, 0, len(procs))
	for _, p := range procs {
		if st, err := p.Stat(); err == nil {
			out = append(out, fromProcfs(st))
		}
	}
	return out, nil
}

// RSS returns the resident set size of pid in bytes.
func RSS(pid int) (int64, error) {
	st, err := procStat(pid)
	if err != nil {
		return 0, err
	}
	return int64(st.ResidentMemory()), nil
}

// BootTime is when the machine booted: start ticks count from it.
func BootTime() (time.Time, error) {
	st, err := procfs.NewStat()
	if err != nil {
		return time.Time{}, fmt.Errorf("child: read boot time: %w", err)
	}
	return time.Unix(int64(st.BootTime), 0), nil
}

// startStamp is the start time in clock ticks since boot.
func startStamp(pid int) (uint64, error) {
	st, err := Read(pid)
	return st.Start, err
}
