package interop

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"path/filepath"
	"testing"
	"time"

	"github.com/residentd/residentd/apitype"
	"github.com/residentd/residentd/internal/channel"
	"github.com/residentd/residentd/internal/config"
	"github.com/residentd/residentd/internal/session"
	"github.com/residentd/residentd/internal/testkit"
)

// threadLines are the replies posted in the thread before its mention.
var threadLines = []string{
	"is it the retry count or the cache key?",
	"the retry count: it fires twice when the webhook times out",
	"then the refund spec sees two refunds and fails",
}

const threadMention = "@claude thread question: where do we cap the webhook retries?"

// threadFirstTurn runs three channel turns through claude-agent-acp with
// scope thread, then a mention inside a thread of the channel: with fork
// the thread's key forks the channel's session; without, the channel's
// key is started fresh first, so the thread's session starts new with the
// thread's snapshot (as for an agent without session/fork). It returns the
// thread turn's first main model request measured against every main
// request the fake model got before it: its tokens (cl100k_base), and how
// many of them are new, past the longest prefix it shares with an earlier
// request (what a provider's prompt cache could not serve).
func threadFirstTurn(t *testing.T, ctx context.Context, fork bool, model string) (whole, conv prefixStats) {
	t.Helper()
	api := newFakeAPI(t, "Looked into it: the retry count is set in webhook/config.go.")
	api.sized = true
	home := t.TempDir()
	b := claudeBinding(t, home, map[string]string{"ANTHROPIC_BASE_URL": api.URL(), "ANTHROPIC_API_KEY": "dummy", "ANTHROPIC_MODEL": model})
	b.Scope = config.ScopeThread
	h := newHarness(t, b)
	var chNative string
	for i, ls := range floorLines[:3] {
		for j, l := range ls {
			h.post(channel.Message{ID: fmt.Sprintf("c%d-%d", i, j), Channel: "ch", Author: "aiko", Body: l})
		}
		r := h.mention(ctx, "ch", "b-claude", fmt.Sprintf("q%d", i), floorMention(i+1))
		if r.err != nil {
			t.Fatalf("channel turn %d: %v", i+1, r.err)
		}
		chNative = r.done.Native
	}
	// The CLI writes its transcript after it answered; a fork reads it.
	transcript := filepath.Join(home, ".claude", "projects", "*", chNative+".jsonl")
	testkit.WaitFor(t, 30*time.Second, func() bool {
		m, _ := filepath.Glob(transcript)
		return len(m) > 0
	}, testkit.Waiting("claude-agent-acp to write its transcript %s", transcript))
	if !fork {
		if _, err := h.d.Fresh(session.Key{Channel: "ch", Binding: "b-claude"}); err != nil {
			t.Fatal(err)
		}
	}
	root := "c0-0"
	for i, l := range threadLines {
		h.post(channel.Message{ID: fmt.Sprintf("t%d", i), Channel: "ch", ThreadRoot: root, Author: "ben", Body: l})
	}
	h.post(channel.Message{ID: "tq", Channel: "ch", ThreadRoot: root, Author: "carla", Body: threadMention})
	r := h.turn(ctx, apitype.TurnRequest{Channel: "ch", Binding: "b-claude", MessageID: "tq", ThreadRoot: &root, Text: threadMention}, nil)
	want := map[bool]string{true: "restored", false: "cold"}[fork]
	if r.err != nil || r.done.Shape != want || r.done.Native == chNative {
		t.Fatalf("thread turn: %+v %v, want %s on a session of its own", r.done, r.err, want)
	}
	if fork {
		ss := h.d.Sessions()
		if len(ss) != 2 {
			t.Fatalf("sessions %+v, want the channel's and the thread's", ss)
		}
		for _, s := range ss {
			if s.ThreadRoot == root && s.RestoredBy != "fork" {
				t.Fatalf("thread session %+v, want restored_by fork", s)
			}
		}
		// The channel goes on warm in its own session.
		c := h.mention(ctx, "ch", "b-claude", "q3", floorMention(4))
		if c.err != nil || c.done.Shape != "warm" || c.done.Native != chNative {
			t.Fatalf("the channel after the fork: %+v %v, want warm on %s", c.done, c.err, chNative)
		}
	}
	return firstCallFresh(t, api, "thread question:", canonical), firstCallFresh(t, api, "thread question:", canonicalMessages)
}

// firstCallFresh measures the first main model request carrying marker
// against every main request before it (see threadFirstTurn), each
// rendered by render.
func firstCallFresh(t *testing.T, api *fakeAPI, marker string, render func([]byte) (string, error)) prefixStats {
	t.Helper()
	enc := tokensBy(t, render)
	var earlier [][]uint
	for _, r := range api.requests() {
		if r.Method != http.MethodPost || r.Path != "/v1/messages" {
			continue
		}
		var probe struct {
			Tools []json.RawMessage `json:"tools"`
		}
		if json.Unmarshal(r.Body, &probe) != nil || len(probe.Tools) == 0 {
			continue // a side call (a title), not the agent's main thread
		}
		ids := enc(r.Body)
		if !bytes.Contains(r.Body, []byte(marker)) {
			earlier = append(earlier, ids)
			continue
		}
		shared := 0
		for _, e := range earlier {
			shared = max(shared, sharedPrefix(e, ids))
		}
		return prefixStats{tokens: len(ids), shared: shared}
	}
	t.Fatalf("no main model request carries %q", marker)
	return prefixStats{}
}

// TestClaudeThreadFork: claude-agent-acp 0.49 advertises session/fork
// (sessionCapabilities.fork). A thread's first session forked from the
// channel's starts with the channel's history, and the channel's session
// goes on warm. With the model pinned (ANTHROPIC_MODEL), the fork's first
// model request extends the channel session's last one, so it sends fewer
// new tokens than a new session given the thread's snapshot (asserted).
// With the agent's default model the forked CLI resolves the model anew
// (as a resumed one does: the default's 1M-context variant is dropped), so
// its system text differs and only the tools are a cached prefix (logged,
// for BENCHMARKS.md).
func TestClaudeThreadFork(t *testing.T) {
	t.Parallel()
	for _, model := range []string{"claude-opus-4-8", ""} {
		name := map[bool]string{true: "model " + model, false: "default model"}[model != ""]
		t.Run(name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
			defer cancel()
			fw, fc := threadFirstTurn(t, ctx, true, model)
			nw, nc := threadFirstTurn(t, ctx, false, model)
			t.Logf("%s: thread's first turn, new tokens of the whole request (of its tokens): forked %d (%d), new session with the thread's snapshot %d (%d); conversation part: forked %d (%d), new %d (%d)",
				name, fw.fresh(), fw.tokens, nw.fresh(), nw.tokens, fc.fresh(), fc.tokens, nc.fresh(), nc.tokens)
			if model != "" && fw.fresh() >= nw.fresh() {
				t.Errorf("the forked session's first turn sent %d new tokens, a new session's %d: the fork kept no cached prefix", fw.fresh(), nw.fresh())
			}
		})
	}
}
