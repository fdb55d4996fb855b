package interop

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/residentd/residentd/apitype"
	"github.com/residentd/residentd/internal/acp"
	"github.com/residentd/residentd/internal/channel"
	"github.com/residentd/residentd/internal/config"
	"github.com/residentd/residentd/internal/run"
	"github.com/residentd/residentd/internal/testkit"
)

// TestCodexSteer: with bursts steer, two mentions that arrive while the
// key's turn runs (its model call stalled) are steered into it: codex-acp
// advertises _meta.steering.supported and answers each _session/steering
// with injected; no other turn runs, each mention's run ends answered_by
// the running one, whose done lists all three, and the model gets each
// steered mention, as its line, in a later call of that turn. The call in
// flight when they came is not used: the turn makes two model calls and
// its usage counts one.
func TestCodexSteer(t *testing.T) {
	t.Parallel()
	const reply = "Looked at all of it."
	api := newFakeResponses(t, reply)
	taps := t.TempDir()
	b := codexBinding(t, api)
	b.Bursts, b.Prices = config.BurstsSteer, codexPrices
	h := newHarness(t, tapped(t, b, taps))
	ctx := testCtx(t)
	if r := h.mention(ctx, "ch", "b-codex", "w0", "@codex warm up"); r.err != nil {
		t.Fatalf("warm-up turn: %v", r.err)
	}

	const first = "@codex look at the flaky test"
	head, from, release := submitWhileStalled(t, ctx, h, &api.fakeModel, "ch", "b-codex", "m0", first)
	var burst []*run.Run
	for i := range 2 {
		id, text := fmt.Sprintf("s%d", i+1), fmt.Sprintf("@codex also item %d", i+1)
		h.post(channel.Message{ID: id, Channel: "ch", Author: "carla", Body: text})
		r, err := h.d.Submit(apitype.TurnRequest{Channel: "ch", Binding: "b-codex", MessageID: id, Text: text})
		if err != nil {
			t.Fatal(err)
		}
		burst = append(burst, r)
	}
	// Both mentions are in the running turn once codex-acp has answered
	// both steers; only then may the model answer.
	testkit.WaitFor(t, time.Minute, func() bool { return len(steerOutcomes(t, taps)) >= 2 },
		testkit.Waiting("codex-acp to answer two _session/steering requests"))
	if got := steerOutcomes(t, taps); len(got) != 2 || got[0] != "injected" || got[1] != "injected" {
		t.Fatalf("codex-acp answered the steers %q, want injected twice", got)
	}
	release()

	for _, r := range append([]*run.Run{head}, burst...) {
		waitRun(t, ctx, r)
	}
	ev, err, _ := head.Result()
	if err != nil || ev.AnsweredBy != "" && ev.AnsweredBy != head.ID || len(ev.Answers) != 3 {
		t.Fatalf("the running run: done %+v, err %v; want it to answer all three mentions", ev, err)
	}
	calls := api.calls(t, from)
	for i, r := range burst {
		own, err, _ := r.Result()
		if err != nil || own.AnsweredBy != head.ID {
			t.Fatalf("mention %s ended answered_by %q (err %v), want the running run %s", r.MessageID, own.AnsweredBy, err, head.ID)
		}
		line := fmt.Sprintf("[%s] carla: @codex also item %d", r.MessageID, i+1)
		reached := false
		for _, c := range calls {
			all := strings.Join(c.users(), "\n")
			reached = reached || strings.Contains(all, first) && strings.Contains(all, line)
		}
		if !reached {
			t.Fatalf("no model call of the running turn carries the steered line %q (%d calls since it began)", line, len(calls))
		}
	}
	// The call in flight when the steers came is dropped, and the model
	// called again: the turn's usage counts the one call it used.
	if len(calls) != 2 {
		t.Fatalf("the running turn made %d model calls, want 2 (the one the steers came into, and one with them)", len(calls))
	}
	codexUsage(t, result{done: ev}, 1)
	t.Logf("codex-acp, bursts steer: 2 mentions steered into the running turn: %d model calls in that turn, its done counts 1", len(calls))
}

// steerOutcomes reads, from every tap record in dir, the outcomes of the
// _session/steering requests codex-acp has answered so far, in order. A
// record line the tap is still writing is left for the next read.
func steerOutcomes(t *testing.T, dir string) []string {
	t.Helper()
	files, _ := filepath.Glob(filepath.Join(dir, "tap-*.jsonl"))
	var out []string
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if i := bytes.LastIndexByte(data, '\n'); i >= 0 {
			data = data[:i]
		} else {
			continue
		}
		var msgs []rpc
		for _, l := range bytes.Split(data, []byte("\n")) {
			var tl tapLine
			var m rpc
			if json.Unmarshal(l, &tl) != nil || json.Unmarshal(tl.Msg, &m) != nil {
				t.Fatalf("tap record %s: a line that is not JSON-RPC: %.200s", f, l)
			}
			m.Dir = tl.Dir
			msgs = append(msgs, m)
		}
		_, answers := calls(msgs, acp.SteeringMethod)
		for _, a := range answers {
			if a == nil {
				continue
			}
			var res struct {
				Outcome string `json:"outcome"`
			}
			_ = json.Unmarshal(a.Result, &res)
			if a.Error != nil {
				res.Outcome = "error " + string(a.Error)
			}
			out = append(out, res.Outcome)
		}
	}
	return out
}

// waitRun waits for r to end.
func waitRun(t *testing.T, ctx context.Context, r *run.Run) {
	t.Helper()
	for {
		changed := r.Wait()
		if _, _, ok := r.Result(); ok {
			return
		}
		select {
		case <-changed:
		case <-ctx.Done():
			t.Fatalf("run %s never ended", r.ID)
		}
	}
}
