package daemon_test

import (
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/residentd/residentd/apitype"
	"github.com/residentd/residentd/internal/config"
)

// withSpares gives the first binding n spares, and adds b-idle (spare 1)
// ahead of it, a binding no turn ever names.
func withSpares(n int) func(*config.Config) {
	return func(c *config.Config) {
		c.Bindings[0].Spare = &n
		idle := c.Bindings[0]
		one := 1
		idle.ID, idle.Handle, idle.Spare = "b-idle", "@idle", &one
		c.Bindings = append([]config.Binding{idle}, c.Bindings...)
	}
}

// nextSpare waits for the next spare to become ready.
func (h *harness) nextSpare() readySpare {
	h.t.Helper()
	select {
	case s := <-h.spares:
		return s
	case <-time.After(30 * time.Second):
		h.t.Fatal("no spare became ready within 30s")
		return readySpare{}
	}
}

func sparePids(ss []apitype.Spare, binding string) []int {
	var out []int
	for _, s := range ss {
		if s.Binding == binding {
			out = append(out, s.Pid)
		}
	}
	return out
}

// A cold turn and a restored turn each take the binding's spare (the pid
// of their started event is the spare's, listed before), and a new spare
// takes its place; a binding that has had no turn gets none.
func TestColdAndRestoredTurnsTakeASpare(t *testing.T) {
	h := newHarness(t, withSpares(1))

	first := h.mention("ch-a", "b-builtin", "m1", "@agent first")
	if first.err != nil || first.start.Shape != "cold" {
		t.Fatalf("first turn: %v, shape %q", first.err, first.start.Shape)
	}
	sp := h.nextSpare()
	if sp.binding != "b-builtin" || sp.pid == first.start.Pid {
		t.Fatalf("spare %+v after the first turn (pid %d)", sp, first.start.Pid)
	}
	listed := h.d.Spares()
	if got := sparePids(listed, "b-builtin"); !slices.Equal(got, []int{sp.pid}) {
		t.Fatalf("spares listed %+v, want b-builtin's pid %d", listed, sp.pid)
	}
	// b-idle comes first in the configuration: its turn in the fill came
	// and went before b-builtin's spare started, and it had no turn.
	if got := sparePids(listed, "b-idle"); len(got) != 0 {
		t.Fatalf("b-idle had no turn but has spares %v", got)
	}

	cold := h.mention("ch-b", "b-builtin", "m2", "@agent second channel")
	if cold.err != nil || cold.start.Shape != "cold" || cold.start.Pid != sp.pid {
		t.Fatalf("cold turn: %v, shape %q pid %d; want cold on the spare's pid %d", cold.err, cold.start.Shape, cold.start.Pid, sp.pid)
	}
	if f := reply(t, cold); f["framing"] != "yes" || f["turn"] != "1" {
		t.Fatalf("cold turn on the spare: %q", cold.done.Text)
	}
	next := h.nextSpare()
	if next.pid == sp.pid || next.binding != "b-builtin" {
		t.Fatalf("replacement spare %+v, the taken one was %d", next, sp.pid)
	}
	var keyed bool
	for _, s := range h.d.Sessions() {
		if s.Channel == "ch-b" && s.Pid == sp.pid {
			keyed = true
		}
	}
	if !keyed || slices.Contains(sparePids(h.d.Spares(), "b-builtin"), sp.pid) {
		t.Fatalf("after the turn the spare's pid %d should be ch-b's process and no longer a spare: sessions %+v spares %+v", sp.pid, h.d.Sessions(), h.d.Spares())
	}
	if n := testutil.ToFloat64(h.m.SpareEvents.WithLabelValues("b-builtin", "taken")); n != 1 {
		t.Fatalf("spares taken: %v, want 1", n)
	}
	if n := testutil.ToFloat64(h.m.SpareProcesses.WithLabelValues("b-builtin")); n != 1 {
		t.Fatalf("spare gauge: %v, want 1", n)
	}

	// After a restart the binding has had no turn: no spare until one.
	h.restart()
	warmup := h.mention("ch-c", "b-builtin", "m3", "@agent a third channel")
	if warmup.err != nil || warmup.start.Shape != "cold" {
		t.Fatalf("turn after restart: %v, shape %q", warmup.err, warmup.start.Shape)
	}
	sp = h.nextSpare()
	restored := h.mention("ch-a", "b-builtin", "m4", "@agent back to the first")
	if restored.err != nil || restored.start.Shape != "restored" || restored.start.Pid != sp.pid {
		t.Fatalf("restored turn: %v, shape %q pid %d; want restored on the spare's pid %d", restored.err, restored.start.Shape, restored.start.Pid, sp.pid)
	}
	if f := reply(t, restored); f["turn"] != "2" {
		t.Fatalf("restored turn on the spare: %q; want the session's second turn", restored.done.Text)
	}
	if next := h.nextSpare(); next.pid == sp.pid {
		t.Fatalf("replacement spare has the taken one's pid %d", sp.pid)
	}
}
