package interop

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/residentd/residentd/apitype"
	"github.com/residentd/residentd/internal/channel"
	"github.com/residentd/residentd/internal/config"
	"github.com/residentd/residentd/internal/run"
)

// TestClaudeBurstMeasure sends a burst of six mentions in 3 s to a warm
// claude-agent-acp key whose turn runs (its model call stalled), under
// each bursts mode, and logs what the burst cost: turns, model calls,
// input and uncached tokens, and the time until every mention was
// answered. The figures are in BENCHMARKS.md; the test checks that every
// mention got an answer it can be matched to.
func TestClaudeBurstMeasure(t *testing.T) {
	for _, mode := range []string{config.BurstsQueue, config.BurstsCoalesce, config.BurstsSteer} {
		t.Run(mode, func(t *testing.T) {
			const reply = "Looked at it."
			api := newFakeAPI(t, reply)
			api.sized = true
			b := claudeBinding(t, t.TempDir(), map[string]string{"ANTHROPIC_BASE_URL": api.URL(), "ANTHROPIC_API_KEY": "dummy"})
			b.Bursts = mode
			h := newHarness(t, b)
			ctx := testCtx(t)
			if r := h.mention(ctx, "ch", "b-claude", "w0", "@claude warm up"); r.err != nil {
				t.Fatalf("warm-up turn: %v", r.err)
			}
			release := api.stallModel()
			defer release()
			h.post(channel.Message{ID: "m0", Channel: "ch", Author: "aiko", Body: "@claude look at the flaky test"})
			first, err := h.d.Submit(apitype.TurnRequest{Channel: "ch", Binding: "b-claude", MessageID: "m0", Text: "@claude look at the flaky test"})
			if err != nil {
				t.Fatal(err)
			}
			select {
			case <-api.stalled:
			case <-ctx.Done():
				t.Fatal("the running turn never called the model")
			}
			callsBefore := len(api.requests())
			start := time.Now()
			var burst []*run.Run
			for i := range 6 {
				id := fmt.Sprintf("b%d", i+1)
				text := fmt.Sprintf("@claude also item %d", i+1)
				h.post(channel.Message{ID: id, Channel: "ch", Author: "carla", Body: text})
				r, err := h.d.Submit(apitype.TurnRequest{Channel: "ch", Binding: "b-claude", MessageID: id, Text: text})
				if err != nil {
					t.Fatal(err)
				}
				burst = append(burst, r)
				if i < 5 {
					time.Sleep(600 * time.Millisecond) // the burst is spread over 3 s, as people type
				}
			}
			release()
			turns := map[string]bool{}
			var in, uncached int64
			count := func(ev apitype.Event) {
				if ev.AnsweredBy != "" || turns[ev.RunID] {
					return
				}
				turns[ev.RunID] = true
				if u := ev.Usage; u != nil && !u.Unknown {
					in += u.InputTokens + u.CacheReadTokens + u.CacheWriteTokens
					uncached += u.InputTokens + u.CacheWriteTokens
				}
			}
			answered := map[string]string{}
			for _, r := range append([]*run.Run{first}, burst...) {
				for {
					changed := r.Wait()
					if _, _, ok := r.Result(); ok {
						break
					}
					select {
					case <-changed:
					case <-ctx.Done():
						t.Fatalf("run %s never ended", r.ID)
					}
				}
				ev, err, _ := r.Result()
				if err != nil {
					t.Fatalf("run %s: %v", r.ID, err)
				}
				ev.RunID = r.ID
				count(ev)
				for _, a := range ev.Answers {
					answered[a.RunID] = r.ID
				}
				if ev.AnsweredBy != "" {
					answered[r.ID] = ev.AnsweredBy
				} else if _, ok := answered[r.ID]; !ok {
					answered[r.ID] = r.ID
				}
			}
			took := time.Since(start)
			for _, r := range burst {
				if answered[r.ID] == "" {
					t.Fatalf("mention %s has no answer it can be matched to", r.MessageID)
				}
			}
			calls := 0
			for _, q := range api.requests()[callsBefore:] {
				if q.Method == "POST" && strings.HasPrefix(q.Path, "/v1/messages") {
					calls++
				}
			}
			t.Logf("bursts %s: 6 mentions in 3 s behind a running turn: %d turns (with the running one), %d model calls, %d input tokens, %d uncached, every mention answered %v after the first", mode, len(turns), calls, in, uncached, took.Round(10*time.Millisecond))
		})
	}
}
