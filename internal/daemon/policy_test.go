package daemon_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/residentd/residentd/apitype"
	"github.com/residentd/residentd/internal/config"
	"github.com/residentd/residentd/internal/daemon"
	"github.com/residentd/residentd/internal/permission"
)

// toolThoughts are the built-in agent's "tool KIND ran/refused" thoughts of
// a turn.
func toolThoughts(r result) []string {
	var out []string
	for _, ev := range r.updates {
		if ev.Update != nil && ev.Update.Kind == apitype.UpdateThought && strings.HasPrefix(ev.Update.Text, "tool ") {
			out = append(out, strings.SplitN(ev.Update.Text, " ok:", 2)[0])
		}
	}
	return out
}

// TestPolicyModeAfterRestore: the built-in agent starts every process in
// its auto mode, which runs tools unasked; under the default deny policy
// residentd sets its manual mode on the new session and again on the one a
// restarted daemon resumes (or loads, when the agent cannot resume), so
// the execution is refused both times and leaves no file.
func TestPolicyModeAfterRestore(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name, method string
		args         []string
	}{
		{"resume", "resume", nil},
		{"load", "load", []string{"--no-resume"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			h := newHarness(t, func(c *config.Config) { c.Bindings[0].Args = append(c.Bindings[0].Args, tt.args...) })
			ran := filepath.Join(h.dir, "work", "b-builtin", "builtin-tool-execute-1")
			for i, want := range []string{"cold", "restored"} {
				if i == 1 {
					h.restart()
				}
				r := h.turn(apitype.TurnRequest{Channel: "ch", Binding: "b-builtin", Text: "@agent [[tool:execute]]"})
				if r.err != nil {
					t.Fatalf("turn %d: %v", i+1, r.err)
				}
				if r.start.Shape != want {
					t.Fatalf("turn %d shape %q, want %q", i+1, r.start.Shape, want)
				}
				if got := toolThoughts(r); len(got) != 1 || got[0] != "tool execute refused" {
					t.Fatalf("turn %d (%s): tools %q, want the execution refused", i+1, want, got)
				}
				if n := testutil.ToFloat64(h.m.PolicyModesSet.WithLabelValues("b-builtin")); n != 1 {
					t.Fatalf("turn %d: %v policy modes set, want 1 on the daemon's one session", i+1, n)
				}
				if n := testutil.ToFloat64(h.m.ToolCalls.WithLabelValues("b-builtin", "execute", "refused_by_policy")); n != 1 {
					t.Fatalf("turn %d: %v executions counted refused by the policy, want 1", i+1, n)
				}
			}
			if n := testutil.ToFloat64(h.m.SessionRestores.WithLabelValues(tt.method, "ok")); n != 1 {
				t.Fatalf("%v restores by %s, want 1", n, tt.method)
			}
			if _, err := os.Stat(ran); err == nil {
				t.Fatal("the refused execution left its file")
			}
			// A warm turn keeps the mode: nothing set again.
			r := h.turn(apitype.TurnRequest{Channel: "ch", Binding: "b-builtin", Text: "@agent [[tool:execute]]"})
			if r.err != nil || r.start.Shape != "warm" || strings.Join(toolThoughts(r), ",") != "tool execute refused" {
				t.Fatalf("warm turn: %v, shape %q, tools %q", r.err, r.start.Shape, toolThoughts(r))
			}
			if n := testutil.ToFloat64(h.m.PolicyModesSet.WithLabelValues("b-builtin")); n != 1 {
				t.Fatalf("%v policy modes set after a warm turn, want still 1", n)
			}
		})
	}
}

// TestPolicyModeMovedByTheAgent: an agent that moves its own session out of
// the policy's mode (to auto, where it runs tools unasked) is put back before
// the key's next turn, so that turn's execution is asked and refused.
func TestPolicyModeMovedByTheAgent(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	r := h.turn(apitype.TurnRequest{Channel: "ch", Binding: "b-builtin", Text: "@agent [[switch-mode:auto]]"})
	if r.err != nil {
		t.Fatalf("turn 1: %v", r.err)
	}
	r = h.turn(apitype.TurnRequest{Channel: "ch", Binding: "b-builtin", Text: "@agent [[tool:execute]]"})
	if r.err != nil || r.start.Shape != "warm" {
		t.Fatalf("turn 2: %v, shape %q", r.err, r.start.Shape)
	}
	if got := toolThoughts(r); strings.Join(got, ",") != "tool execute refused" {
		t.Fatalf("after the agent moved to auto: tools %q, want the execution refused", got)
	}
	if n := testutil.ToFloat64(h.m.PolicyModesSet.WithLabelValues("b-builtin")); n != 2 {
		t.Fatalf("%v policy modes set, want 2 (the session's, then again after the agent moved)", n)
	}
	if _, err := os.Stat(filepath.Join(h.dir, "work", "b-builtin", "builtin-tool-execute-1")); err == nil {
		t.Fatal("the refused execution left its file")
	}
}

// TestPolicyReportedAtStartup: a restarted daemon reports a binding's
// policy advisory before any agent of it runs, from the agent the binding
// last started (remembered in the state file); a binding whose agent never
// started, or whose command line changed, waits for its first start.
func TestPolicyReportedAtStartup(t *testing.T) {
	t.Parallel()
	noModes := func(c *config.Config) { c.Bindings[0].Args = append(c.Bindings[0].Args, "--no-modes") }
	h := newHarness(t, noModes)
	advisory := func() *apitype.PolicyAdvisory {
		for _, p := range h.d.Status().PolicyAdvisories {
			if p.Binding == "b-builtin" {
				return &p
			}
		}
		return nil
	}
	if p := advisory(); p != nil {
		t.Fatalf("advisory before any agent of the binding started: %+v", p)
	}
	r := h.turn(apitype.TurnRequest{Channel: "ch", Binding: "b-builtin", Text: "@agent [[tool:execute]]"})
	if r.err == nil || !strings.Contains(r.err.Error(), "lists no session modes") {
		t.Fatalf("turn err %v, want the unlisted mode", r.err)
	}
	h.restart()
	if n := len(h.d.Sessions()); n != 0 {
		t.Fatalf("%d agent processes right after the restart, want none", n)
	}
	p := advisory()
	if p == nil || p.Policy != "deny" || !strings.Contains(p.Unasked, "lists no session modes") {
		t.Fatalf("advisory at startup %+v, want b-builtin's deny with the control that failed", p)
	}
	// Another command line is another agent: nothing is claimed for it.
	h.cfg.Bindings[0].Args = append(h.cfg.Bindings[0].Args, "--record", filepath.Join(h.dir, "rec.jsonl"))
	h.restart()
	if p := advisory(); p != nil {
		t.Fatalf("advisory for a changed command line: %+v", p)
	}
}

// TestPolicyEnforcedOnlyWhereProven: the built-in agent announces itself
// (--agent-info) as agents whose controls a test proves and as others.
// Only a proven name and version is reported as enforced, in the log;
// every other one is an advisory in health and the log, its kind's
// controls set all the same (the execution is still asked and refused),
// and an agent of no known kind runs the execution unasked.
func TestPolicyEnforcedOnlyWhereProven(t *testing.T) {
	t.Parallel()
	cases := []struct {
		binding string
		args    []string
		agent   string // as health names it
		unasked string // in the advisory; "" for none
		thought string
	}{
		{"b-self", nil, "residentd-builtin 1", "", "tool execute refused"},
		{"b-self2", []string{"--agent-info", "residentd-builtin@2"}, "residentd-builtin 2", "not proven for residentd-builtin 2", "tool execute refused"},
		{"b-claude049", []string{"--agent-info", "@agentclientprotocol/claude-agent-acp@0.49.0", "--ask-mode", "default"}, "@agentclientprotocol/claude-agent-acp 0.49.0", "", "tool execute refused"},
		{"b-claude0101", []string{"--agent-info", "@agentclientprotocol/claude-agent-acp@0.101.2", "--ask-mode", "default"}, "@agentclientprotocol/claude-agent-acp 0.101.2", "", "tool execute refused"},
		{"b-claude0102", []string{"--agent-info", "@agentclientprotocol/claude-agent-acp@0.102.0", "--ask-mode", "default"}, "@agentclientprotocol/claude-agent-acp 0.102.0", "proven: 0.49.x, 0.101.x", "tool execute refused"},
		{"b-claudecode", []string{"--agent-info", "@zed-industries/claude-code-acp@0.16.2", "--ask-mode", "default"}, "@zed-industries/claude-code-acp 0.16.2", "claude-code-acp 0.16.2 ran one unasked under deny", "tool execute refused"},
		{"b-gemini", []string{"--agent-info", "gemini-cli@0.61.0"}, "gemini-cli 0.61.0", "residentd knows no control", "tool execute ran"},
		{"b-nobody", []string{"--agent-info", "-"}, "(an agent that gave no agentInfo)", "residentd knows no control", "tool execute ran"},
	}
	h := newHarness(t, func(c *config.Config) {
		c.Bindings = nil
		for _, tt := range cases {
			c.Bindings = append(c.Bindings, testBinding(t, tt.binding, c.StateDir, tt.args...))
		}
	})
	core, logs := observer.New(zap.InfoLevel)
	h.log = zap.New(core)
	h.restart()
	for _, tt := range cases {
		r := h.turn(apitype.TurnRequest{Channel: "ch", Binding: tt.binding, Text: "@agent [[tool:execute]]"})
		if r.err != nil {
			t.Fatalf("%s: turn: %v", tt.binding, r.err)
		}
		if got := strings.Join(toolThoughts(r), ","); got != tt.thought {
			t.Errorf("%s (%s): tools %q, want %q", tt.binding, tt.agent, got, tt.thought)
		}
	}
	advisories := map[string]apitype.PolicyAdvisory{}
	for _, p := range h.d.Status().PolicyAdvisories {
		advisories[p.Binding] = p
	}
	for _, tt := range cases {
		p, listed := advisories[tt.binding]
		var enforced, warned bool
		for _, e := range logs.FilterField(zap.String("binding", tt.binding)).All() {
			enforced = enforced || strings.HasPrefix(e.Message, "permission policy enforced by the agent's own controls")
			warned = warned || e.Message == "policy advisory for this agent: it runs some tools without asking"
		}
		if tt.unasked == "" {
			if listed || !enforced || warned {
				t.Errorf("%s (%s): advisory %+v, logged enforced %v, advisory %v; want enforced and no advisory", tt.binding, tt.agent, p, enforced, warned)
			}
			continue
		}
		if !listed || p.Agent != tt.agent || p.Policy != "deny" || !strings.Contains(p.Unasked, tt.unasked) || enforced || !warned {
			t.Errorf("%s (%s): advisory %+v (listed %v), logged enforced %v, advisory %v; want an advisory for %q saying %q, logged as one",
				tt.binding, tt.agent, p, listed, enforced, warned, tt.agent, tt.unasked)
		}
	}
}

// TestPolicyRefusedIsNotCancelled: an agent that ends its turn with stop
// reason cancelled after a permission request was refused, as codex-acp
// does, ends the run with policy_refused naming the call, not cancelled:
// nobody cancelled it. The built-in agent's cancel-on-reject fault does
// so; refused by the deny policy, and by a person under ask. The same
// fault with nothing refused ends the turn as usual.
func TestPolicyRefusedIsNotCancelled(t *testing.T) {
	t.Parallel()
	h := newHarness(t, func(c *config.Config) {
		ask := testBinding(t, "b-ask", c.StateDir)
		ask.Permission = permission.Ask
		c.Bindings = append(c.Bindings, ask)
	})
	r := h.turn(apitype.TurnRequest{Channel: "ch", Binding: "b-builtin", Text: "@agent [[fault:cancel-on-reject]] [[tool:execute]]"})
	if code := daemon.Code(r.err); code != apitype.CodePolicyRefused || !strings.Contains(r.err.Error(), `policy "deny" refused its execute tool call "tool-1"`) ||
		!strings.Contains(r.err.Error(), "nobody cancelled the run") {
		t.Fatalf("refused by the policy: %v (code %q), want policy_refused naming the policy and the call", r.err, code)
	}
	if n := testutil.ToFloat64(h.m.Turns.WithLabelValues("cold", "cancelled")); n != 0 {
		t.Fatalf("%v turns counted cancelled, want 0", n)
	}
	if n := testutil.ToFloat64(h.m.ToolCalls.WithLabelValues("b-builtin", "execute", "refused_by_policy")); n != 1 {
		t.Fatalf("%v executions counted refused by the policy, want 1", n)
	}

	// Put to a person, who rejects it.
	rr, err := h.d.Submit(apitype.TurnRequest{Channel: "ch", Binding: "b-ask", Text: "@agent [[fault:cancel-on-reject]] [[tool:execute]]"})
	if err != nil {
		t.Fatal(err)
	}
	if err := h.d.Answer(rr.ID, waitPending(t, rr), "reject"); err != nil {
		t.Fatal(err)
	}
	end, _ := waitEnded(t, rr)
	if end.Event != apitype.EventError || end.Code != apitype.CodePolicyRefused || !strings.Contains(end.Message, "rejected when put to a person") {
		t.Fatalf("rejected by a person: %+v; want error policy_refused saying a person rejected it", end)
	}

	// Nothing refused: the fault does nothing.
	r = h.turn(apitype.TurnRequest{Channel: "ch", Binding: "b-builtin", Text: "@agent [[fault:cancel-on-reject]] [[tool:read]]"})
	if r.err == nil {
		t.Fatal("a deny policy allowed the read")
	}
	r = h.turn(apitype.TurnRequest{Channel: "ch2", Binding: "b-builtin", Text: "@agent [[fault:cancel-on-reject]] no tools"})
	if r.err != nil || r.done.StopReason != "end_turn" {
		t.Fatalf("with nothing refused: %v, stop %q; want a normal done", r.err, r.done.StopReason)
	}
}
