//go:build linux

package acp

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/residentd/residentd/internal/testkit"
	"golang.org/x/sys/unix"
)

// An agent that stops reading stdin while a large prompt is being written
// to it: the SDK's write blocks without a deadline and holds its write lock,
// so a cancelled turn must not wait on sending session/cancel. The grace
// still runs out, the agent is killed, and both turns end.
func TestCancelWhileAgentStopsReading(t *testing.T) {
	spec := builtinSpec(t)
	spec.CancelGrace = 500 * time.Millisecond
	a := start(t, spec)
	s1, s2 := newSession(t, a), newSession(t, a)

	stalled := make(chan struct{})
	var once sync.Once
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	first := make(chan error, 1)
	go func() {
		_, err := a.Prompt(ctx, s1, "[[fault:stall-stdin]]", func(u Update) {
			if u.Kind == "agent_thought_chunk" && strings.Contains(u.Text, "stalling stdin") {
				once.Do(func() { close(stalled) })
			}
		})
		first <- err
	}()
	<-stalled
	second := make(chan error, 1)
	go func() {
		_, err := a.Prompt(context.Background(), s2, strings.Repeat("x", 1<<20), nil)
		second <- err
	}()
	// The pipe to the agent fills up: the second prompt's write is stuck.
	waitPipeFull(t, a)

	cancel()
	select {
	case err := <-first:
		if err == nil || !strings.Contains(err.Error(), "did not answer session/cancel") {
			t.Errorf("cancelled turn on a stalled agent: %v, want it killed after the cancel grace", err)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("the cancelled turn was still waiting 60s later: session/cancel blocked behind the stuck write")
	}
	select {
	case err := <-second:
		if err == nil {
			t.Error("the prompt stuck in its write succeeded")
		}
	case <-time.After(60 * time.Second):
		t.Fatal("the prompt stuck in its write did not end when the agent was killed")
	}
}

// waitPipeFull polls the bytes waiting in the pipe (FIONREAD, alias TIOCINQ) to a's stdin until it
// holds a full pipe buffer (64 KiB on Linux).
func waitPipeFull(t *testing.T, a *Agent) {
	t.Helper()
	fd := int(a.proc.Stdin().(interface{ Fd() uintptr }).Fd())
	waitUntil(t, "the agent's stdin pipe to fill", func() bool {
		n, err := unix.IoctlGetInt(fd, unix.TIOCINQ)
		return err == nil && n >= 64<<10
	})
}

// waitUntil polls an external condition for up to 20s.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	testkit.WaitFor(t, 20*time.Second, cond, testkit.Waiting("%s", what))
}
