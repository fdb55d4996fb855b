//go:build linux

package child

import (
	"fmt"
	"os"
	"os/signal"
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
// It starts the goroutine that reaps such adopted orphans; stop ends it.
// Call it once, from the daemon's main: it changes the whole process.
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
		})
		<-done
	}, nil
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
		if !mine {
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
