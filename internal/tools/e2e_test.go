package tools_test

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/residentd/residentd/apitype"
	"github.com/residentd/residentd/client"
	"github.com/residentd/residentd/internal/config"
	"github.com/residentd/residentd/internal/session"
	"github.com/residentd/residentd/internal/testkit"
)

// fields parses the built-in agent's key=value reply.
func fields(s string) map[string]string {
	out := map[string]string{}
	for _, f := range strings.Fields(s) {
		if k, v, ok := strings.Cut(f, "="); ok {
			out[k] = v
		}
	}
	return out
}

func TestAgentFetchesTruncatedMessageThroughMCP(t *testing.T) {
	off := false
	e := newEnv(t,
		func(dir string) config.Binding { return builtinBinding(t, "b-builtin", dir) },
		func(dir string) config.Binding {
			b := builtinBinding(t, "b-notools", dir)
			b.Tools = &off
			return b
		})
	ctx := context.Background()
	long := strings.Repeat("stack frame ", 166) + "end!!!!!" // 2000 runes
	if n := len([]rune(long)); n != 2000 {
		t.Fatalf("fixture is %d runes", n)
	}
	for _, ch := range []string{"ch-e2e", "ch-off"} {
		e.put(msg(ch, "m1", 1, "the refund spec failed again"), msg(ch, "m2", 2, long), msg(ch, "m3", 3, "see the log above"),
			msg(ch, "q1", 4, "@agent why is the refund spec flaky?"))
	}

	turn := func(ch, binding string) apitype.Event {
		t.Helper()
		done, err := e.c.Turn(ctx, apitype.TurnRequest{Channel: ch, Binding: binding, MessageID: "q1", Text: "@agent why is the refund spec flaky?"}, nil)
		if err != nil {
			t.Fatalf("turn %s/%s: %v", ch, binding, err)
		}
		return done
	}
	done := turn("ch-e2e", "b-builtin")
	got := fields(done.Text)
	// The block cut m2 at 600 characters; the agent read it whole through
	// channel_history: 4 rows of the main timeline, the longest 2000 runes.
	if done.Context == nil || done.Context.Truncated != 1 {
		t.Fatalf("context %+v: want one truncated line", done.Context)
	}
	if got["history"] != "4" || got["full"] != "2000" || got["context"] != "3" {
		t.Fatalf("reply %q: want history=4 full=2000 context=3", done.Text)
	}

	key := session.Key{Channel: "ch-e2e", Binding: "b-builtin"}
	toks := e.tokens(key)
	if len(toks) != 1 || e.reg.Live() != 1 {
		t.Fatalf("tokens issued for %s: %d, live %d; want one process, one capability", key, len(toks), e.reg.Live())
	}
	// While the process lives, its capability reads its own channel only.
	if _, err := e.c.ChannelHistory(ctx, toks[0], client.HistoryQuery{}); err != nil {
		t.Fatalf("live capability: %v", err)
	}
	if _, err := e.c.ChannelHistory(ctx, toks[0], client.HistoryQuery{Channel: "ch-off"}); !client.IsCode(err, "out_of_scope") {
		t.Fatalf("live capability, other channel: %v", err)
	}

	// A binding with tools off gets no MCP server, and its agent still answers.
	offDone := turn("ch-off", "b-notools")
	if f := fields(offDone.Text); f["history"] != "" || f["context"] != "3" {
		t.Fatalf("tools-off reply %q: want no history field", offDone.Text)
	}
	if n := len(e.tokens(session.Key{Channel: "ch-off", Binding: "b-notools"})); n != 0 {
		t.Fatalf("tools-off binding was issued %d capabilities", n)
	}

	// Start fresh: the process exits and its capability dies with it.
	if _, err := e.c.Fresh(ctx, "ch-e2e", "b-builtin"); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for e.reg.Live() != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("capability still live 10s after the process was stopped")
		}
		time.Sleep(20 * time.Millisecond)
	}
	_, err := e.c.ChannelHistory(ctx, toks[0], client.HistoryQuery{})
	var ae *client.Error
	if !errors.As(err, &ae) || ae.Status != http.StatusUnauthorized || !strings.Contains(ae.Message, "revoked") {
		t.Fatalf("revoked capability after fresh: %v", err)
	}

	// The next process gets a new capability and reads the channel again.
	done = turn("ch-e2e", "b-builtin")
	if got := fields(done.Text); got["history"] != "4" || got["full"] != "2000" {
		t.Fatalf("after fresh: reply %q", done.Text)
	}
	if toks := e.tokens(key); len(toks) != 2 || toks[0] == toks[1] {
		t.Fatalf("tokens after fresh: %d", len(toks))
	}
}

// A spare spawned at the daemon's start, before any key was known, serves
// two channels' keys, each with its own channel's capability: the key's
// MCP server goes in its session request, never in the process's
// environment.
func TestSpareServesAnyKeyWithItsOwnCapability(t *testing.T) {
	ready := make(chan int, 8)
	one := 1
	e := newEnvWith(t, func(b string, pid int) { ready <- pid }, func(dir string) config.Binding {
		b := builtinBinding(t, "b-builtin", dir)
		b.Spare, b.SpareAtStart = &one, true
		return b
	})
	ctx := context.Background()
	long := strings.Repeat("stack frame ", 166) + "end!!!!!"
	e.put(msg("ch-one", "m1", 1, long), msg("ch-one", "q1", 2, "@agent why?"))
	e.put(msg("ch-two", "m1", 1, "first"), msg("ch-two", "m2", 2, long), msg("ch-two", "m3", 3, "third"), msg("ch-two", "q1", 4, "@agent why?"))
	spare := func() int {
		t.Helper()
		return testkit.Recv(t, ready, 30*time.Second, "spare ready")
	}
	for _, c := range []struct {
		ch      string
		history string
	}{{"ch-one", "2"}, {"ch-two", "4"}} {
		pid := spare()
		var started apitype.Event
		done, err := e.c.Turn(ctx, apitype.TurnRequest{Channel: c.ch, Binding: "b-builtin", MessageID: "q1", Text: "@agent why?"}, func(ev apitype.Event) {
			if ev.Event == apitype.EventStarted {
				started = ev
			}
		})
		if err != nil {
			t.Fatalf("turn %s: %v", c.ch, err)
		}
		if started.Pid != pid {
			t.Fatalf("%s: turn ran on pid %d, not the spare %d", c.ch, started.Pid, pid)
		}
		// The agent read its own channel through channel_history: the
		// rows of that channel's timeline, the long line whole.
		if got := fields(done.Text); got["history"] != c.history || got["full"] != "2000" {
			t.Fatalf("%s: reply %q, want history=%s full=2000", c.ch, done.Text, c.history)
		}
		toks := e.tokens(session.Key{Channel: c.ch, Binding: "b-builtin"})
		if len(toks) != 1 {
			t.Fatalf("%s: %d capabilities issued, want 1", c.ch, len(toks))
		}
		if _, err := e.c.ChannelHistory(ctx, toks[0], client.HistoryQuery{}); err != nil {
			t.Fatalf("%s: its capability: %v", c.ch, err)
		}
		other := map[string]string{"ch-one": "ch-two", "ch-two": "ch-one"}[c.ch]
		if _, err := e.c.ChannelHistory(ctx, toks[0], client.HistoryQuery{Channel: other}); !client.IsCode(err, "out_of_scope") {
			t.Fatalf("%s: its capability read %s: %v", c.ch, other, err)
		}
	}
}
