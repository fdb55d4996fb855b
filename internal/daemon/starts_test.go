package daemon_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/residentd/residentd/apitype"
	"github.com/residentd/residentd/internal/config"
	"github.com/residentd/residentd/internal/daemon"
)

// startTimeouts reads residentd_agent_start_timeouts_total of binding:
// starts that ran past start_timeout and were tried again (first), and
// second tries that ran past twice the limit (second).
func startTimeouts(h *harness, binding string) (first, second float64) {
	return testutil.ToFloat64(h.m.StartTimeouts.WithLabelValues(binding, "first")),
		testutil.ToFloat64(h.m.StartTimeouts.WithLabelValues(binding, "second"))
}

// slowStart makes the first binding's agent take slow to answer
// initialize (--fault slow-start), with start_timeout limit.
func slowStart(slow string, limit time.Duration) func(*config.Config) {
	return func(c *config.Config) {
		b := &c.Bindings[0]
		b.Args = append(b.Args, "--fault", "slow-start", "--slow", slow)
		b.StartTimeout = config.Duration(limit)
	}
}

// A start that runs past start_timeout is tried again at once, in the same
// turn, with twice the limit: an agent that takes 4 s to answer initialize
// under a 3 s limit serves the turn on its second try, and nothing counts
// as a failure.
func TestSlowStartTriedAgainWithTwiceTheLimit(t *testing.T) {
	h := newHarness(t, slowStart("4s", 3*time.Second))
	r := h.mention("ch", "b-builtin", "m1", "@agent hello")
	if got := reply(t, r); got["turn"] != "1" || r.start.Shape != "cold" {
		t.Fatalf("turn on the second try: %+v, shape %q", got, r.start.Shape)
	}
	if first, second := startTimeouts(h, "b-builtin"); first != 1 || second != 0 {
		t.Fatalf("start timeouts: first %v, second %v; want one first try that ran past the limit, no second", first, second)
	}
}

// A start that runs past the limit on both tries is one failure of the
// binding, not two: the next turn starts again (and fails the same way),
// and only then does the crash-loop backoff refuse turns. An agent that
// never answers initialize is a crash loop like one that exits.
func TestStartTimeoutsCountOncePerStart(t *testing.T) {
	h := newHarness(t, slowStart("1h", 300*time.Millisecond))
	h.close()
	h.backoffBase, h.backoffCap = time.Hour, time.Hour
	h.open()
	for i, ch := range []string{"ch-a", "ch-b"} {
		r := h.mention(ch, "b-builtin", "m-"+ch, "@agent hello")
		if !errors.Is(r.err, context.DeadlineExceeded) || daemon.Code(r.err) != apitype.CodeTimeout ||
			!strings.Contains(r.err.Error(), `binding "b-builtin"'s agent did not answer initialize within start_timeout (300ms), nor within 600ms on a second try`) {
			t.Fatalf("turn %d: %v (code %s), want a start that timed out twice", i+1, r.err, daemon.Code(r.err))
		}
	}
	r := h.mention("ch-c", "b-builtin", "m-ch-c", "@agent hello")
	if !errors.Is(r.err, daemon.ErrBackoff) || !strings.Contains(r.err.Error(), "failed 2 times in a row") || !strings.Contains(r.err.Error(), "start_timeout") {
		t.Fatalf("third turn: %v, want the backoff after two failed starts", r.err)
	}
	if first, second := startTimeouts(h, "b-builtin"); first != 2 || second != 2 {
		t.Fatalf("start timeouts: first %v, second %v; want 2 and 2", first, second)
	}
}

// The second try stays within the turn's own time limit: with a
// turn_timeout shorter than three start limits it is cut at the turn's
// deadline, and the error names turn_timeout.
func TestStartRetryStaysWithinTheTurn(t *testing.T) {
	h := newHarness(t, slowStart("1h", time.Second), func(c *config.Config) {
		c.Bindings[0].TurnTimeout = config.Duration(1500 * time.Millisecond)
	})
	r := h.mention("ch", "b-builtin", "m1", "@agent hello")
	if !errors.Is(r.err, context.DeadlineExceeded) || !strings.Contains(r.err.Error(), `ran past binding "b-builtin"'s turn_timeout (1.5s)`) {
		t.Fatalf("turn: %v, want the start cut at the turn's deadline", r.err)
	}
	if first, second := startTimeouts(h, "b-builtin"); first != 1 || second != 0 {
		t.Fatalf("start timeouts: first %v, second %v; want the first try's only (the second was cut by the turn)", first, second)
	}
}

// Spares that fail to start hold no turn back: two spare starts in a row
// that run past twice start_timeout (which used to back the whole binding
// off, so the next mention got agent_backoff) leave the binding's turns
// free, and the next cold turn starts its own process. The daemon's clock
// stands still, so a backoff, had one been set, would still run.
func TestSlowSpareStartsHoldNoTurnBack(t *testing.T) {
	slow := filepath.Join(t.TempDir(), "slow")
	clk := &fakeClock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	h := newHarnessAt(t, clk.Now, func(c *config.Config) {
		b := &c.Bindings[0]
		one := 1
		b.Spare = &one
		b.StartTimeout = config.Duration(time.Second)
		// While the flag file exists the agent takes an hour to answer
		// initialize.
		b.Args = append([]string{"-c", `test -e "$SLOW_FLAG" && exec "$0" "$@" --fault slow-start --slow 1h; exec "$0" "$@"`, b.Command}, b.Args...)
		b.Command = "/bin/sh"
		b.Env["SLOW_FLAG"] = slow
	})
	h.close()
	h.backoffBase, h.backoffCap = 50*time.Millisecond, time.Hour
	h.open()

	reply(t, h.mention("ch-a", "b-builtin", "q1", "@agent first"))
	if sp := h.nextSpare(); sp.pid == 0 {
		t.Fatal("the first spare failed to start")
	}
	if err := os.WriteFile(slow, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	// A cold turn takes the spare; its replacement starts slowly and fails
	// on both tries.
	reply(t, h.mention("ch-b", "b-builtin", "q2", "@agent second"))
	if sp := h.nextSpare(); sp.pid != 0 {
		t.Fatalf("spare %d started while starts take an hour", sp.pid)
	}
	// The spares' own backoff passes (on the daemon's clock); the next
	// spare fails the same way.
	clk.Add(time.Second)
	if sp := h.nextSpare(); sp.pid != 0 {
		t.Fatalf("spare %d started while starts take an hour", sp.pid)
	}
	if n := testutil.ToFloat64(h.m.SpareEvents.WithLabelValues("b-builtin", "failed")); n != 2 {
		t.Fatalf("spare starts failed: %v, want 2", n)
	}
	if first, second := startTimeouts(h, "b-builtin"); first != 2 || second != 2 {
		t.Fatalf("start timeouts: first %v, second %v; want both spares' two tries", first, second)
	}

	// The machine is quick again: the next mention is served.
	if err := os.Remove(slow); err != nil {
		t.Fatal(err)
	}
	r := h.mention("ch-c", "b-builtin", "q3", "@agent third")
	if errors.Is(r.err, daemon.ErrBackoff) {
		t.Fatalf("turn after two failed spare starts: %v; spares' failures must not back the binding off", r.err)
	}
	if got := reply(t, r); got["turn"] != "1" || r.start.Shape != "cold" {
		t.Fatalf("turn after the failed spares: %+v, shape %q", got, r.start.Shape)
	}
}
