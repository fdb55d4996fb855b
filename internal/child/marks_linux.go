//go:build linux

package child

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// hardRTTime is pid's hard RLIMIT_RTTIME, 0 when it cannot be read (the
// process is gone, or another user's).
func hardRTTime(pid int) uint64 {
	var rl unix.Rlimit
	if err := unix.Prlimit(pid, unix.RLIMIT_RTTIME, nil, &rl); err != nil {
		return 0
	}
	return rl.Max
}

// LimitMarkable reports whether this process can give its agents the
// rlimit mark of prefix: its own hard RLIMIT_RTTIME is not below it.
func LimitMarkable(prefix string) bool {
	mark := LimitMark(prefix)
	return mark != 0 && hardRTTime(os.Getpid()) >= mark
}

// setLimitMark gives a just-started agent its state file's rlimit mark
// (LimitMark) as its hard RLIMIT_RTTIME; the soft limit stays, unless it
// was above. A limit is never raised: where the daemon's own hard limit
// is below the mark the agent goes without, which the daemon said at
// startup (LimitMarkable).
func setLimitMark(pid int, prefix string) error {
	mark := LimitMark(prefix)
	if mark == 0 {
		return nil
	}
	var old unix.Rlimit
	if err := unix.Prlimit(pid, unix.RLIMIT_RTTIME, nil, &old); err != nil {
		return fmt.Errorf("child: read RLIMIT_RTTIME of pid %d: %w", pid, err)
	}
	if old.Max < mark {
		return nil
	}
	if err := unix.Prlimit(pid, unix.RLIMIT_RTTIME, &unix.Rlimit{Cur: min(old.Cur, mark), Max: mark}, nil); err != nil {
		return fmt.Errorf("child: rlimit mark for pid %d: %w", pid, err)
	}
	return nil
}
