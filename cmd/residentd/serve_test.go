package main

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/residentd/residentd/apitype"
	"github.com/residentd/residentd/internal/child"
	"github.com/residentd/residentd/internal/store"
)

func TestNotifyReadyStatusStopping(t *testing.T) {
	dir := sockDir(t)
	npath := filepath.Join(dir, "notify")
	nl, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: npath, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	defer nl.Close()
	// Large enough that the daemon's writes never wait on the test.
	msgs := make(chan string, 4096)
	go func() {
		defer close(msgs)
		buf := make([]byte, 4096)
		for {
			n, err := nl.Read(buf)
			if err != nil {
				return
			}
			msgs <- string(buf[:n])
		}
	}()
	var seen []string
	next := func(prefix string) string {
		t.Helper()
		timeout := time.After(30 * time.Second)
		for {
			select {
			case m, ok := <-msgs:
				if !ok {
					t.Fatalf("notify socket closed; seen %q", seen)
				}
				seen = append(seen, m)
				if strings.HasPrefix(m, prefix) {
					return m
				}
			case <-timeout:
				t.Fatalf("no %s notification; seen %q", prefix, seen)
			}
		}
	}

	sock := filepath.Join(dir, "s.sock")
	// A 200ms watchdog makes the daemon ping (and report status) every 100ms.
	p := startProc(t, serveArgs(t.TempDir(), sock), childEnv("NOTIFY_SOCKET="+npath, "WATCHDOG_USEC=200000"))

	if m := next(""); m != "READY=1" {
		t.Fatalf("first notification %q, want READY=1", m)
	}
	// READY means serving: the socket must answer at once, no retry.
	h, err := dial(t, sock).Health(context.Background())
	if err != nil {
		t.Fatalf("socket not connectable after READY=1: %v", err)
	}
	if h.Pid != p.cmd.Process.Pid {
		t.Errorf("health pid %d, child pid %d", h.Pid, p.cmd.Process.Pid)
	}
	if st := next("STATUS="); !strings.Contains(st, "live") {
		t.Errorf("status %q", st)
	}
	next("WATCHDOG=1")

	p.terminate()
	next("STOPPING=1")
	if code := p.wait(t, 20*time.Second); code != exitOK {
		t.Errorf("exit code %d after SIGTERM, want 0. Output:\n%s", code, p.out.String())
	}
}

func TestSocketActivation(t *testing.T) {
	dir := sockDir(t)
	path := filepath.Join(dir, "act.sock")
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	// The socket file belongs to the "service manager" (the test): closing
	// our copy must not unlink it from under the daemon.
	l.SetUnlinkOnClose(false)
	f, err := l.File()
	if err != nil {
		t.Fatal(err)
	}
	l.Close()
	unused := filepath.Join(dir, "flag.sock")
	p := startProc(t, serveArgs(t.TempDir(), unused), childEnv("LISTEN_FDS=1", "LISTEN_FDNAMES=residentd.socket", "RESIDENTD_TEST_LISTEN_PID=1"), f)
	f.Close()

	h := waitHealthy(t, p, path)
	if h.Pid != p.cmd.Process.Pid {
		t.Errorf("health pid %d, child pid %d", h.Pid, p.cmd.Process.Pid)
	}
	notBound(t, unused)
	p.waitOutput(t, 30*time.Second, "using socket-activated listener")
}

func TestSecondDaemonOnSameStateFailsFast(t *testing.T) {
	first := startDaemon(t, serveOpts{})
	state, sock := first.state, first.sock

	second := first.again(t)
	if code := second.wait(t, 30*time.Second); code != exitLocked {
		t.Fatalf("second daemon exit code %d, want %d. Output:\n%s", code, exitLocked, second.out.String())
	}
	if out := second.out.String(); !strings.Contains(out, "locked by another") || !strings.Contains(out, state) {
		t.Errorf("second daemon's message does not say the state is locked, or where:\n%s", out)
	}
	// The first keeps its socket and keeps serving.
	if fi, err := os.Lstat(sock); err != nil || fi.Mode()&os.ModeSocket == 0 {
		t.Fatalf("first daemon's socket is gone: %v", err)
	}
	h, err := dial(t, sock).Health(context.Background())
	if err != nil || h.Pid != first.cmd.Process.Pid {
		t.Fatalf("first daemon after the second's attempt: %+v, %v", h, err)
	}
}

func TestLogLevelChangesAtRunTime(t *testing.T) {
	p := startDaemon(t, serveOpts{})
	sock := p.sock
	ctx := context.Background()
	c := dial(t, sock)
	turn := func(text string) {
		t.Helper()
		if _, err := c.Turn(ctx, apitype.TurnRequest{Channel: "ch", Binding: "b-builtin", Text: text}, nil); err != nil {
			t.Fatalf("turn %q: %v", text, err)
		}
	}
	logLevel := func(args ...string) string {
		t.Helper()
		var out bytes.Buffer
		if err := execCommand("log-level", append([]string{"--socket", sock}, args...), &out); err != nil {
			t.Fatalf("log-level %q: %v", args, err)
		}
		return strings.TrimSpace(out.String())
	}

	if got := logLevel(); got != "info" {
		t.Fatalf("log-level = %q, want info", got)
	}
	turn("@agent marker-before")
	if got := logLevel("debug"); got != "debug" {
		t.Fatalf("log-level debug printed %q", got)
	}
	turn("@agent marker-after")
	if got := logLevel(); got != "debug" {
		t.Fatalf("log-level after the change = %q", got)
	}
	var out bytes.Buffer
	if err := execCommand("log-level", []string{"--socket", sock, "loud"}, &out); err == nil {
		t.Error("log-level accepted an unknown level")
	}
	if p.stop(20*time.Second) != nil {
		t.Fatal("daemon did not stop")
	}

	// The debug "prompt" line exists for the second turn only.
	var prompts []string
	changed := false
	for _, e := range p.logLines() {
		switch e["msg"] {
		case "prompt":
			if e["level"] != "debug" {
				t.Errorf("prompt line at level %v", e["level"])
			}
			prompts = append(prompts, fmt.Sprint(e["prompt"]))
		case "log level changed":
			changed = true
		}
	}
	if len(prompts) != 1 || !strings.Contains(prompts[0], "marker-after") {
		t.Errorf("debug prompt lines: %q; want exactly the one for the turn after the change", prompts)
	}
	if !changed {
		t.Error("no \"log level changed\" line")
	}
}

// running reports whether pid is a live, non-zombie process with ticks.
func running(pid int, ticks uint64) bool {
	st, err := child.Read(pid)
	return err == nil && st.Start == ticks && !st.Zombie()
}

// A daemon killed with agents running leaves their children behind; the
// next daemon on the same state stops them before serving, and spares a
// process whose recorded pid was recycled.
func TestRestartSweepsLeftoversOfACrash(t *testing.T) {
	if _, err := os.Stat("/proc/self/stat"); err != nil {
		t.Skip("needs /proc to find the agent's grandchild:", err)
	}
	crashed := serveGrandchildAgent(t)
	state := crashed.state
	c := dial(t, crashed.sock)
	agentPid := 0
	_, err := c.Turn(context.Background(), apitype.TurnRequest{Channel: "ch", Binding: "b-grand", Text: "@grand hi"}, func(ev apitype.Event) {
		if ev.Event == "started" {
			agentPid = ev.Pid
		}
	})
	if err != nil || agentPid == 0 {
		t.Fatalf("turn: %v (agent pid %d)", err, agentPid)
	}
	// The grandchild shares the agent's process group.
	grand, grandTicks := grandchild(t, agentPid)

	crashed.cmd.Process.Kill()
	<-crashed.done
	if !running(grand, grandTicks) {
		t.Fatal("the grandchild did not outlive the crashed daemon; nothing to sweep")
	}

	// A stranger whose pid is on record with other start ticks.
	stranger := exec.Command("sleep", "300")
	if err := stranger.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stranger.Process.Kill(); stranger.Wait() })
	sTicks, err := child.StartTicks(stranger.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	st, err := store.Open(filepath.Join(state, "residentd.db"), store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	recs, _ := st.Agents()
	if len(recs) != 1 || recs[0].Pid != agentPid {
		st.Close()
		t.Fatalf("records after the crash: %+v, want agent %d", recs, agentPid)
	}
	err = st.RecordAgent(store.AgentRecord{Pid: stranger.Process.Pid, Pgid: stranger.Process.Pid, StartTicks: sTicks + 1, Command: "sleep", StartedAt: time.Now()})
	st.Close()
	if err != nil {
		t.Fatal(err)
	}

	next := crashed.again(t)
	waitHealthy(t, next, crashed.sock)
	// The sweep runs before the daemon serves.
	if running(grand, grandTicks) {
		t.Errorf("grandchild %d of the crashed daemon's agent survived the restart. Output:\n%s", grand, next.out.String())
	}
	if !running(stranger.Process.Pid, sTicks) {
		t.Error("the stranger with a recycled pid on record was killed")
	}
	next.waitOutput(t, 30*time.Second, "stopped a leftover agent group", "spared", `"stopped":1`, `"spared":1`)
	if next.stop(20*time.Second) != nil {
		t.Fatal("daemon did not stop")
	}
	st, err = store.Open(filepath.Join(state, "residentd.db"), store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if recs, err := st.Agents(); err != nil || len(recs) != 0 {
		t.Errorf("records after the sweep and a clean stop: %+v, %v", recs, err)
	}
}

// A daemon killed mid-turn, before any commit carried its new agent's
// record (RecordAgent waits for the next write), leaves that agent's
// children behind with no record of them; the next daemon on the same
// state finds them by the state file's mark prefix and stops them before
// serving.
func TestRestartSweepsUnrecordedAgentOfACrash(t *testing.T) {
	if _, err := os.Stat("/proc/self/environ"); err != nil {
		t.Skip("needs /proc to read the leftovers' marks:", err)
	}
	crashed := serveGrandchildAgent(t)
	state := crashed.state
	// The turn hangs in the agent: its run is accepted, its agent started,
	// and nothing has committed the agent's record when the daemon dies.
	started := make(chan int, 1)
	turned := make(chan error, 1)
	c := dial(t, crashed.sock)
	go func() {
		_, err := c.Turn(context.Background(), apitype.TurnRequest{Channel: "ch", Binding: "b-grand", Text: "@grand hang [[fault:hang-turn]]"}, func(ev apitype.Event) {
			if ev.Event == "started" {
				started <- ev.Pid
			}
		})
		turned <- err
	}()
	var agentPid int
	select {
	case agentPid = <-started:
	case err := <-turned:
		t.Fatalf("the turn ended before it started: %v", err)
	case <-crashed.done:
		t.Fatalf("the daemon exited. Output:\n%s", crashed.out.String())
	}
	grand, grandTicks := grandchild(t, agentPid)

	crashed.cmd.Process.Kill()
	<-crashed.done
	<-turned
	if !running(grand, grandTicks) {
		t.Fatal("the grandchild did not outlive the crashed daemon; nothing to sweep")
	}
	st, err := store.Open(filepath.Join(state, "residentd.db"), store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	recs, err := st.Agents()
	prefix := st.MarkPrefix()
	st.Close()
	if err != nil || len(recs) != 0 {
		t.Fatalf("records after the crash: %+v %v, want none (the agent's record was to ride the turn's commit)", recs, err)
	}
	env, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", grand))
	if err != nil || !strings.Contains(string(env), child.MarkEnv+"="+prefix) {
		t.Fatalf("the grandchild's environment does not carry the state's mark prefix %s (%v)", prefix, err)
	}

	next := crashed.again(t)
	waitHealthy(t, next, crashed.sock)
	// The sweep runs before the daemon serves.
	if running(grand, grandTicks) {
		t.Errorf("grandchild %d of the crashed daemon's unrecorded agent survived the restart. Output:\n%s", grand, next.out.String())
	}
	next.waitOutput(t, 30*time.Second, "stopped an unrecorded leftover agent", `"unrecorded":1`, `"stopped":1`)
	if next.stop(20*time.Second) != nil {
		t.Fatal("daemon did not stop")
	}
}

// grandchild is the process in agent's group other than the agent, and
// its start stamp; the test's end kills it if it still runs.
func grandchild(t *testing.T, agentPid int) (int, uint64) {
	t.Helper()
	grand := 0
	members, err := child.Group(agentPid)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range members {
		if m.Pid != agentPid {
			grand = m.Pid
		}
	}
	if grand == 0 {
		t.Fatalf("no grandchild in agent %d's group", agentPid)
	}
	ticks, err := child.StartTicks(grand)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if running(grand, ticks) {
			syscall.Kill(grand, syscall.SIGKILL)
		}
	})
	return grand, ticks
}

// serveGrandchildAgent starts a healthy `residentd serve` whose one
// binding, b-grand, is the built-in agent that starts a grandchild in its
// process group.
func serveGrandchildAgent(t *testing.T) *daemonProc {
	t.Helper()
	return startDaemon(t, serveOpts{config: `{"bindings": [{"id": "b-grand", "handle": "@grand", "runtime": "builtin:test", "command": $EXE,
		"args": ["agent", "--fault", "grandchild"], "supervised": true, "resident": true, "tools": false, "spare": 0}]}`})
}
