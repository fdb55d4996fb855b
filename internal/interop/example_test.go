package interop

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/residentd/residentd/internal/config"
)

// exampleBinding runs the acp-go-sdk example agent, a second real peer: it
// streams canned text and tool calls and asks one permission.
func exampleBinding(t *testing.T) config.Binding {
	t.Helper()
	return config.Binding{
		ID: "b-example", Handle: "@example", Runtime: "acp-go-sdk-example",
		Command: realAgent(t, "bin/acp-example-agent"), System: "You are @example.", Supervised: true, Resident: true,
		Spare: new(int), // the test counts the processes its turns start
	}
}

// TestExampleAgentTurns: initialize, session/new and a streamed prompt, cold
// then warm; the agent does not advertise loadSession, so after a restart
// the key starts cold again with the full replay.
func TestExampleAgentTurns(t *testing.T) {
	t.Parallel() // mostly the agent's own pauses: overlap them with the other tests
	h := newHarness(t, exampleBinding(t))
	ctx := testCtx(t)

	r1 := h.mention(ctx, "ch", "b-example", "q1", "@example tidy the config")
	if r1.err != nil {
		t.Fatalf("cold turn: %v", r1.err)
	}
	t.Logf("acp-go-sdk example agent cold turn through residentd: ready %v, total %v", r1.ready, r1.total)
	exampleReply(t, r1, "cold")
	// residentd knows no control of this agent: its deny policy is advisory,
	// and health says so once the agent said who it is.
	advisory := false
	for _, p := range h.d.Status().PolicyAdvisories {
		advisory = advisory || p.Binding == "b-example" && p.Policy == "deny" && p.Advisory == "policy advisory for this agent: it runs some tools without asking" && p.Unasked != ""
	}
	if !advisory {
		t.Fatalf("health's policy advisories %+v lack b-example", h.d.Status().PolicyAdvisories)
	}

	r2 := h.mention(ctx, "ch", "b-example", "q2", "@example and again")
	if r2.err != nil {
		t.Fatalf("warm turn: %v", r2.err)
	}
	t.Logf("acp-go-sdk example agent warm turn through residentd: total %v", r2.total)
	exampleReply(t, r2, "warm")
	if r2.start.Pid != r1.start.Pid || r2.done.Native != r1.done.Native {
		t.Fatalf("warm turn went elsewhere: pid %d native %s, want pid %d native %s", r2.start.Pid, r2.done.Native, r1.start.Pid, r1.done.Native)
	}

	h.restart()
	r3 := h.mention(ctx, "ch", "b-example", "q3", "@example after a restart")
	if r3.err != nil {
		t.Fatalf("turn after restart: %v", r3.err)
	}
	// No loadSession capability: no restore is tried, the saved id is replaced.
	exampleReply(t, r3, "cold")
	if r3.done.Native == r1.done.Native || restores(h) != 0 {
		t.Fatalf("after restart: native %s (was %s), restores %v; want a new session and no load attempt", r3.done.Native, r1.done.Native, restores(h))
	}
}

// exampleReply asserts the example agent's turn streamed its canned text and
// that residentd's deny policy rejected its permission request.
func exampleReply(t *testing.T, r result, shape string) {
	t.Helper()
	if r.start.Shape != shape || r.done.Shape != shape || r.done.StopReason != "end_turn" {
		t.Fatalf("%s turn: start %+v done %+v", shape, r.start, r.done)
	}
	chunks := r.chunks()
	text := strings.Join(chunks, "")
	if len(chunks) < 3 || !strings.Contains(text, "ACP Go Example Agent") || r.done.Text != text {
		t.Fatalf("%s turn streamed %q, done text %q", shape, chunks, r.done.Text)
	}
	var kinds []string
	denied := false
	for _, u := range r.updates {
		if u.Update != nil {
			kinds = append(kinds, u.Update.Kind)
		}
		if d := u.Decision; u.Event == "permission_decision" && d.Kind == "reject_once" && d.DecidedBy == "policy" {
			denied = true
		}
	}
	if !denied || !strings.Contains(text, "prefer not to make that change") {
		t.Fatalf("%s turn: the permission request was not rejected by the deny policy: kinds %v, text %q", shape, kinds, text)
	}
}

// restores counts session/load attempts, whatever their result.
func restores(h *harness) float64 {
	return testutil.ToFloat64(h.m.SessionRestores.WithLabelValues("load", "ok")) + testutil.ToFloat64(h.m.SessionRestores.WithLabelValues("load", "failed"))
}
