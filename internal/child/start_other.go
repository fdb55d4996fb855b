//go:build unix && !linux

package child

import (
	"errors"
	"os/exec"
	"syscall"
)

// startCmd starts cmd in its own process group; there is no parent-death
// signal outside Linux, so Close and the reaper carry the whole load.
func startCmd(cmd *exec.Cmd, _ int) error {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	return cmd.Start()
}

var errNoWaitid = errors.New("waitid without reaping is not available on this platform")

// waitExited is unavailable here; the reaper then signals the group right
// after reaping instead of before.
func waitExited(pid int) error { return errNoWaitid }
