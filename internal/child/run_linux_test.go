//go:build linux

package child

import (
	"errors"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/residentd/residentd/internal/testkit"
)

// TestOrphanReaperLeavesHelpers: the orphan reaper (Subreaper) leaves the
// zombie of a child Run waits for to Run's own Wait, which then gets its
// exit status; without the registry it takes the zombie and Wait fails
// with "no child processes". Run registers its child only while it runs.
func TestOrphanReaperLeavesHelpers(t *testing.T) {
	zombie := func() *exec.Cmd {
		t.Helper()
		cmd := exec.Command("sh", "-c", "exit 3")
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		testkit.WaitFor(t, 10*time.Second, func() bool {
			st, err := Read(cmd.Process.Pid)
			return err == nil && st.Zombie() && st.Ppid == os.Getpid()
		}, testkit.Waiting("pid %d to exit", cmd.Process.Pid))
		return cmd
	}

	cmd := zombie()
	own.Lock()
	own.helpers[cmd.Process.Pid] = true
	own.Unlock()
	reapOrphans()
	err := cmd.Wait()
	own.Lock()
	delete(own.helpers, cmd.Process.Pid)
	own.Unlock()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 3 {
		t.Fatalf("a helper's Wait after the orphan reaper ran: %v, want exit status 3", err)
	}

	// Not registered: the reaper takes it, and Wait has nothing to reap.
	cmd = zombie()
	if n := reapOrphans(); n < 1 {
		t.Fatalf("the orphan reaper reaped %d zombies, want the unregistered one", n)
	}
	if err := cmd.Wait(); err == nil || errors.As(err, &ee) {
		t.Fatalf("Wait after the reaper took the zombie: %v, want a wait error", err)
	}

	if err := Run(exec.Command("sh", "-c", "exit 3")); !errors.As(err, &ee) || ee.ExitCode() != 3 {
		t.Fatalf("Run: %v, want exit status 3", err)
	}
	own.Lock()
	left := len(own.helpers)
	own.Unlock()
	if left != 0 {
		t.Fatalf("%d helpers still registered after Run returned", left)
	}
}
