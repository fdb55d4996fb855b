//go:build crashpoints

package daemon

import (
	"os"
	"strings"
	"syscall"
)

// crashAt kills the daemon at step when the file RESIDENTD_CRASH_FILE
// names holds that step, or RESIDENTD_CRASH_AT names it: the restart tests
// stop a real daemon (built with -tags crashpoints) at each step of a
// turn. A step read from the file fires once: the file is emptied first.
// The shipped binary has no such hook (crash_off.go).
func crashAt(step string) {
	if crashStep == step || crashFile != "" && fileSays(step) {
		_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
		select {} // the signal is on its way
	}
}

var (
	crashStep = os.Getenv("RESIDENTD_CRASH_AT")
	crashFile = os.Getenv("RESIDENTD_CRASH_FILE")
)

func fileSays(step string) bool {
	b, err := os.ReadFile(crashFile)
	if err != nil || strings.TrimSpace(string(b)) != step {
		return false
	}
	return os.WriteFile(crashFile, nil, 0o600) == nil
}
