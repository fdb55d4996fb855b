package interop

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/tiktoken-go/tokenizer"

	"github.com/residentd/residentd/internal/channel"
	"github.com/residentd/residentd/internal/delivery"
)

// What a provider caches is the longest prefix a request shares with the
// session's previous one, in the order it reads a Messages request: tools,
// system, then the messages. canonical writes a request in that order,
// without the cache_control markers the CLI moves from call to call (they
// say where to cache, they are not content).
func canonical(body []byte) (string, error) {
	var req struct {
		Tools    []json.RawMessage `json:"tools"`
		System   json.RawMessage   `json:"system"`
		Messages []struct {
			Role    string          `json:"role"`
			Content json.RawMessage `json:"content"`
		} `json:"messages"`
	}
	if err := json.Unmarshal(body, &req); err != nil {
		return "", err
	}
	var b strings.Builder
	for _, t := range req.Tools {
		b.WriteString(stripCacheControl(t))
		b.WriteString("\n")
	}
	b.WriteString(stripCacheControl(req.System))
	for _, m := range req.Messages {
		b.WriteString("\n\n" + m.Role + ":\n" + stripCacheControl(m.Content))
	}
	return b.String(), nil
}

// stripCacheControl re-encodes a JSON value without cache_control keys.
func stripCacheControl(raw json.RawMessage) string {
	var v any
	if err := json.Unmarshal(raw, &v); err != nil {
		return string(raw)
	}
	var strip func(any) any
	strip = func(v any) any {
		switch x := v.(type) {
		case map[string]any:
			delete(x, "cache_control")
			for k, e := range x {
				x[k] = strip(e)
			}
		case []any:
			for i, e := range x {
				x[i] = strip(e)
			}
		}
		return v
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(strip(v))
	return strings.TrimSpace(buf.String())
}

// prefixStats is one warm turn's request against the previous one.
type prefixStats struct {
	tokens, shared int
}

// tokensBy returns a model request body's text as render gives it, in
// cl100k_base tokens; a body that is not a Messages request ends the test.
func tokensBy(t testing.TB, render func([]byte) (string, error)) func(body []byte) []uint {
	t.Helper()
	codec, err := tokenizer.Get(tokenizer.Cl100kBase)
	if err != nil {
		t.Fatal(err)
	}
	return func(body []byte) []uint {
		s, err := render(body)
		if err != nil {
			t.Fatalf("model request is not a Messages request: %v", err)
		}
		ids, _, _ := codec.Encode(s)
		return ids
	}
}

// sharedPrefix is how many tokens a and b share at their start.
func sharedPrefix(a, b []uint) int {
	n := 0
	for n < min(len(a), len(b)) && a[n] == b[n] {
		n++
	}
	return n
}

func (p prefixStats) share() float64 { return float64(p.shared) / float64(p.tokens) }
func (p prefixStats) fresh() int     { return p.tokens - p.shared }

// mainCalls returns the model requests of the agent's main thread that
// carry marker and not the later marker notYet, in order: the ones with its
// tools (a side call such as a title has none). Every request carries the
// whole history, so a turn's requests are those with its mention and
// without the next turn's.
func (f *fakeAPI) mainCalls(t *testing.T, marker, notYet string) [][]byte {
	t.Helper()
	var out [][]byte
	for _, r := range f.requests() {
		if r.Method != http.MethodPost || r.Path != "/v1/messages" || !bytes.Contains(r.Body, []byte(marker)) {
			continue
		}
		if notYet != "" && bytes.Contains(r.Body, []byte(notYet)) {
			continue
		}
		var probe struct {
			Tools []json.RawMessage `json:"tools"`
		}
		if json.Unmarshal(r.Body, &probe) == nil && len(probe.Tools) > 0 {
			out = append(out, r.Body)
		}
	}
	return out
}

// warmPrefix runs a cold turn and three warm ones, with new channel lines
// before each, through claude-agent-acp with the brief at placement, and
// measures each warm turn's first model request against the previous
// turn's last: how much of it is a prefix the provider has cached, and how
// many tokens are new.
func warmPrefix(t *testing.T, placement delivery.Placement) []prefixStats {
	api := newFakeAPI(t, "Looked into it: the retry count is set in webhook/config.go.")
	api.sized = true // the context in use grows as with a real model (no false compaction)
	b := claudeOn(t, api)
	b.BriefPlacement = placement
	h := newHarness(t, b)
	ctx := testCtx(t)
	tokens := tokensBy(t, canonical)
	lines := [][]string{
		{"the refund spec failed again on main", "aiko: the webhook retry fires twice under load"},
		{"ben: CI is green on the branch", "aiko: but the refund spec is still flaky locally"},
		{"carla: I pushed a fix for the locale cache key"},
		{"ben: deploy window is at 16:00", "aiko: the retry count lives in config, not code"},
	}
	var runs []string
	for i, ls := range lines {
		for j, l := range ls {
			h.post(channel.Message{ID: fmt.Sprintf("c%d-%d", i, j), Channel: "ch", Author: "aiko", Body: l})
		}
		r := h.mention(ctx, "ch", "b-claude", fmt.Sprintf("q%d", i), fmt.Sprintf("@claude turn %d: where is the retry count set?", i+1))
		want := "warm"
		if i == 0 {
			want = "cold"
		}
		if r.err != nil || r.done.Shape != want {
			t.Fatalf("turn %d: %+v %v, want %s", i+1, r.done, r.err, want)
		}
		runs = append(runs, fmt.Sprintf("turn %d:", i+1))
	}
	var out []prefixStats
	for i := 1; i < len(runs); i++ {
		next := ""
		if i+1 < len(runs) {
			next = runs[i+1]
		}
		prev, cur := api.mainCalls(t, runs[i-1], runs[i]), api.mainCalls(t, runs[i], next)
		if len(prev) == 0 || len(cur) == 0 {
			t.Fatalf("turn %d: %d and %d main model calls carry the turns", i+1, len(prev), len(cur))
		}
		a, b := tokens(prev[len(prev)-1]), tokens(cur[0])
		out = append(out, prefixStats{tokens: len(b), shared: sharedPrefix(a, b)})
	}
	return out
}

// TestClaudeWarmTurnPrefix: with the brief in the framing (the default for a
// resident binding) a warm turn through claude-agent-acp keeps at least 98%
// of its model request a prefix of the previous request and sends at most
// 350 new tokens (cl100k_base); with the brief in every turn (the source's
// placement) both are worse. The test prints both.
func TestClaudeWarmTurnPrefix(t *testing.T) {
	t.Parallel()
	results := map[delivery.Placement][]prefixStats{}
	for _, p := range []delivery.Placement{delivery.InTurn, delivery.InFraming} {
		results[p] = warmPrefix(t, p)
		for i, s := range results[p] {
			t.Logf("brief in %-7s warm turn %d: %d tokens, %d a prefix of the previous request (%.1f%%), %d new", p, i+2, s.tokens, s.shared, 100*s.share(), s.fresh())
		}
	}
	for i, s := range results[delivery.InFraming] {
		if s.share() < 0.98 || s.fresh() > 350 {
			t.Errorf("brief in framing, warm turn %d: %.1f%% a prefix, %d new tokens; want at least 98%% and at most 350", i+2, 100*s.share(), s.fresh())
		}
		if turn := results[delivery.InTurn][i]; s.fresh() >= turn.fresh() {
			t.Errorf("warm turn %d: %d new tokens with the brief in the framing, %d with it in the turn; want fewer", i+2, s.fresh(), turn.fresh())
		}
	}
}
