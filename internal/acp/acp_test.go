package acp

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	sdk "github.com/coder/acp-go-sdk"

	"github.com/residentd/residentd/apitype"
	"github.com/residentd/residentd/internal/agent"
	"github.com/residentd/residentd/internal/child"
	"github.com/residentd/residentd/internal/permission"
	"github.com/residentd/residentd/internal/testkit"
	"go.uber.org/zap"
)

func TestMain(m *testing.M) { testkit.Main(m) }

// builtinSpec runs this test binary as the built-in agent.
func builtinSpec(t *testing.T, args ...string) Spec {
	t.Helper()
	exe := testkit.Exe(t)
	return Spec{
		Command:      exe,
		Args:         append([]string{"agent"}, args...),
		Env:          []string{"RESIDENTD_TEST_AGENT=1"},
		Dir:          t.TempDir(),
		Grace:        2 * time.Second,
		CancelGrace:  2 * time.Second,
		StartTimeout: 20 * time.Second,
	}
}

func start(t *testing.T, spec Spec) *Agent {
	t.Helper()
	a, err := Start(context.Background(), spec, zap.NewNop())
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(func() { _ = a.Close() })
	return a
}

func newSession(t *testing.T, a *Agent) string {
	t.Helper()
	native, err := a.NewSession(context.Background())
	if err != nil {
		t.Fatalf("NewSession: %v", err)
	}
	return native
}

// collector records updates; Prompt calls on sequentially, the lock is for the race detector's view of the test.
type collector struct {
	mu      sync.Mutex
	updates []Update
}

func (c *collector) on(u Update) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.updates = append(c.updates, u)
}

func (c *collector) kinds() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var ks []string
	for _, u := range c.updates {
		ks = append(ks, u.Kind)
	}
	return ks
}

func (c *collector) texts(kind string) []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var ts []string
	for _, u := range c.updates {
		if u.Kind == kind {
			ts = append(ts, u.Text)
		}
	}
	return ts
}

func count(ss []string, s string) int {
	n := 0
	for _, x := range ss {
		if x == s {
			n++
		}
	}
	return n
}

func TestPromptStreamsChunks(t *testing.T) {
	a := start(t, builtinSpec(t))
	if !a.CanLoad() {
		t.Fatal("CanLoad = false, the built-in agent advertises loadSession")
	}
	native := newSession(t, a)
	if !strings.HasPrefix(native, "nat-") {
		t.Fatalf("native id %q does not start with nat-", native)
	}
	prompt := "You are a helper.\n\nUser: hi\nAssistant: hello\nUser: again\n" +
		`{"channel_id":"ch-backend","message_id":"m026"}` + "\n- [user] a\n- [user] b"
	var c collector
	res, err := a.Prompt(context.Background(), native, prompt, c.on)
	if err != nil {
		t.Fatalf("Prompt: %v", err)
	}
	want := agent.Summary(prompt, "You are ", 1)
	if want != "builtin turn=1 framing=yes users=2 assistants=1 mention=m026 context=2" {
		t.Fatalf("unexpected summary %q", want)
	}
	if res.Text != want || res.StopReason != "end_turn" {
		t.Fatalf("result = %+v, want text %q stop end_turn", res, want)
	}
	chunks := c.texts("agent_message_chunk")
	if len(chunks) < 2 || strings.Join(chunks, "") != want {
		t.Fatalf("chunks = %q, want 2-3 chunks joining to %q", chunks, want)
	}
	if count(c.kinds(), "usage_update") != 1 {
		t.Fatalf("kinds = %v, want one usage_update", c.kinds())
	}
	if res.Usage == nil || res.Usage.InputTokens != int64(len(prompt)/4) || res.Usage.OutputTokens != int64(len(want)/4) {
		t.Fatalf("usage = %+v, want input %d output %d", res.Usage, len(prompt)/4, len(want)/4)
	}

	res, err = a.Prompt(context.Background(), native, "bare", nil)
	if err != nil {
		t.Fatalf("second Prompt: %v", err)
	}
	if !strings.HasPrefix(res.Text, "builtin turn=2 framing=no") {
		t.Fatalf("second turn text %q", res.Text)
	}
	if _, err := a.Prompt(context.Background(), "nat-never", "x", nil); err == nil {
		t.Fatal("Prompt on an unknown session succeeded")
	}
}

func TestLoadInNewProcessSwallowsReplay(t *testing.T) {
	state := t.TempDir()
	spec := builtinSpec(t, "--state", state)
	first := start(t, spec)
	native := newSession(t, first)
	for _, p := range []string{"one", "two"} {
		if _, err := first.Prompt(context.Background(), native, p, nil); err != nil {
			t.Fatalf("Prompt %q: %v", p, err)
		}
	}
	if err := first.Close(); err != nil {
		t.Fatal(err)
	}

	second := start(t, spec)
	if err := second.LoadSession(context.Background(), native); err != nil {
		t.Fatalf("LoadSession: %v", err)
	}
	var c collector
	res, err := second.Prompt(context.Background(), native, "three", c.on)
	if err != nil {
		t.Fatalf("Prompt after load: %v", err)
	}
	if !strings.HasPrefix(res.Text, "builtin turn=3 ") {
		t.Fatalf("text %q, want turn=3 (history restored)", res.Text)
	}
	if strings.Join(c.texts("agent_message_chunk"), "") != res.Text || count(c.kinds(), "other") != 0 {
		t.Fatalf("replayed history leaked into the prompt's updates: %v", c.kinds())
	}

	// Without --state a fresh process cannot load the id: a protocol error naming the session.
	bare := start(t, builtinSpec(t))
	err = bare.LoadSession(context.Background(), native)
	if !errors.Is(err, ErrProtocol) || !strings.Contains(err.Error(), native) {
		t.Fatalf("load without state: err = %v, want ErrProtocol naming %s", err, native)
	}
}

func TestNoLoadAndLoadFail(t *testing.T) {
	if start(t, builtinSpec(t, "--no-load")).CanLoad() {
		t.Fatal("CanLoad = true with --no-load")
	}
	a := start(t, builtinSpec(t, "--fault", "load-fail"))
	native := newSession(t, a)
	if err := a.LoadSession(context.Background(), native); !errors.Is(err, ErrProtocol) || !strings.Contains(err.Error(), "induced load failure") {
		t.Fatalf("load-fail: err = %v", err)
	}
	// The failed reload leaves the session the agent already had usable.
	if res, err := a.Prompt(context.Background(), native, "You are x\nUser: still there?", nil); err != nil || res.StopReason != "end_turn" {
		t.Fatalf("prompt after a failed reload of a live session: %+v, %v", res, err)
	}
}

// An agent whose descendant left the process group and keeps stdout and
// stderr open: the agent's exit must still end Start (and reap), bounded by
// the drain deadline rather than by the descendant.
func TestExitWithEscapedDescendantHoldingPipes(t *testing.T) {
	if _, err := exec.LookPath("setsid"); err != nil {
		t.Skip("setsid(1) is not installed:", err)
	}
	pidFile := filepath.Join(t.TempDir(), "escaped.pid")
	spec := Spec{
		Command: "sh", Args: []string{"-c", `setsid sh -c 'echo $$ > "$1"; exec sleep 120' sh "$0" & sleep 0.2; exit 0`, pidFile},
		Dir: t.TempDir(), Grace: time.Second, CancelGrace: time.Second, StartTimeout: 60 * time.Second,
	}
	t.Cleanup(func() {
		if b, err := os.ReadFile(pidFile); err == nil {
			if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && pid > 1 {
				syscall.Kill(pid, syscall.SIGKILL)
			}
		}
	})
	errc := make(chan error, 1)
	go func() {
		a, err := Start(context.Background(), spec, zap.NewNop())
		if a != nil {
			a.Close()
		}
		errc <- err
	}()
	select {
	case err := <-errc:
		if !errors.Is(err, ErrExited) && !errors.Is(err, ErrProtocol) {
			t.Errorf("Start of an agent that exits before initialize: %v", err)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("Start still blocked 60s after the agent exited: reap waits for the escaped descendant (sleep 120)")
	}
}

// promptTimesOut prompts with text under a 200ms deadline, which the turn
// must outlast: the prompt ends with DeadlineExceeded.
func promptTimesOut(t *testing.T, a *Agent, native, text string) Result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	res, err := a.Prompt(ctx, native, text, nil)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err = %v, want DeadlineExceeded", err)
	}
	return res
}

func TestCancelAnswered(t *testing.T) {
	a := start(t, builtinSpec(t))
	native := newSession(t, a)
	res := promptTimesOut(t, a, native, "wait [[fault:hang-turn]]")
	if res.StopReason != "cancelled" {
		t.Fatalf("stop reason %q, want cancelled", res.StopReason)
	}
	select {
	case <-a.Done():
		t.Fatal("agent that honoured cancel was killed")
	default:
	}
	if res, err := a.Prompt(context.Background(), native, "after", nil); err != nil || !strings.HasPrefix(res.Text, "builtin turn=1 ") {
		t.Fatalf("prompt after cancel: %+v, %v", res, err)
	}
}

func TestCancelIgnoredKills(t *testing.T) {
	spec := builtinSpec(t)
	spec.CancelGrace = 300 * time.Millisecond
	a := start(t, spec)
	promptTimesOut(t, a, newSession(t, a), "[[fault:hang-ignore-cancel]]")
	select {
	case <-a.Done():
	default:
		t.Fatal("agent that ignored cancel is still running")
	}
	assertGroupGone(t, a.Pid())
}

func TestCrashMidTurn(t *testing.T) {
	a := start(t, builtinSpec(t))
	native := newSession(t, a)
	var c collector
	_, err := a.Prompt(context.Background(), native, "[[fault:exit-turn]]", c.on)
	if !errors.Is(err, ErrExited) {
		t.Fatalf("err = %v, want ErrExited", err)
	}
	if !strings.Contains(err.Error(), "exit status 3") || !strings.Contains(err.Error(), "fault exit-turn") {
		t.Fatalf("error lacks exit status / stderr tail: %v", err)
	}
	if a.ExitKind() != child.ExitError || a.ExitErr() == nil {
		t.Fatalf("exit kind %q err %v, want error", a.ExitKind(), a.ExitErr())
	}
	if n := count(c.kinds(), "agent_message_chunk"); n > 1 {
		t.Fatalf("got %d chunks, the agent sent one", n)
	}
}

func TestStartFailures(t *testing.T) {
	notExec := filepath.Join(t.TempDir(), "agent.sh")
	if err := os.WriteFile(notExec, []byte("#!/bin/sh\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, cmd := range []string{"/nonexistent/residentd-agent", "residentd-no-such-agent-xyz", notExec} {
		_, err := Start(context.Background(), Spec{Command: cmd, Dir: t.TempDir()}, zap.NewNop())
		if !errors.Is(err, ErrStart) || !strings.Contains(err.Error(), cmd) {
			t.Errorf("Start(%q): err = %v, want ErrStart naming the command", cmd, err)
		}
	}
	spec := builtinSpec(t, "--fault", "exit-initialize")
	if _, err := Start(context.Background(), spec, zap.NewNop()); !errors.Is(err, ErrExited) {
		t.Errorf("exit-initialize: err = %v, want ErrExited", err)
	}
	spec = builtinSpec(t, "--fault", "slow-start", "--slow", "10s")
	spec.StartTimeout = 200 * time.Millisecond
	if _, err := Start(context.Background(), spec, zap.NewNop()); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("slow-start past StartTimeout: err = %v, want DeadlineExceeded", err)
	}
	spec = builtinSpec(t, "--fault", "exit-new")
	a := start(t, spec)
	if _, err := a.NewSession(context.Background()); !errors.Is(err, ErrExited) {
		t.Errorf("exit-new: err = %v, want ErrExited", err)
	}
}

func TestTurnFaults(t *testing.T) {
	tests := []struct {
		fault    string
		wantErr  error
		wantStop string
	}{
		{fault: "garbage-stdout", wantStop: "end_turn"},
		{fault: "flood-stderr", wantStop: "end_turn"},
		{fault: "unknown-session-update", wantStop: "end_turn"},
		{fault: "refusal", wantStop: "refusal"},
		{fault: "fail-turn", wantErr: ErrProtocol},
		{fault: "partial-json", wantErr: ErrExited},
	}
	for _, tt := range tests {
		t.Run(tt.fault, func(t *testing.T) {
			a := start(t, builtinSpec(t))
			native := newSession(t, a)
			var c collector
			res, err := a.Prompt(context.Background(), native, "[[fault:"+tt.fault+"]]", c.on)
			if tt.wantErr != nil {
				if !errors.Is(err, tt.wantErr) {
					t.Fatalf("err = %v, want %v", err, tt.wantErr)
				}
				return
			}
			if err != nil || res.StopReason != tt.wantStop || !strings.HasPrefix(res.Text, "builtin turn=1 ") {
				t.Fatalf("res %+v err %v, want stop %s", res, err, tt.wantStop)
			}
			if slices.Contains(c.texts("agent_message_chunk"), "for nobody") {
				t.Fatal("update for an unknown session reached the prompt")
			}
			if n := len(a.StderrTail()); n > 8<<10 {
				t.Fatalf("stderr tail is %d bytes, above the 8 KiB bound", n)
			}
			// The connection survived: a second turn works.
			if _, err := a.Prompt(context.Background(), native, "again", nil); err != nil {
				t.Fatalf("second prompt: %v", err)
			}
		})
	}
	t.Run("fail-turn message", func(t *testing.T) {
		a := start(t, builtinSpec(t))
		_, err := a.Prompt(context.Background(), newSession(t, a), "[[fault:fail-turn]]", nil)
		if err == nil || !strings.Contains(err.Error(), "builtin: induced failure") {
			t.Fatalf("err = %v, want the agent's message", err)
		}
	})
}

// assertGroupGone checks that no live process is left in the group. Orphaned
// members killed with the group are reaped by init asynchronously, so a
// zombie member counts as gone and the check polls for a bounded time.
func assertGroupGone(t *testing.T, pgid int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		err := syscall.Kill(-pgid, 0)
		if errors.Is(err, syscall.ESRCH) {
			return
		}
		live, perr := child.Group(pgid)
		if perr != nil {
			t.Skipf("no /proc to inspect process groups: %v", perr)
		}
		if len(live) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("process group %d still has live members %+v (kill -0: %v)", pgid, live, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestProcessGroupGoneAfterClose(t *testing.T) {
	for _, fault := range []string{"", "grandchild", "ignore-sigterm"} {
		t.Run("fault="+fault, func(t *testing.T) {
			var args []string
			if fault != "" {
				args = []string{"--fault", fault}
			}
			spec := builtinSpec(t, args...)
			spec.Grace = 300 * time.Millisecond
			a := start(t, spec)
			if _, err := a.Prompt(context.Background(), newSession(t, a), "hi", nil); err != nil {
				t.Fatalf("Prompt: %v", err)
			}
			if err := syscall.Kill(-a.Pid(), 0); err != nil {
				t.Fatalf("group not alive before Close: %v", err)
			}
			if err := a.Close(); err != nil {
				t.Fatal(err)
			}
			_ = a.Close() // idempotent
			assertGroupGone(t, a.Pid())
		})
	}
	t.Run("leader exits with grandchild", func(t *testing.T) {
		a := start(t, builtinSpec(t, "--fault", "grandchild"))
		_, err := a.Prompt(context.Background(), newSession(t, a), "[[fault:exit-turn]]", nil)
		if !errors.Is(err, ErrExited) {
			t.Fatalf("err = %v, want ErrExited", err)
		}
		<-a.Done()
		assertGroupGone(t, a.Pid())
	})
}

func TestConcurrentClose(t *testing.T) {
	a := start(t, builtinSpec(t))
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() { _ = a.Close() })
	}
	wg.Wait()
	assertGroupGone(t, a.Pid())
}

func readRecord(t *testing.T, path string) []map[string]json.RawMessage {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var lines []map[string]json.RawMessage
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var m map[string]json.RawMessage
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			t.Fatalf("record line %q: %v", sc.Text(), err)
		}
		lines = append(lines, m)
	}
	return lines
}

func TestRequestsAsSent(t *testing.T) {
	record := filepath.Join(t.TempDir(), "record.jsonl")
	spec := builtinSpec(t, "--record", record, "--state", t.TempDir())
	a := start(t, spec)
	native := newSession(t, a)
	prompt := "exact\ntext  with spaces\n"
	if _, err := a.Prompt(context.Background(), native, prompt, nil); err != nil {
		t.Fatal(err)
	}
	if err := a.LoadSession(context.Background(), native); err != nil {
		t.Fatal(err)
	}
	lines := readRecord(t, record)
	if len(lines) != 3 {
		t.Fatalf("record has %d lines, want new, prompt, load", len(lines))
	}
	wantMethods := []string{`"session/new"`, `"session/prompt"`, `"session/load"`}
	for i, l := range lines {
		if string(l["method"]) != wantMethods[i] {
			t.Errorf("line %d method %s, want %s", i, l["method"], wantMethods[i])
		}
		if string(l["mcp_servers"]) != "[]" {
			t.Errorf("line %d mcp_servers = %s, want []", i, l["mcp_servers"])
		}
		var cwd string
		_ = json.Unmarshal(l["cwd"], &cwd)
		if cwd != spec.Dir {
			t.Errorf("line %d cwd %q, want %q", i, cwd, spec.Dir)
		}
	}
	var got string
	_ = json.Unmarshal(lines[1]["prompt"], &got)
	if got != prompt || string(lines[1]["turn"]) != "1" {
		t.Errorf("recorded prompt %q turn %s, want %q turn 1", got, lines[1]["turn"], prompt)
	}
}

func TestFileSystemAndPermissions(t *testing.T) {
	outside := t.TempDir()
	secret := filepath.Join(outside, "secret.txt")
	if err := os.WriteFile(secret, []byte("secret"), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, permission, directive, wantThought, wantPermission string
	}{
		{name: "read inside", permission: "deny", directive: "[[read:inside.txt]]", wantThought: "ok: hello"},
		{name: "read outside", permission: "allow", directive: "[[read:" + secret + "]]", wantThought: "outside the agent's working directory"},
		{name: "read via symlink out", permission: "allow", directive: "[[read:link.txt]]", wantThought: "outside the agent's working directory"},
		{name: "read dotdot", permission: "allow", directive: "[[read:../" + filepath.Base(outside) + "/secret.txt]]", wantThought: "error"},
		{name: "write denied", permission: "read-only", directive: "[[write:new.txt]]", wantThought: "refused by permission policy"},
		{name: "write allowed", permission: "allow", directive: "[[write:new.txt]]", wantThought: "ok"},
		{name: "write via dangling symlink", permission: "allow", directive: "[[write:dangling.txt]]", wantThought: "error"},
		{name: "write outside", permission: "allow", directive: "[[write:" + filepath.Join(outside, "x.txt") + "]]", wantThought: "outside the agent's working directory"},
		{name: "perm deny", permission: "deny", directive: "[[permission:read]]", wantThought: "selected reject", wantPermission: "reject_once builtin read tool"},
		{name: "perm read-only read", permission: "read-only", directive: "[[permission:read]]", wantThought: "selected allow", wantPermission: "allow_once builtin read tool"},
		{name: "perm read-only execute", permission: "read-only", directive: "[[permission:execute]]", wantThought: "selected reject", wantPermission: "reject_once builtin execute tool"},
		{name: "perm allow", permission: "allow", directive: "[[permission:edit]]", wantThought: "selected allow", wantPermission: "allow_once builtin edit tool"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			spec := builtinSpec(t)
			spec.Permission = permission.Policy(tt.permission)
			if err := os.WriteFile(filepath.Join(spec.Dir, "inside.txt"), []byte("hello"), 0o600); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(secret, filepath.Join(spec.Dir, "link.txt")); err != nil {
				t.Fatal(err)
			}
			target := filepath.Join(outside, "created-through-"+strings.ReplaceAll(tt.name, " ", "-"))
			if err := os.Symlink(target, filepath.Join(spec.Dir, "dangling.txt")); err != nil {
				t.Fatal(err)
			}
			defer func() {
				if _, err := os.Lstat(target); err == nil {
					t.Errorf("a write followed a dangling symlink out of the working directory to %s", target)
				}
			}()
			a := start(t, spec)
			var c collector
			if _, err := a.Prompt(context.Background(), newSession(t, a), tt.directive, c.on); err != nil {
				t.Fatalf("Prompt: %v", err)
			}
			thoughts := strings.Join(c.texts("agent_thought_chunk"), "\n")
			if !strings.Contains(thoughts, tt.wantThought) {
				t.Fatalf("thoughts %q, want %q", thoughts, tt.wantThought)
			}
			if strings.Contains(thoughts, "ok: secret") {
				t.Fatal("a file outside the working directory was read")
			}
			if tt.wantPermission != "" {
				if got := c.texts("permission"); len(got) != 1 || got[0] != tt.wantPermission {
					t.Fatalf("permission updates %q, want %q", got, tt.wantPermission)
				}
			}
			_, statErr := os.Stat(filepath.Join(spec.Dir, "new.txt"))
			if wrote := statErr == nil; wrote != (tt.name == "write allowed") {
				t.Fatalf("new.txt exists = %v", wrote)
			}
		})
	}
}

func TestNoGoroutineLeak(t *testing.T) {
	before := runtime.NumGoroutine()
	for _, prompt := range []string{"hi", "[[fault:exit-turn]]"} {
		a, err := Start(context.Background(), builtinSpec(t), zap.NewNop())
		if err != nil {
			t.Fatal(err)
		}
		native, err := a.NewSession(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		_, _ = a.Prompt(context.Background(), native, prompt, nil)
		_ = a.Close()
	}
	deadline := time.Now().Add(10 * time.Second)
	for runtime.NumGoroutine() > before {
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<20)
			t.Fatalf("goroutines: %d before, %d after\n%s", before, runtime.NumGoroutine(), buf[:runtime.Stack(buf, true)])
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// The agent inherits the daemon's environment without the variables its
// service manager addressed to the daemon alone, plus the binding's own.
func TestAgentEnvironment(t *testing.T) {
	t.Setenv("NOTIFY_SOCKET", "/run/residentd-test-notify")
	t.Setenv("LISTEN_FDS", "1")
	t.Setenv("RESIDENTD_TEST_INHERITED", "yes")
	spec := builtinSpec(t)
	spec.Env = append(spec.Env, "RESIDENTD_TEST_EXTRA=1")
	a := start(t, spec)
	b, err := os.ReadFile("/proc/" + strconv.Itoa(a.Pid()) + "/environ")
	if err != nil {
		t.Skip("needs /proc to read the agent's environment:", err)
	}
	env := strings.Split(string(b), "\x00")
	for _, want := range []string{"RESIDENTD_TEST_INHERITED=yes", "RESIDENTD_TEST_EXTRA=1"} {
		if !slices.Contains(env, want) {
			t.Errorf("agent environment lacks %s", want)
		}
	}
	for _, kv := range env {
		if strings.HasPrefix(kv, "NOTIFY_SOCKET=") || strings.HasPrefix(kv, "LISTEN_FDS=") {
			t.Errorf("agent inherited the daemon's %s", kv)
		}
	}
}

// toUpdate sends a text chunk as its text alone; every other update keeps
// the agent's own form in raw.
func TestUpdateRawOnlyWhereTypedFieldsFallShort(t *testing.T) {
	mode := sdk.SessionUpdate{CurrentModeUpdate: &sdk.SessionCurrentModeUpdate{CurrentModeId: "plan", SessionUpdate: "current_mode_update"}}
	for _, tc := range []struct {
		name     string
		su       sdk.SessionUpdate
		kind     string
		text     string
		raw      bool
		rawHolds string
	}{
		{"text chunk", sdk.UpdateAgentMessageText("hello"), apitype.UpdateMessage, "hello", false, ""},
		{"thought", sdk.UpdateAgentThoughtText("hmm"), apitype.UpdateThought, "hmm", false, ""},
		{"image chunk", sdk.UpdateAgentMessage(sdk.ImageBlock("aGk=", "image/png")), apitype.UpdateMessage, "", true, "image/png"},
		{"tool call", sdk.StartToolCall("tc-1", "Run go test"), apitype.UpdateToolCall, "Run go test", true, "tc-1"},
		{"unknown kind", mode, apitype.UpdateOther, "", true, "current_mode_update"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			u := toUpdate(tc.su).Update
			if u.Kind != tc.kind || u.Text != tc.text || (len(u.Raw) > 0) != tc.raw || !strings.Contains(string(u.Raw), tc.rawHolds) {
				t.Fatalf("toUpdate: kind %q text %q raw %s; want kind %q text %q raw %v holding %q", u.Kind, u.Text, u.Raw, tc.kind, tc.text, tc.raw, tc.rawHolds)
			}
		})
	}
}

// TestSteer: _session/steering as claude-agent-acp 0.101 answers it, here
// from the built-in agent. With no turn running the agent answers
// promptRequired (Steer sends idleBehavior promptRequired) and Steer
// returns ErrNotSteered; while a turn runs the text joins it (injected)
// and the turn's reply counts it.
func TestSteer(t *testing.T) {
	record := filepath.Join(t.TempDir(), "record.jsonl")
	a := start(t, builtinSpec(t, "--record", record, "--state", t.TempDir()))
	if !a.CanSteer() {
		t.Fatal("the built-in agent advertises _meta.steering.supported; CanSteer is false")
	}
	native := newSession(t, a)
	ctx := context.Background()
	if err := a.Steer(ctx, native, "before any turn"); !errors.Is(err, ErrNotSteered) {
		t.Fatalf("steer with no turn running: %v, want ErrNotSteered", err)
	}
	gate := filepath.Join(t.TempDir(), "gate")
	holding := make(chan struct{}, 1)
	type answer struct {
		res Result
		err error
	}
	done := make(chan answer, 1)
	go func() {
		res, err := a.Prompt(ctx, native, "wait [[hold:"+gate+"]]", func(u Update) {
			if strings.HasPrefix(u.Text, "holding until") {
				holding <- struct{}{}
			}
		})
		done <- answer{res, err}
	}()
	select {
	case <-holding:
	case ans := <-done:
		t.Fatalf("the turn ended before it held: %+v", ans)
	}
	for _, text := range []string{"also this", "and that"} {
		if err := a.Steer(ctx, native, text); err != nil {
			t.Fatalf("steer %q into the running turn: %v", text, err)
		}
	}
	if err := os.WriteFile(gate, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	ans := <-done
	if ans.err != nil || !strings.HasSuffix(ans.res.Text, " steered=2") {
		t.Fatalf("turn: %v, text %q, want it to end with steered=2", ans.err, ans.res.Text)
	}
	var steered []string
	for _, l := range readRecord(t, record) {
		if string(l["method"]) == `"_session/steering"` {
			var p string
			_ = json.Unmarshal(l["prompt"], &p)
			steered = append(steered, p)
		}
	}
	if strings.Join(steered, "|") != "also this|and that" {
		t.Fatalf("the agent recorded steers %q, want the two texts once each", steered)
	}
	if err := a.Steer(ctx, native, "after the turn"); !errors.Is(err, ErrNotSteered) {
		t.Fatalf("steer after the turn ended: %v, want ErrNotSteered", err)
	}
}

// TestStdinClosedIsTheAgentGone: a request the SDK could not write because
// the agent's stdin is closed is the agent gone, not its answer; an
// agent's own error that happens to say "broken pipe" is its answer.
func TestStdinClosedIsTheAgentGone(t *testing.T) {
	for _, tt := range []struct {
		err  error
		want bool
	}{
		{sdk.NewInternalError(map[string]any{"error": "write |1: broken pipe"}), true},
		{sdk.NewInternalError(map[string]any{"error": "write |1: file already closed"}), true},
		{fmt.Errorf("write: %w", syscall.EPIPE), true},
		{&sdk.RequestError{Code: -32000, Message: "tool failed: broken pipe"}, false},
		{sdk.NewInternalError(map[string]any{"error": "builtin: induced failure"}), false},
		{nil, false},
	} {
		if got := stdinClosed(tt.err); got != tt.want {
			t.Errorf("stdinClosed(%v) = %v, want %v", tt.err, got, tt.want)
		}
	}
}
