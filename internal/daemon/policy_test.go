package daemon_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/residentd/residentd/apitype"
	"github.com/residentd/residentd/internal/config"
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
				if n := testutil.ToFloat64(h.m.ToolCalls.WithLabelValues("b-builtin", "execute", "true")); n != 1 {
					t.Fatalf("turn %d: %v asked executions counted, want 1", i+1, n)
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
