package child

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"syscall"
	"time"
)

// Sweep outcomes, one per leftover.
const (
	SweepKilled     = "killed"     // the group was ours; it is gone now
	SweepGone       = "gone"       // nothing of the group was left to kill
	SweepReused     = "reused"     // the pid or group now belongs to someone else: spared
	SweepUnverified = "unverified" // identity could not be established: spared
	SweepFailed     = "failed"     // signalling failed or the group outlived SIGKILL
)

// Leftover is an agent process group recorded by an earlier daemon run.
// StartTicks is what StartTicks returned for Pid when it was recorded;
// StartedAt (wall clock) tells records from before a reboot.
// Mark and Cgroup (from Process.Mark and Process.Cgroup) find what the
// agent started that left its group.
type Leftover struct {
	Pid, Pgid  int
	StartTicks uint64
	StartedAt  time.Time
	Mark       string
	Cgroup     string
}

// SweepResult is what Sweep did about one Leftover.
type SweepResult struct {
	Leftover
	Outcome string
	Members int  // live group members found when it was judged ours
	Forced  bool // SIGTERM was not enough and SIGKILL was sent
	Escaped int  // processes outside the group (same mark or cgroup) that were stopped
	Err     error
}

// Strays is what SweepStrays did.
type Strays struct {
	Subtrees  []string // earlier daemons' agents' subtrees found; each is removed unless Err says otherwise
	Processes int      // processes stopped: those in the subtrees and those carrying the rlimit mark
	ByLimit   int      // of Processes, those outside the subtrees, found by the rlimit mark
	Forced    bool     // some needed SIGKILL
	Err       error
}

// StartTicks returns an identity stamp for pid that survives as long as the
// process does and differs for a later process reusing the pid: on Linux the
// start time in clock ticks since boot (/proc/<pid>/stat field 22), elsewhere
// the start time in microseconds from the kernel's process info. Only
// compare it with itself.
// A pid with no process gives an error wrapping ErrNoProcess.
func StartTicks(pid int) (uint64, error) {
	if pid <= 0 {
		return 0, fmt.Errorf("%w: pid %d", ErrNoProcess, pid)
	}
	return startStamp(pid)
}

// Sweep stops the leftover groups that are verifiably still ours: SIGTERM to
// each such group, up to grace for all of them to exit, then SIGKILL to the
// rest. Anything whose identity does not check out is spared. Then it stops
// the descendants that had left the groups: those carrying a record's mark
// (a random value only the agent's tree inherits) and those in its cgroup.
func Sweep(recs []Leftover, grace time.Duration) []SweepResult {
	out := sweepGroups(recs, grace)
	sweepTrees(out, grace)
	return out
}

// SweepMarked stops what an earlier daemon on the same state file left
// running without a record: every process whose mark begins with prefix
// (Spec.MarkPrefix), the agent cgroup of each such process, TERM then KILL
// after grace. Agents this process started, their marks, and the marks in
// swept (those of the records Sweep was given) are left alone; call it
// before starting any agent, after Sweep. One result per mark found: Pid,
// Pgid and StartTicks name the lowest pid carrying it, Escaped counts the
// processes carrying it that were stopped, Outcome is SweepKilled (or
// SweepGone when they had exited meanwhile). It reads other processes' environments, which only
// Linux allows: elsewhere it finds nothing, and only recorded agents are
// swept.
func SweepMarked(prefix string, swept []string, grace time.Duration) []SweepResult {
	if !ValidMarkPrefix(prefix) {
		return nil
	}
	found := markedTrees(prefix, swept)
	sort.Slice(found, func(i, j int) bool { return found[i].Pid < found[j].Pid })
	out := make([]SweepResult, len(found))
	live := make([]int, len(found))
	for i, l := range found {
		out[i] = SweepResult{Leftover: l, Outcome: SweepGone}
		live[i] = liveMarked(l.Mark)
	}
	sweepTrees(out, grace)
	// The cgroup's TERM can end the marked processes before they are
	// counted by mark: what ran when the sweep began is what it stopped.
	for i := range out {
		out[i].Escaped = max(out[i].Escaped, live[i])
		if out[i].Escaped > 0 {
			out[i].Outcome = SweepKilled
		}
	}
	return out
}

func sweepGroups(recs []Leftover, grace time.Duration) []SweepResult {
	out := make([]SweepResult, len(recs))
	var targets []int // indexes into out
	for i, r := range recs {
		out[i] = judge(r)
		if out[i].Outcome != SweepKilled {
			continue
		}
		if err := signalGroup(r.Pgid, syscall.SIGTERM); err != nil {
			out[i].Outcome, out[i].Err = SweepFailed, err
			continue
		}
		targets = append(targets, i)
	}
	if len(targets) == 0 {
		return out
	}
	left := waitGroups(out, targets, grace)
	for _, i := range left {
		out[i].Forced = true
		if err := signalGroup(out[i].Pgid, syscall.SIGKILL); err != nil {
			out[i].Outcome, out[i].Err = SweepFailed, err
		}
	}
	// SIGKILL cannot be caught, so this wait is for the kernel only.
	for _, i := range waitGroups(out, left, 2*time.Second) {
		if out[i].Outcome == SweepKilled {
			out[i].Outcome = SweepFailed
			out[i].Err = fmt.Errorf("child: sweep: group %d still alive after SIGKILL", out[i].Pgid)
		}
	}
	return out
}

// sweepTrees stops the escaped descendants of each record, TERM then KILL
// after grace, and removes the records' cgroups.
func sweepTrees(out []SweepResult, grace time.Duration) {
	var any bool
	for i := range out {
		r := &out[i]
		if r.Cgroup != "" && !agentCgroup(r.Cgroup) {
			r.Cgroup = "" // not a cgroup this daemon made: never touched
		}
		if r.Cgroup != "" {
			(&cgroup{dir: r.Cgroup}).signal(syscall.SIGTERM)
		}
		n := signalMarked(r.Mark, 0, syscall.SIGTERM)
		if n > 0 || r.Cgroup != "" {
			r.Escaped, any = n, true
		}
	}
	if !any {
		return
	}
	left := func() bool {
		for _, r := range out {
			if liveMarked(r.Mark) > 0 || r.Cgroup != "" && !cgroupEmpty(r.Cgroup) {
				return true
			}
		}
		return false
	}
	deadline := time.Now().Add(grace)
	for left() && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	for i := range out {
		r := &out[i]
		if signalMarked(r.Mark, 0, syscall.SIGKILL) > 0 {
			r.Forced = true
		}
		if r.Cgroup != "" {
			if !cgroupEmpty(r.Cgroup) {
				r.Forced = true
				_ = (&cgroup{dir: r.Cgroup}).kill()
				waitEmpty(r.Cgroup, 2*time.Second)
			}
			if err := removeCgroup(r.Cgroup); err != nil && r.Err == nil {
				r.Err = err
			}
			// The crashed daemon's subtree, once its last agent cgroup is gone.
			_ = os.Remove(filepath.Dir(r.Cgroup))
		}
		if r.Escaped > 0 && r.Outcome == SweepGone {
			r.Outcome = SweepKilled
		}
	}
}

// agentCgroup reports whether dir is shaped like an agent cgroup a daemon
// made: <cgroup2 mount>/.../residentd-<pid>-<n>/agent-<n>.
func agentCgroup(dir string) bool {
	mount, err := cgroup2Mount()
	return err == nil && filepath.IsAbs(dir) && dir == filepath.Clean(dir) &&
		strings.HasPrefix(dir, mount+"/") &&
		strings.HasPrefix(filepath.Base(dir), "agent-") &&
		strings.HasPrefix(filepath.Base(filepath.Dir(dir)), "residentd-")
}

// judge decides whether r's group is still ours (Outcome SweepKilled, meaning
// "to be killed") or must be left alone.
func judge(r Leftover) SweepResult {
	res := SweepResult{Leftover: r}
	// kill(-1) and kill(0) would hit far more than one group.
	if r.Pid <= 1 || r.Pgid <= 1 {
		res.Outcome, res.Err = SweepUnverified, fmt.Errorf("child: sweep: implausible pid %d / pgid %d", r.Pid, r.Pgid)
		return res
	}
	if runtime.GOOS == "linux" {
		return judgeLinux(res)
	}
	return judgePortable(res)
}

func judgeLinux(res SweepResult) SweepResult {
	r := res.Leftover
	// Start ticks count from boot: a record from before a reboot can match a
	// stranger by accident, and nothing it named can still run.
	if bt, err := BootTime(); err == nil && !r.StartedAt.IsZero() && r.StartedAt.Before(bt) {
		res.Outcome = SweepGone
		return res
	}
	leader, err := Read(r.Pid)
	switch {
	case errors.Is(err, ErrNoProcess):
		// The leader died (the parent-death signal kills it with the daemon)
		// but its children may live on in the group. The kernel does not hand
		// out a pid that is still some group's id, so members of the group
		// that started after our leader are its children.
		members, err := Group(r.Pgid)
		if err != nil {
			res.Outcome, res.Err = SweepUnverified, err
			return res
		}
		if len(members) == 0 {
			res.Outcome = SweepGone
			return res
		}
		for _, m := range members {
			if m.Start < r.StartTicks {
				res.Outcome = SweepReused
				return res
			}
		}
		res.Outcome, res.Members = SweepKilled, len(members)
		return res
	case err != nil:
		res.Outcome, res.Err = SweepUnverified, err
		return res
	case leader.Start != r.StartTicks:
		res.Outcome = SweepReused
		return res
	case leader.Pgrp != r.Pgid:
		res.Outcome = SweepUnverified
		res.Err = fmt.Errorf("child: sweep: pid %d moved from group %d to %d", r.Pid, r.Pgid, leader.Pgrp)
		return res
	}
	members, err := Group(r.Pgid)
	if err != nil {
		res.Outcome, res.Err = SweepUnverified, err
		return res
	}
	res.Outcome, res.Members = SweepKilled, len(members)
	return res
}

// judgePortable checks the leader with its start time and getpgid(2); without /proc
// an orphaned group cannot be tied to the record, so it is spared.
func judgePortable(res SweepResult) SweepResult {
	r := res.Leftover
	start, err := startStamp(r.Pid)
	switch {
	case errors.Is(err, ErrNoProcess):
		if syscall.Kill(-r.Pgid, 0) == syscall.ESRCH {
			res.Outcome = SweepGone
			return res
		}
		res.Outcome, res.Err = SweepUnverified, fmt.Errorf("child: sweep: leader %d is gone but group %d lives; not verifiable here", r.Pid, r.Pgid)
		return res
	case err != nil:
		res.Outcome, res.Err = SweepUnverified, err
		return res
	case start != r.StartTicks:
		res.Outcome = SweepReused
		return res
	}
	if pg, err := syscall.Getpgid(r.Pid); err != nil || pg != r.Pgid {
		res.Outcome, res.Err = SweepUnverified, fmt.Errorf("child: sweep: pid %d is not in group %d (pgid %d, err %v)", r.Pid, r.Pgid, pg, err)
		return res
	}
	res.Outcome, res.Members = SweepKilled, 1
	return res
}

func signalGroup(pgid int, sig syscall.Signal) error {
	if pgid <= 1 {
		return fmt.Errorf("child: sweep: refusing to signal group %d", pgid)
	}
	if err := syscall.Kill(-pgid, sig); err != nil && err != syscall.ESRCH {
		return fmt.Errorf("child: sweep: %v to group %d: %w", sig, pgid, err)
	}
	return nil
}

// waitGroups polls until the groups at idx are empty or d has passed and
// returns the indexes still alive.
func waitGroups(out []SweepResult, idx []int, d time.Duration) []int {
	deadline := time.Now().Add(d)
	for {
		live := liveGroups()
		var alive []int
		for _, i := range idx {
			if live(out[i].Pgid) {
				alive = append(alive, i)
			}
		}
		if len(alive) == 0 || !time.Now().Before(deadline) {
			return alive
		}
		idx = alive
		time.Sleep(20 * time.Millisecond)
	}
}

// liveGroups takes one look at the process table and returns whether a
// group has any non-zombie member. Without /proc (or when it cannot be
// read) it asks kill(2), which also counts zombies.
func liveGroups() func(pgid int) bool {
	if runtime.GOOS == "linux" {
		if all, err := All(); err == nil {
			live := map[int]bool{}
			for _, st := range all {
				if !st.Zombie() {
					live[st.Pgrp] = true
				}
			}
			return func(pgid int) bool { return live[pgid] }
		}
	}
	return func(pgid int) bool { return syscall.Kill(-pgid, 0) != syscall.ESRCH }
}
