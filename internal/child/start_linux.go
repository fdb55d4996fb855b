//go:build linux

package child

import (
	"os/exec"
	"runtime"
	"syscall"

	"golang.org/x/sys/unix"
)

// startCmd starts cmd in its own process group with a parent-death signal,
// and inside the cgroup cgfd names unless it is negative.
// Pdeathsig fires when the forking thread exits, so the thread is pinned
// for the fork to keep the signal tied to a live daemon thread.
func startCmd(cmd *exec.Cmd, cgfd int) error {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if cgfd >= 0 {
		cmd.SysProcAttr.UseCgroupFD, cmd.SysProcAttr.CgroupFD = true, cgfd
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	return cmd.Start()
}

// waitExited blocks until the process has exited without reaping it, so the
// group can still be signalled while the leader's pid is reserved as a zombie.
func waitExited(pid int) error {
	for {
		var info unix.Siginfo
		err := unix.Waitid(unix.P_PID, pid, &info, unix.WEXITED|unix.WNOWAIT, nil)
		if err != unix.EINTR {
			return err
		}
	}
}
