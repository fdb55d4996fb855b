package daemon_test

import (
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/residentd/residentd/apitype"
	"github.com/residentd/residentd/internal/config"
)

// usageRun plays three turns on one key, restarts the daemon (a new
// process: the agent's running totals start again) and plays one more; it
// returns each done event's usage.
func usageRun(t *testing.T, flags []string, tweak func(*config.Binding)) ([]apitype.Usage, *harness) {
	t.Helper()
	h := newHarness(t, func(c *config.Config) {
		c.Bindings[0].Args = append(c.Bindings[0].Args, flags...)
		if tweak != nil {
			tweak(&c.Bindings[0])
		}
	})
	var out []apitype.Usage
	for i := range 4 {
		if i == 3 {
			h.restart()
		}
		r := h.mention("ch", "b-builtin", fmt.Sprint("q", i), "@agent how is the refund spec?")
		reply(t, r)
		if r.done.Usage == nil {
			t.Fatalf("turn %d: done without usage", i)
		}
		out = append(out, *r.done.Usage)
	}
	return out, h
}

// TestUsagePerTurn: per-turn tokens as reported; running totals become
// per-turn deltas (baseline 0 in a new process); the session cost the
// agent reports becomes each turn's cost; a price table prices tokens
// when the agent gives no cost; an agent that reports nothing gives
// "unknown", never zeros.
func TestUsagePerTurn(t *testing.T) {
	perTurn, _ := usageRun(t, nil, nil)
	for i, u := range perTurn {
		if u.Unknown || u.InputTokens <= 0 || u.OutputTokens <= 0 || u.Cost != nil {
			t.Fatalf("per-turn usage %d: %+v", i, u)
		}
	}

	totals, h := usageRun(t, []string{"--usage", "total", "--cost", "0.25"}, func(b *config.Binding) { b.UsageTotals = true })
	for i, u := range totals {
		if u.InputTokens != perTurn[i].InputTokens || u.OutputTokens != perTurn[i].OutputTokens {
			t.Fatalf("turn %d from running totals: %d/%d tokens, want that turn's own %d/%d",
				i, u.InputTokens, u.OutputTokens, perTurn[i].InputTokens, perTurn[i].OutputTokens)
		}
		if u.Cost == nil || *u.Cost != apitype.AmountOf(0.25) || u.Currency != "USD" || u.CostSource != "agent" {
			t.Fatalf("turn %d cost %+v, want 0.25 USD from the agent", i, u)
		}
	}
	if got := testutil.ToFloat64(h.m.UsageCost.WithLabelValues("b-builtin", "warm")); math.Abs(got) > 1e-9 {
		// The restarted daemon has fresh metrics: one restored turn, no warm.
		t.Fatalf("usage cost{warm} after the restart = %v, want 0", got)
	}
	if got := testutil.ToFloat64(h.m.UsageCost.WithLabelValues("b-builtin", "restored")); math.Abs(got-0.25) > 1e-9 {
		t.Fatalf("usage cost{restored} = %v, want 0.25", got)
	}
	ss := h.d.Sessions()
	if len(ss) != 1 || ss[0].Usage == nil || ss[0].Usage.Unknown || ss[0].Usage.Cost == nil || *ss[0].Usage.Cost != apitype.AmountOf(0.25) {
		t.Fatalf("sessions listing usage %+v, want the new process's one turn", ss)
	}

	prices := &config.Prices{Input: 3, Output: 15, Currency: "USD"}
	priced, _ := usageRun(t, nil, func(b *config.Binding) { b.Prices = prices })
	for i, u := range priced {
		// Per million tokens: tokens times price is micro-units, exactly.
		want := apitype.Amount(u.InputTokens*3 + u.OutputTokens*15)
		if u.Cost == nil || *u.Cost != want || u.CostSource != "prices" {
			t.Fatalf("turn %d priced %+v, want %v from the price table", i, u, want)
		}
	}

	unknown, h := usageRun(t, []string{"--usage", "none"}, nil)
	for i, u := range unknown {
		if !u.Unknown {
			t.Fatalf("turn %d of an agent that reports nothing: %+v, want unknown", i, u)
		}
	}
	if ss := h.d.Sessions(); len(ss) != 1 || ss[0].Usage == nil || !ss[0].Usage.Unknown {
		t.Fatalf("sessions listing %+v, want usage unknown", ss)
	}
	if n := testutil.ToFloat64(h.m.UsageTurns.WithLabelValues("b-builtin", "restored", "unknown")); n != 1 {
		t.Fatalf("usage turns{unknown} = %v, want 1", n)
	}
}

// TestCostByIdleGap: each turn's cost is counted in the bucket of the
// key's idle gap before it, and the gap is in the done event.
func TestCostByIdleGap(t *testing.T) {
	h := newHarness(t, func(c *config.Config) {
		c.Bindings[0].Args = append(c.Bindings[0].Args, "--cost", "1")
	})
	clk := &fakeClock{t: time.Date(2026, 1, 1, 9, 0, 0, 0, time.UTC)}
	h.d.SetClock(clk.Now)
	for i, step := range []struct {
		wait time.Duration
		want string
	}{
		{0, "first"}, {time.Minute, "under_5m"}, {20 * time.Minute, "5m_to_60m"}, {3 * time.Hour, "over_60m"},
	} {
		clk.Add(step.wait)
		r := h.mention("ch", "b-builtin", fmt.Sprint("q", i), "@agent again")
		reply(t, r)
		if (r.done.IdleGapS == nil) != (i == 0) || (i > 0 && time.Duration(*r.done.IdleGapS*float64(time.Second)) != step.wait) {
			t.Fatalf("turn %d: idle gap %v, want %v", i, r.done.IdleGapS, step.wait)
		}
		if got := testutil.ToFloat64(h.m.CostByGap.WithLabelValues("b-builtin", step.want)); math.Abs(got-1) > 1e-9 {
			t.Fatalf("turn %d: cost in bucket %s = %v, want 1", i, step.want, got)
		}
	}
}

// A turn of several model calls, each reported in its own usage_update
// (tokens in _meta.usage, the session's running cost), costs all of them:
// the prompt response reports only the last call, the turn's usage is the
// sum.
func TestUsageSumsEveryCallOfTheTurn(t *testing.T) {
	h := newHarness(t, func(c *config.Config) {
		c.Bindings[0].Args = append(c.Bindings[0].Args, "--cost", "0.1")
	})
	one := h.mention("ch-1", "b-builtin", "m1", "@agent [[calls:1]] how is the refund spec?")
	three := h.mention("ch-2", "b-builtin", "m2", "@agent [[calls:3]] how is the refund spec?")
	reply(t, one)
	reply(t, three)
	a, b := one.done.Usage, three.done.Usage
	if a == nil || b == nil || a.Unknown || b.Unknown || a.InputTokens <= 0 {
		t.Fatalf("usage %+v and %+v", a, b)
	}
	if b.InputTokens != 3*a.InputTokens || b.OutputTokens != 3*a.OutputTokens {
		t.Fatalf("three calls: %d/%d tokens, want three times one call's %d/%d", b.InputTokens, b.OutputTokens, a.InputTokens, a.OutputTokens)
	}
	if a.Cost == nil || b.Cost == nil || *a.Cost != apitype.AmountOf(0.1) || *b.Cost != apitype.AmountOf(0.3) {
		t.Fatalf("costs %v and %v, want 0.1 and 0.3", a.Cost, b.Cost)
	}
	// The next turn of the three-call key costs its own call only.
	next := h.mention("ch-2", "b-builtin", "m3", "@agent again")
	reply(t, next)
	if c := next.done.Usage.Cost; c == nil || *c != apitype.AmountOf(0.1) {
		t.Fatalf("next turn cost %v, want 0.1", c)
	}
}

// TestUsageSourceAndBlindBudgets: the done event says where a turn's
// tokens came from (the prompt response's usage with its cache and thought
// counts, its _meta.quota, or none), and health lists the bindings a
// budget counts whose agent reported no cost: no usage at all, or tokens
// and no prices; not a binding no budget counts, nor one whose cost is
// known from the agent or from prices.
func TestUsageSourceAndBlindBudgets(t *testing.T) {
	t.Parallel()
	h := newHarness(t, func(c *config.Config) {
		detail := testBinding(t, "b-detail", c.StateDir, "--usage", "detail")
		meta := testBinding(t, "b-meta", c.StateDir, "--usage", "meta")
		none := testBinding(t, "b-none", c.StateDir, "--usage", "none")
		priced := testBinding(t, "b-priced", c.StateDir)
		priced.Prices = &config.Prices{Input: 3, Output: 15}
		cost := testBinding(t, "b-cost", c.StateDir, "--cost", "0.1")
		c.Bindings = []config.Binding{detail, meta, none, priced, cost}
		c.Budgets.Bindings = map[string]float64{"b-meta": 5, "b-none": 5, "b-priced": 5, "b-cost": 5}
	})
	for _, tt := range []struct {
		binding, source string
		thought         bool
	}{
		{"b-detail", "prompt_response", true},
		{"b-meta", "prompt_response_meta", true},
		{"b-none", "none", false},
		{"b-priced", "prompt_response", false},
		{"b-cost", "prompt_response", false},
	} {
		r := h.turn(apitype.TurnRequest{Channel: "ch", Binding: tt.binding, Text: "@agent how much?"})
		if r.err != nil {
			t.Fatalf("%s: %v", tt.binding, r.err)
		}
		u := r.done.Usage
		if r.done.UsageSource != tt.source || u == nil || u.Unknown != (tt.source == "none") || (u.ThoughtTokens > 0) != tt.thought {
			t.Errorf("%s: usage %+v from %q, want from %q (thought tokens: %v)", tt.binding, u, r.done.UsageSource, tt.source, tt.thought)
		}
		if tt.thought && (u.CacheReadTokens != 2*u.InputTokens || testutil.ToFloat64(h.m.AgentTokens.WithLabelValues(tt.binding, "cold", "thought")) != float64(u.ThoughtTokens)) {
			t.Errorf("%s: usage %+v, want cache reads twice the input and the thought tokens counted", tt.binding, u)
		}
	}
	// A turn that failed reporting nothing says nothing of the agent.
	if r := h.turn(apitype.TurnRequest{Channel: "ch", Binding: "b-cost", Text: "@agent [[fault:exit-turn]]"}); r.err == nil {
		t.Fatal("the exit-turn fault did not fail the turn")
	}
	var got []string
	for _, b := range h.d.Status().BudgetsBlind {
		got = append(got, b.Binding+" "+b.UsageSource+": "+b.Reason)
	}
	want := []string{
		"b-meta prompt_response_meta: the agent reports tokens but no cost, and the binding has no prices",
		"b-none none: the agent reported neither tokens nor a cost",
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("budgets blind %q, want %q", got, want)
	}
}
