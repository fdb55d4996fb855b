package child

import (
	"fmt"
	"io"
	"os/exec"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/residentd/residentd/internal/testkit"
)

func startSh(t *testing.T, script string, env ...string) *Process {
	t.Helper()
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Skip("needs sh:", err)
	}
	p, err := Start(Spec{Path: sh, Args: []string{"-c", script}, Env: env, Dir: t.TempDir(), Grace: 300 * time.Millisecond, StderrTail: 64})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	return p
}

// discard reads the rest of p's stdout, as the protocol reader would; the
// reap waits up to drainLimit for it.
func discard(p *Process) { go func() { _, _ = io.Copy(io.Discard, p.Stdout()) }() }

func waitDone(t *testing.T, p *Process) {
	t.Helper()
	select {
	case <-p.Done():
	case <-time.After(30 * time.Second):
		t.Fatalf("pid %d not reaped after 30s", p.Pid())
	}
}

func TestExitKinds(t *testing.T) {
	for _, tc := range []struct {
		script string
		close  bool
		kind   string
	}{
		{"exit 0", false, ExitClean},
		{"exit 3", false, ExitError},
		{"kill -9 $$", false, ExitSignal},
		{"exec sleep 300", true, ExitSignal},
	} {
		p := startSh(t, tc.script)
		discard(p)
		if tc.close {
			_ = p.Close()
		}
		waitDone(t, p)
		if got := p.ExitKind(); got != tc.kind {
			t.Errorf("%q: ExitKind = %q, want %q (err %v)", tc.script, got, tc.kind, p.ExitErr())
		}
		if (p.ExitErr() == nil) != (tc.kind == ExitClean) {
			t.Errorf("%q: ExitErr = %v with kind %s", tc.script, p.ExitErr(), tc.kind)
		}
		if p.Stopping() != tc.close {
			t.Errorf("%q: Stopping = %v, want %v", tc.script, p.Stopping(), tc.close)
		}
	}
}

// Stdout reaches the reader whole, up to EOF, and stderr keeps its tail.
func TestPipes(t *testing.T) {
	p := startSh(t, `read line; echo "got $line"; echo "$RESIDENTD_CHILD_EXTRA"; i=0; while [ $i -lt 40 ]; do echo "noise $i" >&2; i=$((i+1)); done; echo last-words >&2`, "RESIDENTD_CHILD_EXTRA=extra")
	if _, err := io.WriteString(p.Stdin(), "ping\n"); err != nil {
		t.Fatal(err)
	}
	out, err := io.ReadAll(p.Stdout())
	if err != nil {
		t.Fatal(err)
	}
	if string(out) != "got ping\nextra\n" {
		t.Errorf("stdout = %q", out)
	}
	waitDone(t, p)
	tail := p.StderrTail()
	if len(tail) > 64 || !strings.HasSuffix(tail, "noise 39\nlast-words\n") {
		t.Errorf("stderr tail = %q (%d bytes), want the last 64 bytes", tail, len(tail))
	}
}

// A process that ignores SIGTERM is killed after the grace, and its whole
// group goes with it, including a child that outlives the leader.
func TestCloseEscalatesAndEndsTheGroup(t *testing.T) {
	p := startSh(t, `trap "" TERM; sleep 300 & echo started; wait`)
	buf := make([]byte, 8)
	if n, err := io.ReadAtLeast(p.Stdout(), buf, 8); err != nil || string(buf[:n]) != "started\n" {
		t.Fatalf("read = %q, %v", buf[:n], err)
	}
	discard(p)
	linux := runtime.GOOS == "linux" // the process table is read on Linux only
	if linux {
		members, err := Group(p.Pid())
		if err != nil || len(members) != 2 {
			t.Fatalf("group %d = %+v, %v; want the shell and its sleep", p.Pid(), members, err)
		}
	}
	var wg sync.WaitGroup
	for range 3 { // idempotent and safe concurrently
		wg.Add(1)
		go func() { defer wg.Done(); _ = p.Close() }()
	}
	wg.Wait()
	waitDone(t, p)
	if p.ExitKind() != ExitSignal {
		t.Errorf("ExitKind = %q, want signal", p.ExitKind())
	}
	if linux {
		if left, _ := Group(p.Pid()); len(left) != 0 {
			t.Errorf("group %d still has %+v after Close", p.Pid(), left)
		}
	}
}

// When the leader exits on its own, the rest of its group is killed at the reap.
func TestLeaderExitEndsTheGroup(t *testing.T) {
	p := startSh(t, `sleep 300 >/dev/null 2>&1 </dev/null & echo $!`)
	out, err := io.ReadAll(p.Stdout())
	if err != nil {
		t.Fatal(err)
	}
	waitDone(t, p)
	if p.ExitKind() != ExitClean {
		t.Errorf("ExitKind = %q, want clean", p.ExitKind())
	}
	if runtime.GOOS != "linux" {
		return
	}
	// The group was sent SIGKILL before the leader was reaped; a killed
	// process can still show in the process table for a moment on a busy
	// machine (running its exit, then a zombie of init), so the group's end
	// is awaited, bounded.
	var left []Stat
	testkit.WaitFor(t, 5*time.Second, func() bool {
		left, err = Group(p.Pid())
		return err == nil && len(left) == 0
	}, func() string {
		return fmt.Sprintf("group %d (sleep pid %s) still has %+v after the leader's reap (err %v)", p.Pid(), strings.TrimSpace(string(out)), left, err)
	})
}

func TestStartErrors(t *testing.T) {
	if _, err := Start(Spec{Path: "/nonexistent/agent"}); err == nil || !strings.Contains(err.Error(), `child: start "/nonexistent/agent"`) {
		t.Errorf("Start(missing) = %v", err)
	}
	if _, err := Start(Spec{Path: t.TempDir()}); err == nil || !strings.Contains(err.Error(), "executable") {
		t.Errorf("Start(dir) = %v", err)
	}
}

// TestOnExitRunsOnceAfterDone: the reaper runs the exit callback once,
// after Done has closed and with the exit kind known; a callback set on a
// process already reaped runs at once.
func TestOnExitRunsOnceAfterDone(t *testing.T) {
	p := startSh(t, "read line; exit 0")
	discard(p)
	ran := make(chan string, 2)
	p.OnExit(func() {
		select {
		case <-p.Done():
		default:
			t.Error("exit callback ran before Done closed")
		}
		ran <- p.ExitKind()
	})
	p.Stdin().Close() // the script's read ends: it exits cleanly
	select {
	case kind := <-ran:
		if kind != ExitClean {
			t.Fatalf("exit kind in the callback = %q, want %q", kind, ExitClean)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("exit callback did not run")
	}
	waitDone(t, p)
	late := false
	p.OnExit(func() { late = true })
	if !late {
		t.Fatal("a callback set after the reap did not run at once")
	}
	if len(ran) != 0 {
		t.Fatal("the first callback ran twice")
	}
}
