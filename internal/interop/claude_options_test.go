package interop

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/residentd/residentd/internal/config"
	"github.com/residentd/residentd/internal/testkit"
)

// TestClaudeSessionOptionsCloseAndResume drives claude-agent-acp through
// its tap (every JSON-RPC line recorded) against the fake model:
//   - the binding's model option goes out with session/set_config_option
//     once, after session/new and before the first prompt, claude accepts
//     it, the sessions listing shows it, and the model request the CLI
//     sends names that model; the warm turn sets nothing;
//   - a capacity eviction sends session/close for the session, which claude
//     answers, before the process is stopped;
//   - a restarted daemon restores the session with session/resume and sets
//     the model again (claude lists its default after a resume).
func TestClaudeSessionOptionsCloseAndResume(t *testing.T) {
	t.Parallel()
	api := newFakeAPI(t, "Sonnet here.")
	api.sized = true
	taps := t.TempDir()
	b := claudeOn(t, api)
	b.SessionOptions = map[string]string{"model": "sonnet"}
	h := newHarnessCfg(t, func(c *config.Config) { c.MaxLive = 1 }, tapped(t, b, taps))
	ctx := testCtx(t)

	r1 := h.mention(ctx, "ch-a", "b-claude", "q1", "@claude which model are you? MARK-A1")
	if r1.err != nil || r1.done.Shape != "cold" {
		t.Fatalf("cold turn: %+v %v", r1.done, r1.err)
	}
	native := r1.done.Native
	for _, call := range api.modelCalls(t, "MARK-A1") {
		if !strings.Contains(call.Model, "sonnet") {
			t.Fatalf("the model request of the turn names %q, want a sonnet model", call.Model)
		}
	}
	ss := h.d.Sessions()
	if len(ss) != 1 || ss[0].Options["model"] != "sonnet" {
		t.Fatalf("sessions listing %+v, want model sonnet", ss)
	}
	r2 := h.mention(ctx, "ch-a", "b-claude", "q2", "@claude and now? MARK-A2")
	if r2.err != nil || r2.done.Shape != "warm" {
		t.Fatalf("warm turn: %+v %v", r2.done, r2.err)
	}

	// A turn on another channel takes the only slot: ch-a's process is
	// evicted for capacity.
	r3 := h.mention(ctx, "ch-b", "b-claude", "q3", "@claude hello from b MARK-B1")
	if r3.err != nil || r3.done.Shape != "cold" {
		t.Fatalf("turn on ch-b: %+v %v", r3.done, r3.err)
	}
	if n := testutil.ToFloat64(h.m.Evictions.WithLabelValues("capacity")); n != 1 {
		t.Fatalf("capacity evictions = %v, want 1", n)
	}
	testkit.WaitFor(t, 30*time.Second, func() bool { return !alive(r1.start.Pid) }, testkit.Waiting("the evicted agent to exit"))
	first := processOf(t, taps, native, "session/new")
	sets, answers := calls(first, "session/set_config_option")
	if len(sets) != 1 || answers[0] == nil || answers[0].Error != nil || !strings.Contains(string(sets[0].Params), `"configId":"model"`) || !strings.Contains(string(sets[0].Params), `"value":"sonnet"`) {
		t.Fatalf("set_config_option calls on the first process: %d, params %v, answers %v; want one model=sonnet, answered", len(sets), params(sets), answers)
	}
	if !before(first, "session/set_config_option", "session/prompt") {
		t.Fatal("the model option was set after the first prompt")
	}
	closes, closed := calls(first, "session/close")
	if len(closes) != 1 || sessionOf(closes[0]) != native || closed[0] == nil || closed[0].Error != nil {
		t.Fatalf("session/close on eviction: %d calls %v, answers %v; want one for %s, answered", len(closes), params(closes), closed, native)
	}
	t.Logf("claude-agent-acp answered session/close for %s on a capacity eviction: %s", native, closed[0].Result)

	// The daemon restarts; ch-a's next turn resumes its session in a new
	// process and sets the model again before the prompt.
	h.restart()
	r4 := h.mention(ctx, "ch-a", "b-claude", "q4", "@claude still sonnet? MARK-A3")
	if r4.err != nil || r4.done.Shape != "restored" || r4.done.Native != native {
		t.Fatalf("after restart: %+v %v, want restored %s", r4.done, r4.err, native)
	}
	if ss := h.d.Sessions(); len(ss) != 1 || ss[0].RestoredBy != "resume" {
		t.Fatalf("sessions %+v, want restored_by resume", ss)
	}
	third := processOf(t, taps, native, "session/resume")
	sets, answers = calls(third, "session/set_config_option")
	if len(sets) != 1 || answers[0] == nil || answers[0].Error != nil || !before(third, "session/resume", "session/set_config_option") || !before(third, "session/set_config_option", "session/prompt") {
		t.Fatalf("the resumed process: set_config_option %v answers %v; want one, after session/resume and before the prompt", params(sets), answers)
	}
	for _, call := range api.modelCalls(t, "MARK-A3") {
		if !strings.Contains(call.Model, "sonnet") {
			t.Fatalf("after resume the model request names %q, want a sonnet model", call.Model)
		}
	}
}

// processOf returns the tap record of the agent process that sent method
// (session/new, session/resume) for native.
func processOf(t *testing.T, dir, native, method string) []rpc {
	t.Helper()
	for _, msgs := range tapRecords(t, dir) {
		reqs, answers := calls(msgs, method)
		for i, r := range reqs {
			if method == "session/new" && answers[i] != nil {
				var res struct {
					SessionID string `json:"sessionId"`
				}
				_ = json.Unmarshal(answers[i].Result, &res)
				if res.SessionID == native {
					return msgs
				}
			}
			if sessionOf(r) == native {
				return msgs
			}
		}
	}
	t.Fatalf("no tapped agent process sent %s for %s (taps in %s)", method, native, filepath.Base(dir))
	return nil
}

// before reports whether the first request of method a came before the
// first of b.
func before(msgs []rpc, a, b string) bool {
	ia, ib := -1, -1
	for i, m := range msgs {
		if m.Dir != "in" {
			continue
		}
		if m.Method == a && ia < 0 {
			ia = i
		}
		if m.Method == b && ib < 0 {
			ib = i
		}
	}
	return ia >= 0 && ib >= 0 && ia < ib
}

func params(ms []rpc) []string {
	out := make([]string, len(ms))
	for i, m := range ms {
		out[i] = string(m.Params)
	}
	return out
}
