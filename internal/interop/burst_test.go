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
// claude-agent-acp 0.49 key whose turn runs (its model call stalled), under
// each bursts mode, and logs what the burst cost: turns, model calls,
// input and uncached tokens, and the time until every mention was
// answered. The figures are in BENCHMARKS.md; the test checks that every
// mention got an answer it can be matched to. 0.49 does not advertise
// steering, so steer queues there.
func TestClaudeBurstMeasure(t *testing.T) {
	for _, mode := range []string{config.BurstsQueue, config.BurstsCoalesce, config.BurstsSteer} {
		t.Run(mode, func(t *testing.T) {
			b := burstOfSix(t, claudeBinding, mode)
			t.Logf("claude-agent-acp 0.49, bursts %s: %s", mode, b)
		})
	}
}

// TestClaude0101Burst is TestClaudeBurstMeasure with claude-agent-acp 0.101,
// which advertises steering. Under steer it checks the mechanism: each
// mention of the burst went into the running turn (its run ends with
// answered_by the running run, whose done lists all seven), no other turn
// ran, and the model got each steered mention, as its line, in a later
// call of that turn (one that also carries the running turn's own mention).
func TestClaude0101Burst(t *testing.T) {
	for _, mode := range []string{config.BurstsQueue, config.BurstsCoalesce, config.BurstsSteer} {
		t.Run(mode, func(t *testing.T) {
			b := burstOfSix(t, claude0101Binding, mode)
			t.Logf("claude-agent-acp 0.101, bursts %s: %s", mode, b)
			if mode != config.BurstsSteer {
				return
			}
			if len(b.turns) != 1 {
				t.Fatalf("steer ran %d turns, want only the running one: %v", len(b.turns), b.turns)
			}
			ev, _, _ := b.first.Result()
			if len(ev.Answers) != 7 {
				t.Fatalf("the running run's done lists %d answered mentions, want 7: %+v", len(ev.Answers), ev.Answers)
			}
			listed := map[string]bool{}
			for _, a := range ev.Answers {
				listed[a.RunID] = true
			}
			calls := b.api.calls(b.callsBefore)
			for i, r := range b.burst {
				own, _, _ := r.Result()
				if own.AnsweredBy != b.first.ID || !listed[r.ID] {
					t.Fatalf("mention %s ended answered_by %q (listed: %v), want the running run %s", r.MessageID, own.AnsweredBy, listed[r.ID], b.first.ID)
				}
				line := fmt.Sprintf("[%s] carla: @claude also item %d", r.MessageID, i+1)
				reached := false
				for _, c := range calls {
					var all []string
					for _, m := range c.Messages {
						if m.Role == "user" {
							all = append(all, m.text())
						}
					}
					joined := strings.Join(all, "\n")
					if strings.Contains(joined, burstFirst) && strings.Contains(joined, line) {
						reached = true
						break
					}
				}
				if !reached {
					t.Fatalf("no model call of the running turn carries the steered line %q (%d calls after the burst began)", line, len(calls))
				}
			}
		})
	}
}

// burstFirst is the text of the mention whose turn runs when the burst comes.
const burstFirst = "@claude look at the flaky test"

// burst is what a burst of six cost, and its runs.
type burst struct {
	api         *fakeAPI
	callsFirst  int // requests to the model before the running turn's mention
	callsBefore int // requests to the model before the burst began
	first       *run.Run
	burst       []*run.Run

	turns        map[string]bool // the runs that ran a turn (no answered_by)
	calls        int             // model calls from the running turn's mention on
	in, uncached int64           // input tokens of those turns, as their done reports them
	// sent is the input tokens of every model call from the running
	// turn's mention on, as the fake model counts them (a quarter of the body), calls a steer
	// aborted before they were answered too: a real model may be paid for
	// those, and no done reports them.
	sent int64
	took time.Duration // burst start -> every mention answered
}

func (b *burst) String() string {
	return fmt.Sprintf("6 mentions in 3 s behind a running turn: %d turns (with the running one), %d model calls, input tokens: %d reported, %d sent in all calls, %d uncached, every mention answered %v after the first",
		len(b.turns), b.calls, b.in, b.sent, b.uncached, b.took.Round(10*time.Millisecond))
}

// burstOfSix warms a key of the binding bind makes, stalls the model under
// a running turn, sends six mentions 0.6 s apart with bursts mode, releases
// the model and waits for every run to end. It fails the test when a
// mention has no answer it can be matched to.
func burstOfSix(t *testing.T, bind func(testing.TB, string, map[string]string) config.Binding, mode string) *burst {
	t.Helper()
	const reply = "Looked at it."
	api := newFakeAPI(t, reply)
	api.sized = true
	b := bind(t, t.TempDir(), api.env())
	b.Bursts = mode
	h := newHarness(t, b)
	ctx := testCtx(t)
	if r := h.mention(ctx, "ch", "b-claude", "w0", "@claude warm up"); r.err != nil {
		t.Fatalf("warm-up turn: %v", r.err)
	}
	first, callsFirst, release := submitWhileStalled(t, ctx, h, &api.fakeModel, "ch", "b-claude", "m0", burstFirst)
	out := &burst{api: api, callsFirst: callsFirst, callsBefore: len(api.requests()), first: first, turns: map[string]bool{}}
	start := time.Now()
	for i := range 6 {
		id := fmt.Sprintf("b%d", i+1)
		text := fmt.Sprintf("@claude also item %d", i+1)
		h.post(channel.Message{ID: id, Channel: "ch", Author: "carla", Body: text})
		r, err := h.d.Submit(apitype.TurnRequest{Channel: "ch", Binding: "b-claude", MessageID: id, Text: text})
		if err != nil {
			t.Fatal(err)
		}
		out.burst = append(out.burst, r)
		if i < 5 {
			time.Sleep(600 * time.Millisecond) // the burst is spread over 3 s, as people type
		}
	}
	release()
	answered := map[string]string{}
	for _, r := range append([]*run.Run{first}, out.burst...) {
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
		if ev.AnsweredBy == "" && !out.turns[r.ID] {
			out.turns[r.ID] = true
			if u := ev.Usage; u != nil && !u.Unknown {
				out.in += u.InputTokens + u.CacheReadTokens + u.CacheWriteTokens
				out.uncached += u.InputTokens + u.CacheWriteTokens
			}
		}
		for _, a := range ev.Answers {
			answered[a.RunID] = r.ID
		}
		if ev.AnsweredBy != "" {
			answered[r.ID] = ev.AnsweredBy
		} else if _, ok := answered[r.ID]; !ok {
			answered[r.ID] = r.ID
		}
	}
	out.took = time.Since(start)
	for _, r := range out.burst {
		if answered[r.ID] == "" {
			t.Fatalf("mention %s has no answer it can be matched to", r.MessageID)
		}
	}
	for _, q := range api.requests()[out.callsFirst:] {
		if q.Method == "POST" && strings.HasPrefix(q.Path, "/v1/messages") {
			out.calls++
		}
		if q.Method == "POST" && q.Path == "/v1/messages" {
			out.sent += int64(len(q.Body) / 4)
		}
	}
	return out
}
