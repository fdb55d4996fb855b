//go:build linux

package child

import (
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/prometheus/procfs"
	"go.uber.org/zap"
	"golang.org/x/sys/unix"
)

// Subreaper makes this process a child subreaper: whatever an agent starts
// and then abandons (a double fork, a setsid child whose parent exited)
// re-parents here instead of to PID 1, so the daemon can find and reap it.
// It starts the goroutine that reaps such adopted orphans. stop ends it,
// then kills everything below this process that no live agent of its
// leads to — what stopped agents left behind, however it detached, left
// its cgroup or cleared its environment — and reaps it: call stop once the
// agents have stopped, as the daemon exits. Call Subreaper once, from the
// daemon's main, which starts nothing but agents: it changes the whole
// process.
func Subreaper(log *zap.Logger) (stop func(), err error) {
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		return func() {}, fmt.Errorf("child: become child subreaper: %w", err)
	}
	if log == nil {
		log = zap.NewNop()
	}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGCHLD)
	quit, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		// SIGCHLD can coalesce; the slow tick catches what it missed.
		t := time.NewTicker(30 * time.Second)
		defer t.Stop()
		for {
			select {
			case <-sig:
			case <-t.C:
			case <-quit:
				return
			}
			if n := reapOrphans(); n > 0 {
				log.Debug("reaped adopted orphans", zap.Int("count", n))
			}
		}
	}()
	var once sync.Once
	return func() {
		once.Do(func() {
			signal.Stop(sig)
			close(quit)
			<-done
			if n := endAdopted(5 * time.Second); n > 0 {
				log.Info("stopped processes adopted from agents' trees", zap.Int("count", n))
			}
		})
		<-done
	}, nil
}

// endAdopted SIGKILLs every live process below this one that is not in the
// tree of a live agent of this process, reaps the zombies among this
// process's children that are no agent's, and repeats until none is left
// or d has passed. It returns how many processes it killed.
func endAdopted(d time.Duration) int {
	self := os.Getpid()
	killed := map[int]bool{}
	for deadline := time.Now().Add(d); ; {
		all, err := All()
		if err != nil {
			return len(killed)
		}
		parent := make(map[int]int, len(all))
		for _, st := range all {
			parent[st.Pid] = st.Ppid
		}
		left := false
		for _, st := range all {
			if !adopted(st.Pid, self, parent) {
				continue
			}
			left = true
			if !st.Zombie() && syscall.Kill(st.Pid, syscall.SIGKILL) == nil {
				killed[st.Pid] = true
			}
		}
		reapOrphans()
		if !left || time.Now().After(deadline) {
			return len(killed)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// adopted reports whether pid is below self (parent maps each pid to its
// parent) without a live agent of this process on the way.
func adopted(pid, self int, parent map[int]int) bool {
	for range maxAncestors {
		if pid == self || lookup(pid) != nil || helper(pid) {
			return false
		}
		pp, ok := parent[pid]
		if !ok || pp <= 1 {
			return false
		}
		if pp == self {
			return true
		}
		pid = pp
	}
	return false
}

// reapOrphans reaps the zombie children of this process that it did not
// start as agents (their own reaper waits for those).
func reapOrphans() int {
	all, err := All()
	if err != nil {
		return 0
	}
	self, n := os.Getpid(), 0
	for _, st := range all {
		if st.Ppid != self || !st.Zombie() {
			continue
		}
		own.Lock()
		_, mine := own.procs[st.Pid]
		if !mine && !own.helpers[st.Pid] {
			var ws syscall.WaitStatus
			if pid, _ := syscall.Wait4(st.Pid, &ws, syscall.WNOHANG, nil); pid == st.Pid {
				n++
			}
		}
		own.Unlock()
	}
	return n
}

// signalMarked sends sig to every process carrying mark in its environment
// except skip, and returns how many it signalled.
func signalMarked(mark string, skip int, sig syscall.Signal) int {
	return countMarked(mark, func(p procfs.Proc) bool {
		return p.PID != skip && p.PID != os.Getpid() && syscall.Kill(p.PID, sig) == nil
	})
}

// liveMarked counts the live (non-zombie) processes carrying mark.
func liveMarked(mark string) int {
	return countMarked(mark, func(p procfs.Proc) bool {
		st, err := p.Stat()
		return err == nil && st.State != "Z"
	})
}

// countMarked calls f on every process carrying mark and counts those for
// which it returns true. Processes of other users cannot be read and are
// not ours; an invalid mark matches nothing.
func countMarked(mark string, f func(procfs.Proc) bool) int {
	if !validMark(mark) {
		return 0
	}
	procs, err := procfs.AllProcs()
	if err != nil {
		return 0
	}
	n := 0
	for _, p := range procs {
		if env, err := p.Environ(); err == nil && marked(env, mark) && f(p) {
			n++
		}
	}
	return n
}

// markedTrees lists, by mark, the live processes whose mark begins with
// prefix: for each mark the lowest such pid, its group and start, and its
// agent cgroup ("" when it is in none). This process, the agents it
// started and what carries their marks or a mark in skip are left out.
func markedTrees(prefix string, skip []string) []Leftover {
	procs, err := procfs.AllProcs()
	if err != nil {
		return nil
	}
	ownMarks := map[string]bool{}
	for _, m := range skip {
		ownMarks[m] = true
	}
	own.Lock()
	for _, p := range own.procs {
		ownMarks[p.mark] = true
	}
	own.Unlock()
	byMark := map[string]Leftover{}
	for _, p := range procs {
		if p.PID == os.Getpid() || lookup(p.PID) != nil {
			continue
		}
		env, err := p.Environ()
		if err != nil {
			continue // another user's, or gone
		}
		mark := markOf(env)
		if !validMark(mark) || !strings.HasPrefix(mark, prefix) || ownMarks[mark] {
			continue
		}
		st, err := p.Stat()
		if err != nil || st.State == "Z" {
			continue
		}
		if l, ok := byMark[mark]; ok && l.Pid < p.PID {
			continue
		}
		byMark[mark] = Leftover{Pid: p.PID, Pgid: st.PGRP, StartTicks: st.Starttime, Mark: mark, Cgroup: agentCgroupOf(p.PID)}
	}
	out := make([]Leftover, 0, len(byMark))
	for _, l := range byMark {
		out = append(out, l)
	}
	return out
}

// markOf is the mark in environ, "" without one.
func markOf(env []string) string {
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, MarkEnv+"="); ok {
			return v
		}
	}
	return ""
}

// agentCgroupOf is the agent cgroup pid is in, "" when it is in none: a
// marked process's agent cgroup holds its agent's tree, including what
// dropped the mark.
func agentCgroupOf(pid int) string {
	mount, err := cgroup2Mount()
	if err != nil {
		return ""
	}
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cgroup")
	if err != nil {
		return ""
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rel, ok := strings.CutPrefix(line, "0::"); ok {
			if dir := filepath.Join(mount, rel); agentCgroup(dir) {
				return dir
			}
		}
	}
	return ""
}

// setRlimits bounds a just-started agent; children inherit the limits at
// fork, and the agent's runtime has not started forking this early.
func setRlimits(pid int, l Limits) error {
	if err := unix.Prlimit(pid, unix.RLIMIT_CORE, &unix.Rlimit{}, nil); err != nil {
		return fmt.Errorf("child: no core dumps for pid %d: %w", pid, err)
	}
	if l.NoFile > 0 {
		if err := unix.Prlimit(pid, unix.RLIMIT_NOFILE, &unix.Rlimit{Cur: l.NoFile, Max: l.NoFile}, nil); err != nil {
			return fmt.Errorf("child: open-file limit %d for pid %d: %w", l.NoFile, pid, err)
		}
	}
	return nil
}
