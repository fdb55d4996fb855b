//go:build darwin

package child

import (
	"errors"
	"fmt"
	"syscall"

	"golang.org/x/sys/unix"
)

// startStamp is pid's start time in microseconds since the epoch, from the
// kernel's process info (sysctl kern.proc.pid).
func startStamp(pid int) (uint64, error) {
	kp, err := unix.SysctlKinfoProc("kern.proc.pid", pid)
	if errors.Is(err, syscall.ESRCH) || err == nil && kp.Proc.P_pid != int32(pid) {
		return 0, fmt.Errorf("%w: pid %d", ErrNoProcess, pid)
	}
	if err != nil {
		return 0, fmt.Errorf("child: process info of pid %d: %w", pid, err)
	}
	tv := kp.Proc.P_starttime
	return uint64(tv.Sec)*1e6 + uint64(tv.Usec), nil
}
