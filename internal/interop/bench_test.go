package interop

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/residentd/residentd/internal/session"
)

// BenchmarkClaudeTurns measures claude-agent-acp through residentd against
// the fake Messages API: each iteration is one cold turn on a new key (spawn,
// initialize, session/new, prompt) followed by one warm turn on it.
//
//	go test -run '^$' -bench ClaudeTurns -benchtime 5x ./internal/interop/
func BenchmarkClaudeTurns(b *testing.B) {
	api := newFakeAPI(b, "benchmark reply")
	h := newHarness(b, claudeBinding(b, b.TempDir(), map[string]string{"ANTHROPIC_BASE_URL": api.URL(), "ANTHROPIC_API_KEY": "dummy"}))
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
