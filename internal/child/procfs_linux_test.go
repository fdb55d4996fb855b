//go:build linux

package child

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

func TestReadSelfAndReaped(t *testing.T) {
	me, err := Read(os.Getpid())
	if err != nil || me.Ppid != os.Getppid() || me.Pgrp != syscall.Getpgrp() || me.Start == 0 || me.Zombie() {
		t.Fatalf("Read(self) = %+v, %v", me, err)
	}
	if _, err := Read(reapedPid(t)); !errors.Is(err, ErrNoProcess) {
		t.Errorf("Read(reaped pid) err = %v, want ErrNoProcess", err)
	}
}

// A child in a group of its own shows up in Group as long as it runs, and
// as a zombie child of ours (and out of Group) once it exits unreaped.
func TestGroupAndZombie(t *testing.T) {
	cmd := exec.Command("sleep", "300")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pid := cmd.Process.Pid
	reaped := false
	t.Cleanup(func() {
		if !reaped {
			cmd.Process.Kill()
			cmd.Wait()
		}
	})
	members, err := Group(pid)
	if err != nil || len(members) != 1 || members[0].Pid != pid || members[0].Ppid != os.Getpid() {
		t.Fatalf("Group(%d) = %+v, %v; want the sleep alone", pid, members, err)
	}

	// Kill without reaping: wait for the zombie through waitid(WNOWAIT),
	// which returns once the child has exited and leaves it unreaped.
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	var info unix.Siginfo
	if err := unix.Waitid(unix.P_PID, pid, &info, unix.WEXITED|unix.WNOWAIT, nil); err != nil {
		t.Fatalf("waitid: %v", err)
	}
	st, err := Read(pid)
	if err != nil || !st.Zombie() {
		t.Fatalf("after SIGKILL, before reaping: %+v, %v; want a zombie", st, err)
	}
	if members, _ := Group(pid); len(members) != 0 {
		t.Errorf("Group(%d) after exit = %+v, want no live members", pid, members)
	}
	all, err := All()
	if err != nil || !slices.ContainsFunc(all, func(s Stat) bool { return s.Pid == pid && s.Zombie() }) {
		t.Errorf("All() lacks the zombie %d (%v)", pid, err)
	}
	cmd.Wait()
	reaped = true
	if _, err := Read(pid); !errors.Is(err, ErrNoProcess) {
		t.Errorf("after reaping: %v, want ErrNoProcess", err)
	}
}

func TestBootTime(t *testing.T) {
	bt, err := BootTime()
	if err != nil || !bt.Before(time.Now()) || bt.Year() < 2000 {
		t.Fatalf("BootTime = %v, %v", bt, err)
	}
}

func TestRSS(t *testing.T) {
	n, err := RSS(os.Getpid())
	if err != nil || n < 1<<20 {
		t.Fatalf("RSS(self) = %d, %v; want at least a MiB", n, err)
	}
	if _, err := RSS(reapedPid(t)); !errors.Is(err, ErrNoProcess) {
		t.Errorf("RSS(reaped pid) err = %v, want ErrNoProcess", err)
	}
}

// The command name sits in parentheses in /proc/PID/stat and may itself hold
// spaces, parentheses and a state-like letter; the fields after it must
// still parse.
func TestReadOddCommandName(t *testing.T) {
	sleep, err := exec.LookPath("sleep")
	if err != nil {
		t.Skip("needs sleep:", err)
	}
	odd := filepath.Join(t.TempDir(), "a) (b Z 9")
	if err := os.Symlink(sleep, odd); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(odd, "300")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	st, err := Read(cmd.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	if st.Pid != cmd.Process.Pid || st.Ppid != os.Getpid() || st.Pgrp != cmd.Process.Pid || st.Zombie() || st.Start == 0 {
		t.Errorf("Read(%q) = %+v; want pid %d, parent %d, own group, running", odd, st, cmd.Process.Pid, os.Getpid())
	}
}
