package daemon_test

import (
	"fmt"
	"slices"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/residentd/residentd/apitype"
	"github.com/residentd/residentd/internal/config"
	"github.com/residentd/residentd/internal/permission"
	"github.com/residentd/residentd/internal/run"
)

// waitQueued waits until r has logged a queued event for reason.
func waitQueued(t *testing.T, r *run.Run, reason string) {
	t.Helper()
	waitMatch(t, r, "a queued event for "+reason, func(ev apitype.Event) bool {
		return ev.Event == apitype.EventQueued && ev.Reason == reason
	})
}

// A key that keeps its process busy while another channel waits for the
// only slot yields it after yield_after turns: the eviction has its own
// reason in the metrics and the log, the waiting channel runs, and the
// yielded key's next turn queues for a slot and restores its session. The
// turns that hold the slot wait for a permission answer, so the test says
// when each ends.
func TestFairYieldIsCountedAndLogged(t *testing.T) {
	h := newHarness(t, func(c *config.Config) {
		c.MaxLive, c.YieldAfter = 1, 1
		ask := testBinding(t, "b-ask", c.StateDir)
		ask.Permission = permission.Ask
		c.Bindings = append(c.Bindings, ask)
	})
	core, logs := observer.New(zap.InfoLevel)
	h.log = zap.New(core)
	h.restart()
	submit := func(ch, binding, text string) *run.Run {
		t.Helper()
		r, err := h.d.Submit(apitype.TurnRequest{Channel: ch, Binding: binding, Text: text})
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	answer := func(r *run.Run, req string) {
		t.Helper()
		if err := h.d.Answer(r.ID, req, "allow"); err != nil {
			t.Fatal(err)
		}
		if ev, err := waitEnded(t, r); err != nil || ev.Event != apitype.EventDone {
			t.Fatalf("run %s: %+v, %v; want done", r.ID, ev, err)
		}
	}

	a1 := submit("ch-a", "b-ask", "@agent [[permission:edit]] one")
	req := waitPending(t, a1) // nobody waits for a slot yet: not counted
	b := submit("ch-b", "b-builtin", "@agent another channel")
	waitQueued(t, b, apitype.QueueNoSlot)
	a2 := submit("ch-a", "b-ask", "@agent [[permission:edit]] two")
	waitQueued(t, a2, apitype.QueueKeyBusy)
	answer(a1, req)
	if ev := waitEvent(t, a2, apitype.EventStarted); ev.Shape != "warm" {
		t.Fatalf("ch-a's turn 2: %s, want warm (the bound is 1); evictions %q", ev.Shape, h.evictions())
	}
	req = waitPending(t, a2)
	a3 := submit("ch-a", "b-ask", "@agent three")
	waitQueued(t, a3, apitype.QueueKeyBusy)
	answer(a2, req)
	waitQueued(t, a3, apitype.QueueNoSlot) // yielded: behind ch-b now
	if ev, err := waitEnded(t, b); err != nil || ev.Shape != "cold" {
		t.Fatalf("ch-b's turn: %+v, %v; want a cold turn", ev, err)
	}
	if ev, err := waitEnded(t, a3); err != nil || ev.Shape != "restored" {
		t.Fatalf("ch-a's turn 3: %+v, %v; want its session restored", ev, err)
	}

	if got, want := h.evictions(), []string{"ch-a/b-ask yield", "ch-b/b-builtin capacity"}; !slices.Equal(got, want) {
		t.Fatalf("evictions %q, want %q", got, want)
	}
	if n := testutil.ToFloat64(h.m.Evictions.WithLabelValues("yield")); n != 1 {
		t.Fatalf(`residentd_evictions_total{reason="yield"} = %v, want 1`, n)
	}
	logged := logs.FilterMessage("evicted").FilterField(zap.String("reason", "yield")).All()
	if len(logged) != 1 || fmt.Sprint(logged[0].ContextMap()["key"]) != "ch-a/b-ask" {
		t.Fatalf("yield log lines %v, want one for ch-a/b-ask", logged)
	}
}
