package interop

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/residentd/residentd/internal/config"
	"github.com/residentd/residentd/internal/session"
)

// BenchmarkClaudeTurns measures claude-agent-acp through residentd against
// the fake Messages API: each iteration is one cold turn on a new key (spawn,
// initialize, session/new, prompt) followed by one warm turn on it.
//
//	go test -run '^$' -bench ClaudeTurns -benchtime 5x ./internal/interop/
func BenchmarkClaudeTurns(b *testing.B) {
	api := newFakeAPI(b, "benchmark reply")
	h := newHarness(b, claudeOn(b, api))
	ctx := context.Background() // each turn is bounded by the binding's turn timeout
	var ready, cold, warm time.Duration
	for i := 0; b.Loop(); i++ {
		ch := fmt.Sprintf("ch-%d", i)
		r1 := h.mention(ctx, ch, "b-claude", ch+"-q1", "@claude first")
		r2 := h.mention(ctx, ch, "b-claude", ch+"-q2", "@claude second")
		if r1.err != nil || r2.err != nil || r1.start.Shape != "cold" || r2.start.Shape != "warm" {
			b.Fatalf("turns: %v %v shapes %s %s", r1.err, r2.err, r1.start.Shape, r2.start.Shape)
		}
		ready += r1.ready
		cold += r1.total
		warm += r2.total
		// Keep one live process at a time, so each cold start is measured alone.
		if _, err := h.d.Fresh(session.Key{Channel: ch, Binding: "b-claude"}); err != nil {
			b.Fatal(err)
		}
	}
	n := float64(b.N)
	b.ReportMetric(ready.Seconds()*1000/n, "cold-ready-ms")
	b.ReportMetric(cold.Seconds()*1000/n, "cold-turn-ms")
	b.ReportMetric(warm.Seconds()*1000/n, "warm-turn-ms")
}

// BenchmarkClaudeRestoredTurn measures, through residentd against the fake
// Messages API, the first turn of a new claude-agent-acp process on a key
// whose session answered turns before (5 or 40): reopened with
// session/resume and with session/load (restore_method). Each iteration
// restarts the daemon outside the timer; the session grows by one turn per
// iteration.
//
//	go test -run '^$' -bench ClaudeRestoredTurn -benchtime 5x ./internal/interop/
func BenchmarkClaudeRestoredTurn(b *testing.B) {
	for _, tc := range []struct {
		method  string
		history int
	}{{config.RestoreResume, 5}, {config.RestoreLoad, 5}, {config.RestoreResume, 40}, {config.RestoreLoad, 40}} {
		method := tc.method
		b.Run(fmt.Sprintf("%s-after-%d", method, tc.history), func(b *testing.B) {
			api := newFakeAPI(b, "restored reply")
			bd := claudeOn(b, api)
			bd.RestoreMethod = method
			h := newHarness(b, bd)
			ctx := context.Background()
			for i := range tc.history {
				if r := h.mention(ctx, "ch", "b-claude", fmt.Sprint("w", i), "@claude warm-up"); r.err != nil {
					b.Fatal(r.err)
				}
			}
			var ready, total, reopen time.Duration
			b.ResetTimer()
			for i := 0; b.Loop(); i++ {
				b.StopTimer()
				h.restart()
				b.StartTimer()
				r := h.mention(ctx, "ch", "b-claude", fmt.Sprint("r", i), "@claude back again")
				if r.err != nil || r.start.Shape != "restored" {
					b.Fatalf("restored turn: shape %s err %v", r.start.Shape, r.err)
				}
				ready += r.ready
				total += r.total
				// The restarted daemon's metrics hold this one restore.
				reopen += histSum(b, h, "residentd_session_ready_seconds", method)
			}
			n := float64(b.N)
			b.ReportMetric(ready.Seconds()*1000/n, "ready-ms")
			b.ReportMetric(reopen.Seconds()*1000/n, method+"-ms")
			b.ReportMetric(total.Seconds()*1000/n, "turn-ms")
		})
	}
}

// histSum is the sum of histogram name's series whose method label is
// method, on the harness's registry.
func histSum(b *testing.B, h *harness, name, method string) time.Duration {
	b.Helper()
	mfs, err := h.m.Registry.Gather()
	if err != nil {
		b.Fatal(err)
	}
	var sum float64
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "method" && l.GetValue() == method {
					sum += m.GetHistogram().GetSampleSum()
				}
			}
		}
	}
	return time.Duration(sum * float64(time.Second))
}
