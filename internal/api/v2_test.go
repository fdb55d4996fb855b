package api

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/residentd/residentd/apitype"
	"github.com/residentd/residentd/internal/config"
)

// v2Bindings adds b-v1 (protocol 1), b-v2 (protocol 2) and b-auto (auto)
// of the built-in agent, sharing the built-in binding's --state.
func v2Bindings(c *config.Config) {
	base := c.Bindings[0]
	for _, p := range []struct{ id, protocol string }{{"b-v1", "1"}, {"b-v2", "2"}, {"b-auto", "auto"}} {
		b := base
		b.ID, b.Protocol = p.id, p.protocol
		b.Args = append([]string(nil), base.Args...)
		c.Bindings = append(c.Bindings, b)
	}
}

// TestProtocolsOverTheSocket: the built-in agent over ACP v1 and v2
// through the daemon and its socket: cold and warm turns answer alike,
// with each turn's own usage; over v2 background work the agent lists
// after its idle keeps the session working, what it says when the work
// ends is an agent run, and the session is idle again.
func TestProtocolsOverTheSocket(t *testing.T) {
	e := newEnv(t, v2Bindings)
	ctx := context.Background()
	for _, b := range []string{"b-v1", "b-v2", "b-auto"} {
		for i, text := range []string{"@agent one", "@agent two"} {
			ev, err := e.c.Turn(ctx, apitype.TurnRequest{Channel: "ch-" + b, Binding: b, Text: text}, nil)
			if err != nil {
				t.Fatalf("%s turn %d: %v", b, i+1, err)
			}
			if !strings.Contains(ev.Text, "turn="+string(rune('1'+i))) || ev.Usage == nil || ev.Usage.InputTokens == 0 {
				t.Fatalf("%s turn %d: %+v", b, i+1, ev)
			}
		}
	}
	feed := feedReader(t, e, 0)
	ev, err := e.c.Turn(ctx, apitype.TurnRequest{Channel: "ch-b-v2", Binding: "b-v2", Text: "@agent work on [[bg:subagent:1s]]"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	working := func() bool {
		ss, err := e.c.Sessions(ctx)
		if err != nil {
			t.Fatal(err)
		}
		i := slices.IndexFunc(ss, func(s apitype.Session) bool { return s.Channel == "ch-b-v2" })
		return i >= 0 && ss[i].Working
	}
	if !working() {
		t.Fatal("a session whose agent lists background work is not working")
	}
	var agentRun string
	for agentRun == "" {
		a := nextFeed(t, feed)
		if a.Event == apitype.FeedRunEnded && a.Kind == apitype.RunKindAgent {
			agentRun = a.RunID
		}
	}
	run, err := e.c.Run(ctx, agentRun)
	if err != nil || run.Result == nil || !strings.Contains(run.Result.Text, "background subagent") || run.Channel != "ch-b-v2" {
		t.Fatalf("agent run after the turn %s: %+v, %v", ev.RunID, run, err)
	}
	// The agent's idle with the emptied list came right after what it
	// said, before the agent run's quiet end.
	if working() {
		t.Fatal("the session still works after its background work ended and its agent run with it")
	}
}

// TestRestoreAsksStatusOverTheSocket: over v2 a restore first asks
// session/status; a saved session the agent says is gone is neither
// resumed nor loaded: the restoring event says so and a new session
// answers.
func TestRestoreAsksStatusOverTheSocket(t *testing.T) {
	var state string
	e := newEnv(t, v2Bindings, func(c *config.Config) {
		state = filepath.Join(c.StateDir, "builtin-agent")
		c.MaxLive = 1
	})
	ctx := context.Background()
	first, err := e.c.Turn(ctx, apitype.TurnRequest{Channel: "ch-a", Binding: "b-v2", Text: "@agent one"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	// Another key takes the only slot: ch-a's process is evicted.
	if _, err := e.c.Turn(ctx, apitype.TurnRequest{Channel: "ch-b", Binding: "b-v2", Text: "@agent other"}, nil); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(state, first.Native+".jsonl")); err != nil {
		t.Fatal(err)
	}
	var events []apitype.Event
	ev, err := e.c.Turn(ctx, apitype.TurnRequest{Channel: "ch-a", Binding: "b-v2", Text: "@agent again"}, func(ev apitype.Event) { events = append(events, ev) })
	if err != nil {
		t.Fatal(err)
	}
	var methods []string
	sawGone := false
	for _, x := range events {
		if x.Event == apitype.EventRestoring {
			methods = append(methods, x.Method)
			sawGone = sawGone || x.Method == "status" && x.Result == apitype.RestoreUnknown && x.Native == first.Native
		}
	}
	if !sawGone || slices.Contains(methods, "resume") || slices.Contains(methods, "load") {
		t.Fatalf("restoring events %v: want status unknown and no resume or load", methods)
	}
	if ev.Native == first.Native || !strings.Contains(ev.Text, "turn=1") {
		t.Fatalf("the turn after a gone session: native %s (was %s), text %q", ev.Native, first.Native, ev.Text)
	}
}

// TestCancelBackgroundItemOverTheSocket: the session's row lists the work
// the v2 agent left running, with what it lets be cancelled; a cancel of
// one item over the API ends it alone, and the list then leaves it out;
// a subagent (no cancel advertised) and an item of a v1 session are not
// found.
func TestCancelBackgroundItemOverTheSocket(t *testing.T) {
	e := newEnv(t, v2Bindings)
	ctx := context.Background()
	if _, err := e.c.Turn(ctx, apitype.TurnRequest{Channel: "ch", Binding: "b-auto", Text: "@agent [[bg:terminal:1h]] [[bg:tool_call:1h]] [[bg:subagent:1h]]"}, nil); err != nil {
		t.Fatal(err)
	}
	row := func() apitype.Session {
		ss, err := e.c.Sessions(ctx)
		if err != nil || len(ss) != 1 {
			t.Fatalf("sessions: %+v, %v", ss, err)
		}
		return ss[0]
	}
	s := row()
	if s.AgentState != "idle" || len(s.Background) != 3 || !s.Working {
		t.Fatalf("row after the turn: %+v", s)
	}
	ids := map[string]apitype.BackgroundItem{}
	for _, it := range s.Background {
		ids[it.Type] = it
	}
	if !ids["terminal"].Cancelable || !ids["tool_call"].Cancelable || ids["subagent"].Cancelable {
		t.Fatalf("cancelable: %+v", s.Background)
	}
	cancel := func(binding, typ, item string) int {
		code, _ := e.raw(t, "POST", "/v1/sessions/background/cancel", `{"channel_id":"ch","binding_id":"`+binding+`","type":"`+typ+`","item_id":"`+item+`"}`)
		return code
	}
	if code := cancel("b-auto", "terminal", ids["terminal"].ID); code != 200 {
		t.Fatalf("cancel the terminal: %d", code)
	}
	// The agent answered after it reported the terminal ended and the new
	// list (its updates come before its answer).
	s = row()
	if len(s.Background) != 2 || slices.ContainsFunc(s.Background, func(it apitype.BackgroundItem) bool { return it.Type == "terminal" }) {
		t.Fatalf("after cancelling the terminal: %+v", s.Background)
	}
	if code := cancel("b-auto", "tool_call", ids["subagent"].ID); code != 404 {
		t.Fatalf("cancel a subagent as a tool call: %d, want 404", code)
	}
	if code := cancel("b-auto", "subagent", ids["subagent"].ID); code != 400 {
		t.Fatalf("cancel of type subagent: %d, want 400", code)
	}
	if code := cancel("b-v1", "terminal", "term-x"); code != 404 {
		t.Fatalf("cancel on a key with no process: %d, want 404", code)
	}
}

// TestRestoreReportsASessionOpenElsewhere: a binding whose saved_session
// one key's process has open: another key's restore asks session/status
// first, which says open (another live process has it), and reports it in
// its restoring events and the session's restore report, then goes on and
// resumes it.
func TestRestoreReportsASessionOpenElsewhere(t *testing.T) {
	e := newEnv(t, func(c *config.Config) {
		b := c.Bindings[0]
		b.ID, b.Protocol, b.SavedSession = "b-shared", "2", "nat-shared"
		b.Args = append([]string(nil), b.Args...)
		state := filepath.Join(c.StateDir, "builtin-agent")
		if err := os.MkdirAll(state, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(state, "nat-shared.jsonl"), []byte(`{"session":{"id":"nat-shared","cwd":"/","mcp_servers":[]}}`+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		c.Bindings = append(c.Bindings, b)
	})
	ctx := context.Background()
	statuses := func(ch string) []string {
		var out []string
		_, err := e.c.Turn(ctx, apitype.TurnRequest{Channel: ch, Binding: "b-shared", Text: "@agent hi"}, func(ev apitype.Event) {
			if ev.Event == apitype.EventRestoring && ev.Method == "status" {
				out = append(out, ev.Result)
			}
		})
		if err != nil {
			t.Fatalf("%s: %v", ch, err)
		}
		return out
	}
	if got := statuses("ch-a"); len(got) != 0 {
		t.Fatalf("the first restore of the saved session reported %v; want nothing (saved)", got)
	}
	if got := statuses("ch-b"); !slices.Equal(got, []string{apitype.RestoreOpen}) {
		t.Fatalf("the second key's restore reported %v; want [open]", got)
	}
	ss, err := e.c.Sessions(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range ss {
		if s.Channel != "ch-b" {
			continue
		}
		if s.Restore == nil || len(s.Restore.Steps) < 2 || s.Restore.Steps[0].Method != "status" || s.Restore.Steps[0].Result != apitype.RestoreOpen || s.RestoredBy != "resume" {
			t.Fatalf("ch-b's restore report: %+v (restored by %q)", s.Restore, s.RestoredBy)
		}
		return
	}
	t.Fatalf("no session row for ch-b: %+v", ss)
}
