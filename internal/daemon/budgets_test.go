package daemon_test

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/residentd/residentd/apitype"
	"github.com/residentd/residentd/internal/budget"
	"github.com/residentd/residentd/internal/config"
	"github.com/residentd/residentd/internal/daemon"
	"github.com/residentd/residentd/internal/permission"
	"github.com/residentd/residentd/internal/testkit"
)

// testClock is a settable clock for the daemon.
type testClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *testClock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *testClock) set(t time.Time) {
	c.mu.Lock()
	c.t = t
	c.mu.Unlock()
}

// budgetEvents returns the budget events of a turn.
func budgetEvents(r result) []apitype.Budget {
	var out []apitype.Budget
	for _, ev := range r.updates {
		if ev.Event == apitype.EventBudget && ev.Budget != nil {
			out = append(out, *ev.Budget)
		}
	}
	return out
}

// TestBindingBudget: the built-in agent costs 0.25 USD a turn against a
// 0.9 USD daily limit. The third turn crosses 80% (a warning event and
// metric), the fourth the limit (it finishes, with an exceeded event); the
// fifth is refused with budget_exceeded, in any channel, until the reset at
// 06:00 UTC the next day; the totals survive a restart.
func TestBindingBudget(t *testing.T) {
	c := &testClock{t: time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC)}
	h := newHarnessAt(t, c.now, func(cfg *config.Config) {
		cfg.Bindings[0].Args = append(cfg.Bindings[0].Args, "--cost", "0.25")
		cfg.Budgets = config.Budgets{Timezone: "UTC", Reset: "06:00", Bindings: map[string]float64{"b-builtin": 0.9}}
	})
	for i := 1; i <= 4; i++ {
		r := h.mention("ch", "b-builtin", fmt.Sprint("q", i), "@agent spend")
		reply(t, r)
		ev := budgetEvents(r)
		switch i {
		case 3:
			if len(ev) != 1 || ev[0].Level != budget.LevelWarning || ev[0].Scope != "binding" || ev[0].ID != "b-builtin" ||
				ev[0].Spent != apitype.AmountOf(0.75) || ev[0].Limit != apitype.AmountOf(0.9) || ev[0].Currency != "USD" || !ev[0].ResetsAt.Equal(time.Date(2026, 12, 4, 6, 0, 0, 0, time.UTC)) {
				t.Fatalf("turn 3 budget events %+v, want one warning at 0.75 of 0.9, resetting 06:00", ev)
			}
		case 4:
			if len(ev) != 1 || ev[0].Level != budget.LevelExceeded || ev[0].Spent != apitype.AmountOf(1.0) {
				t.Fatalf("turn 4 budget events %+v, want one exceeded at 1.0", ev)
			}
		default:
			if len(ev) != 0 {
				t.Fatalf("turn %d budget events %+v, want none", i, ev)
			}
		}
	}
	if w, x := testutil.ToFloat64(h.m.BudgetCrossings.WithLabelValues("binding", "warning")), testutil.ToFloat64(h.m.BudgetCrossings.WithLabelValues("binding", "exceeded")); w != 1 || x != 1 {
		t.Fatalf("budget crossings warning %v exceeded %v, want 1 and 1", w, x)
	}

	refused := func(ch string) {
		t.Helper()
		_, err := h.d.Submit(apitype.TurnRequest{Channel: ch, Binding: "b-builtin", Text: "@agent more"})
		var ex *budget.ExceededError
		if !errors.Is(err, daemon.ErrBudgetExceeded) || daemon.Code(err) != apitype.CodeBudgetExceeded || !errors.As(err, &ex) ||
			ex.Key.Scope != "binding" || !ex.ResetsAt.Equal(time.Date(2026, 12, 4, 6, 0, 0, 0, time.UTC)) {
			t.Fatalf("a turn on a spent binding in %s: %v (code %s)", ch, err, daemon.Code(err))
		}
	}
	refused("ch")
	refused("ch-other")
	if n := testutil.ToFloat64(h.m.BudgetRefusals.WithLabelValues("binding")); n != 2 {
		t.Fatalf("budget refusals = %v, want 2", n)
	}
	b, err := h.d.Budgets()
	if err != nil || b.Day != "2026-12-03" || len(b.Budgets) != 1 || b.Budgets[0].Level != "exceeded" || b.Budgets[0].Spent != apitype.AmountOf(1.0) {
		t.Fatalf("budgets %+v %v", b, err)
	}

	// The totals are in the store: a restarted daemon still refuses.
	h.restart()
	refused("ch")

	// The next budget day starts at 06:00: a minute before, still refused.
	c.set(time.Date(2026, 12, 4, 5, 59, 0, 0, time.UTC))
	refused("ch")
	c.set(time.Date(2026, 12, 4, 6, 0, 0, 0, time.UTC))
	r := h.mention("ch", "b-builtin", "q5", "@agent a new day")
	reply(t, r)
	if b, _ := h.d.Budgets(); b.Day != "2026-12-04" || b.Budgets[0].Spent != apitype.AmountOf(0.25) || b.Budgets[0].Level != "ok" {
		t.Fatalf("budgets on the new day %+v", b)
	}
}

// TestChannelBudgetAndQueuedTurn: a channel's limit refuses that channel
// only; a turn that queued behind the one that spent the budget ends with
// budget_exceeded instead of starting; failed turns count what they cost.
func TestChannelBudgetAndQueuedTurn(t *testing.T) {
	c := &testClock{t: time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC)}
	h := newHarnessAt(t, c.now, func(cfg *config.Config) {
		b := &cfg.Bindings[0]
		b.Args = append(b.Args, "--cost", "0.25")
		b.Permission = permission.Ask
		cfg.Budgets = config.Budgets{Timezone: "UTC", Channels: map[string]float64{"ch-cheap": 0.5}, ChannelDefault: 100}
	})
	reply(t, h.mention("ch-cheap", "b-builtin", "q1", "@agent one"))

	// The second turn waits for a person; a third queues behind it.
	second := make(chan result, 1)
	go func() {
		second <- h.turnCtx(t.Context(), apitype.TurnRequest{Channel: "ch-cheap", Binding: "b-builtin", Text: "@agent run it [[permission:execute]]"})
	}()
	testkit.WaitFor(t, 30*time.Second, func() bool {
		for _, r := range h.d.Runs() {
			if r.State == apitype.RunRunning {
				if rr, err := h.d.Run(r.ID); err == nil && len(rr.Snapshot().Pending) > 0 {
					return true
				}
			}
		}
		return false
	}, testkit.Waiting("the second turn's permission request"))
	third, err := h.d.Submit(apitype.TurnRequest{Channel: "ch-cheap", Binding: "b-builtin", Text: "@agent three"})
	if err != nil {
		t.Fatalf("the third turn is refused before the budget is spent: %v", err)
	}
	testkit.WaitFor(t, 30*time.Second, func() bool {
		s := third.Snapshot()
		return s.State == apitype.RunQueued && s.QueueReason == apitype.QueueKeyBusy
	},
		testkit.Waiting("the third turn to queue"))
	for _, r := range h.d.Runs() {
		rr, _ := h.d.Run(r.ID)
		for _, p := range rr.Snapshot().Pending {
			if err := h.d.Answer(r.ID, p.ID, "allow"); err != nil {
				t.Fatal(err)
			}
		}
	}
	r2 := <-second
	reply(t, r2)
	if ev := budgetEvents(r2); len(ev) != 2 || ev[0].Level != "warning" || ev[1].Level != "exceeded" || ev[0].Scope != "channel" || ev[0].ID != "ch-cheap" {
		t.Fatalf("the second turn's budget events %+v, want warning then exceeded of channel ch-cheap", ev)
	}
	testkit.WaitFor(t, 30*time.Second, func() bool { _, _, ended := third.Result(); return ended }, testkit.Waiting("the third turn to end"))
	if _, err, _ := third.Result(); !errors.Is(err, daemon.ErrBudgetExceeded) {
		t.Fatalf("the queued third turn: %v, want budget_exceeded", err)
	}
	for _, l := range third.Read(0, false).Lines {
		if ev, _ := daemon.DecodeEvent(l); ev.Event == apitype.EventStarted {
			t.Fatal("the refused queued turn was announced as started")
		}
	}
	if n := testutil.ToFloat64(h.m.Turns.WithLabelValues("warm", "refused")); n != 1 {
		t.Fatalf("turns{warm,refused} = %v, want the queued turn", n)
	}

	// Another channel is under the default limit and runs; what a failed
	// turn cost counts too (fail-turn reports its cost, then fails).
	reply(t, h.mention("ch-other", "b-builtin", "q4", "@agent four"))
	r := h.mention("ch-other", "b-builtin", "q5", "@agent five [[fault:fail-turn]]")
	if r.err == nil {
		t.Fatal("the fail-turn fault did not fail the turn")
	}
	b, err := h.d.Budgets()
	if err != nil {
		t.Fatal(err)
	}
	spent := map[string]apitype.Amount{}
	for _, x := range b.Budgets {
		spent[x.Scope+" "+x.ID] = x.Spent
	}
	if len(b.Budgets) != 2 || spent["channel ch-cheap"] != apitype.AmountOf(0.5) || spent["channel ch-other"] != apitype.AmountOf(0.5) {
		t.Fatalf("budgets %+v", b.Budgets)
	}
}
