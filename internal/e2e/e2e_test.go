// Package e2e runs the residentd binary as a user would and kills it the
// ways a machine does, checking what survives on disk and in the process table.
package e2e

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/residentd/residentd/apitype"
	"github.com/residentd/residentd/client"
	"github.com/residentd/residentd/internal/channel"
	"github.com/residentd/residentd/internal/session"
	"github.com/residentd/residentd/internal/store"
	"github.com/residentd/residentd/internal/testkit"
)

var bin string // the residentd binary under test

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "rd-e2e")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	bin = filepath.Join(dir, "residentd")
	// serve given no --config reads the default config file: not the one
	// of the person running the tests (this folder holds none).
	os.Setenv("XDG_CONFIG_HOME", filepath.Join(dir, "config"))
	// With the crash points the restart tests kill the daemon at (crash.go
	// in internal/daemon); the shipped binary has none.
	if out, err := exec.Command("go", "build", "-tags", "crashpoints", "-o", bin, "github.com/residentd/residentd/cmd/residentd").CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "go build residentd: %v\n%s", err, out)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

type node struct {
	t     *testing.T
	state string
	sock  string
	cmd   *exec.Cmd
	c     *client.Client
	posts int      // messages posted so far: each gets a later created_at
	env   []string // added to the daemon's environment
}

func newNode(t *testing.T) *node {
	return &node{t: t, state: t.TempDir(), sock: filepath.Join(testkit.ShortDir(t), "s", "residentd.sock")}
}

func (n *node) start(args ...string) {
	n.t.Helper()
	n.cmd = exec.Command(bin, append([]string{"serve", "--state", n.state, "--socket", n.sock, "--log-format", "json"}, args...)...)
	log, err := os.Create(filepath.Join(n.state, fmt.Sprintf("daemon-%d.log", time.Now().UnixNano())))
	if err != nil {
		n.t.Fatal(err)
	}
	n.cmd.Stderr = log
	if len(n.env) > 0 {
		n.cmd.Env = append(os.Environ(), n.env...)
	}
	if err := n.cmd.Start(); err != nil {
		n.t.Fatal(err)
	}
	log.Close()
	cmd := n.cmd
	n.t.Cleanup(func() {
		if cmd.ProcessState == nil {
			cmd.Process.Kill()
			cmd.Wait()
		}
	})
	n.c = &client.Client{Socket: n.sock}
	deadline := time.Now().Add(20 * time.Second)
	for {
		if _, err := n.c.Health(context.Background()); err == nil {
			return
		}
		if time.Now().After(deadline) {
			n.t.Fatalf("daemon did not come up on %s", n.sock)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (n *node) post(ch string, ids ...string) {
	n.t.Helper()
	var msgs []apitype.Message
	for _, id := range ids {
		n.posts++
		at := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC).Add(time.Duration(n.posts) * time.Second)
		msgs = append(msgs, apitype.Message{ID: id, Channel: ch, Author: "carla", AuthorKind: apitype.AuthorUser, Body: "line " + id, CreatedAt: at})
	}
	if _, err := n.c.PutMessages(context.Background(), msgs); err != nil {
		n.t.Fatal(err)
	}
}

// hang starts a turn the agent never finishes and returns its agent pid
// and the channel that will carry the turn's end.
func (n *node) hang(ch string) (int, <-chan error) {
	n.t.Helper()
	req := apitype.TurnRequest{Channel: ch, Binding: "b-builtin", MessageID: "h-" + ch, Text: "@agent [[fault:hang-turn]]"}
	return n.background("hanging", req, func(ev apitype.Event) int {
		if ev.Event == "started" {
			return ev.Pid
		}
		return 0
	})
}

// holdTurn starts run id, a turn that waits until file exists, and
// returns, once the agent holds the prompt, its agent pid and the channel that will carry the turn's end.
func (n *node) holdTurn(ch, id, file string) (int, <-chan error) {
	n.t.Helper()
	req := apitype.TurnRequest{Channel: ch, Binding: "b-builtin", MessageID: "h-" + ch, RunID: id, Text: "@agent [[hold:" + file + "]]"}
	started := 0
	return n.background("held", req, func(ev apitype.Event) int {
		switch {
		case ev.Event == "started":
			started = ev.Pid
		case ev.Event == "update" && started != 0:
			// The agent holds: it has the prompt.
			p := started
			started = 0
			return p
		}
		return 0
	})
}

// background runs the turn req in the background and returns, once ready
// picks the agent's pid out of one of its events, that pid and the channel
// that will carry the turn's end. what names the turn in a failure.
func (n *node) background(what string, req apitype.TurnRequest, ready func(apitype.Event) int) (int, <-chan error) {
	n.t.Helper()
	pid := make(chan int, 1)
	done := make(chan error, 1)
	go func() {
		_, err := n.c.Turn(context.Background(), req, func(ev apitype.Event) {
			if p := ready(ev); p != 0 {
				pid <- p
			}
		})
		done <- err
	}()
	select {
	case p := <-pid:
		return p, done
	case err := <-done:
		n.t.Fatalf("%s turn ended before it started: %v", what, err)
	case <-time.After(20 * time.Second):
		n.t.Fatalf("%s turn never started", what)
	}
	return 0, nil
}

func assertGone(t *testing.T, pid int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !errors.Is(syscall.Kill(-pid, 0), syscall.ESRCH) {
		if time.Now().After(deadline) {
			t.Fatalf("agent group %d outlived the daemon", pid)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func watermarkKey(ch string) channel.WatermarkKey {
	return channel.WatermarkKey{Key: session.Key{Channel: ch, Binding: "b-builtin"}}
}

// TestSIGKILLMidTurn: a daemon killed during a turn leaves a clean bbolt
// file, no staged watermark committed, no agent alive, and the earlier
// conversation intact; the restarted daemon restores the session (to
// retry the interrupted turn, its first on the key).
func TestSIGKILLMidTurn(t *testing.T) {
	n := newNode(t)
	n.start()
	n.post("ch", "a1", "a2")
	n.post("ch", "q1")
	if _, err := n.c.Turn(context.Background(), apitype.TurnRequest{Channel: "ch", Binding: "b-builtin", MessageID: "q1", Text: "line q1"}, nil); err != nil {
		t.Fatal(err)
	}
	n.post("ch", "b1", "b2")
	hold := filepath.Join(n.state, "hold")
	pid, done := n.holdTurn("ch", "run-held", hold)
	if err := n.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	n.cmd.Wait()
	if err := <-done; err == nil {
		t.Fatal("the turn of a killed daemon succeeded")
	}
	assertGone(t, pid) // Pdeathsig

	st, err := store.Open(filepath.Join(n.state, "residentd.db"), store.Options{})
	if err != nil {
		t.Fatalf("bbolt after SIGKILL: %v", err)
	}
	if err := st.Check(); err != nil {
		t.Fatalf("store check after SIGKILL: %v", err)
	}
	wm, ok, err := st.Watermark(watermarkKey("ch"))
	if err != nil || !ok {
		t.Fatalf("watermark of the good turn: %v %v", ok, err)
	}
	// a1, a2 and q1 arrived as 1..3, b1 and b2 as 4 and 5.
	if wm.Seq != 3 {
		t.Fatalf("the killed turn's staged watermark was committed: %+v", wm)
	}
	conv, err := st.Conversation(session.Key{Channel: "ch", Binding: "b-builtin"})
	if err != nil || len(conv) != 2 || conv[0].Role != "user" || conv[1].Role != "assistant" {
		t.Fatalf("conversation after SIGKILL: %d turns %v", len(conv), err)
	}
	st.Close()

	if err := os.WriteFile(hold, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	n.start() // replaces the stale socket
	// The interrupted turn runs again, as the key's first turn.
	ev, err := n.c.Follow(context.Background(), "run-held", 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	// b1, b2 were never shown to a successful run; q1 was its payload.
	if ev.Shape != "restored" || ev.Context == nil || ev.Context.Header != "new" || ev.Context.Lines != 2 {
		t.Fatalf("after restart: shape %s context %+v", ev.Shape, ev.Context)
	}
	if r, err := n.c.Run(context.Background(), "run-held"); err != nil || r.Attempt != 2 {
		t.Fatalf("the interrupted run: attempt %d, %v", r.Attempt, err)
	}
	n.post("ch", "q3")
	if ev, err = n.c.Turn(context.Background(), apitype.TurnRequest{Channel: "ch", Binding: "b-builtin", MessageID: "q3", Text: "line q3"}, nil); err != nil || ev.Shape != "warm" {
		t.Fatalf("the next turn: %+v %v", ev, err)
	}
	n.cmd.Process.Signal(syscall.SIGTERM)
	n.cmd.Wait()
}

// TestSIGTERMWithTurnsInFlight: turns in flight end with a clear error
// within the shutdown grace, their watermarks are discarded, every agent
// stops, and the daemon exits 0.
func TestSIGTERMWithTurnsInFlight(t *testing.T) {
	n := newNode(t)
	n.start("--shutdown-grace", "3s")
	n.post("ch-1", "a1")
	n.post("ch-2", "c1")
	pid1, done1 := n.hang("ch-1")
	pid2, done2 := n.hang("ch-2")
	if err := n.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	for _, done := range []<-chan error{done1, done2} {
		select {
		case err := <-done:
			if !client.IsCode(err, "shutting_down") && !client.IsCode(err, "cancelled") {
				t.Fatalf("turn in flight at SIGTERM: %v, want shutting_down", err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("a turn in flight outlived the shutdown grace")
		}
	}
	exited := make(chan error, 1)
	go func() { exited <- n.cmd.Wait() }()
	select {
	case err := <-exited:
		if err != nil {
			t.Fatalf("daemon exit: %v", err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("daemon did not exit after SIGTERM")
	}
	assertGone(t, pid1)
	assertGone(t, pid2)
	if _, err := os.Lstat(n.sock); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("socket left behind after a clean stop: %v", err)
	}
	st, err := store.Open(filepath.Join(n.state, "residentd.db"), store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if err := st.Check(); err != nil {
		t.Fatal(err)
	}
	for _, ch := range []string{"ch-1", "ch-2"} {
		if wm, ok, err := st.Watermark(watermarkKey(ch)); err != nil || ok {
			t.Fatalf("%s: a cancelled turn committed a watermark %+v (%v)", ch, wm, err)
		}
	}
}
