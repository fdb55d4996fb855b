package interop

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/residentd/residentd/apitype"
	"github.com/residentd/residentd/internal/config"
	"github.com/residentd/residentd/internal/testkit"
)

// TestClaudeEvictionFollowsCacheLife: two claude-agent-acp 0.101 bindings
// against the fake model, one asking for the 1-hour cache (cache_ttl 1h:
// the daemon starts it with ENABLE_PROMPT_CACHING_1H, so its requests mark
// the cache 1h) and one whose cache the daemon takes to live 2 seconds.
// With two slots and residency cache, a third key's turn evicts the key
// whose cache has expired though it was used last, not the least recently
// used one whose cache lives: eviction follows cache life, not recency.
func TestClaudeEvictionFollowsCacheLife(t *testing.T) {
	t.Parallel()
	api := newFakeAPI(t, "Noted.")
	long := claude0101Binding(t, t.TempDir(), api.env())
	long.ID, long.CacheTTL = "b-long", "1h"
	short := claude0101Binding(t, t.TempDir(), api.env())
	short.ID, short.Handle, short.CacheTTL = "b-short", "@short", "2s"
	h := newHarnessCfg(t, func(c *config.Config) { c.MaxLive, c.Residency = 2, "cache" }, long, short)
	ctx := testCtx(t)

	turn := func(ch, binding, marker string) {
		t.Helper()
		if r := h.turn(ctx, apitype.TurnRequest{Channel: ch, Binding: binding, Text: "@claude note " + marker}, nil); r.err != nil {
			t.Fatalf("%s/%s: %v", ch, binding, r.err)
		}
	}
	turn("ch-long", "b-long", "LONG-ONE")
	turn("ch-short", "b-short", "SHORT-ONE")

	// The 1-hour cache was asked of the agent at spawn, the 5-minute one
	// of the other (its 2 s are the daemon's estimate only).
	for marker, want := range map[string]string{"LONG-ONE": `"ttl":"1h"`, "SHORT-ONE": ""} {
		calls := api.rawCalls(marker)
		if len(calls) == 0 {
			t.Fatalf("no model call carried %s", marker)
		}
		var marks []string
		for _, c := range calls {
			marks = append(marks, cacheControls(c)...)
		}
		has := slices.ContainsFunc(marks, func(m string) bool { return strings.Contains(m, `"ttl":"1h"`) })
		if len(marks) == 0 || has != (want != "") {
			t.Fatalf("the model calls of %s mark the 1-hour cache: %v, want %v: %q", marker, has, want != "", marks)
		}
	}

	// Wait for the short cache's estimated expiry, as the listing says it.
	testkit.WaitFor(t, 30*time.Second, func() bool {
		for _, s := range h.d.Sessions() {
			if s.Binding == "b-short" && s.Residency != nil && s.Residency.CacheExpires != nil {
				return time.Now().After(*s.Residency.CacheExpires)
			}
		}
		return false
	}, testkit.Waiting("ch-short's 2-second cache to expire"))
	for _, s := range h.d.Sessions() {
		if s.Residency == nil {
			t.Fatalf("%s/%s has no residency in the listing", s.Channel, s.Binding)
		}
		want := map[string]string{"b-long": "cache alive", "b-short": "idle for less than 30m0s"}[s.Binding]
		if s.Residency.Keep != want {
			t.Fatalf("%s/%s kept because %q, want %q", s.Channel, s.Binding, s.Residency.Keep, want)
		}
	}

	turn("ch-new", "b-long", "NEW-ONE")
	var live []string
	for _, s := range h.d.Sessions() {
		live = append(live, s.Channel)
	}
	slices.Sort(live)
	if want := []string{"ch-long", "ch-new"}; !slices.Equal(live, want) {
		t.Fatalf("live after the third key's turn: %v, want %v (the expired cache's key evicted)", live, want)
	}
	if n := testutil.ToFloat64(h.m.ResidencyDecisions.WithLabelValues("b-short", "cache", "evict", "cache expired")); n != 1 {
		t.Fatalf("residentd_residency_decisions_total{b-short,cache,evict,cache expired} = %v, want 1", n)
	}
	if n := testutil.ToFloat64(h.m.Evictions.WithLabelValues("capacity")); n != 1 {
		t.Fatalf("capacity evictions %v, want 1", n)
	}
	t.Logf("live %v", live)
}

// rawCalls are the bodies of the POST /v1/messages calls that hold
// marker, in order (the turn's own and its side calls, such as a title's).
func (f *fakeAPI) rawCalls(marker string) []string {
	var out []string
	for _, r := range f.requests() {
		if r.Method == "POST" && r.Path == "/v1/messages" && strings.Contains(string(r.Body), marker) {
			out = append(out, string(r.Body))
		}
	}
	return out
}

// cacheControls are the cache_control marks of a request body.
func cacheControls(body string) []string {
	var out []string
	for rest := body; ; {
		i := strings.Index(rest, `"cache_control":`)
		if i < 0 {
			return out
		}
		rest = rest[i:]
		j := strings.Index(rest, "}")
		out = append(out, rest[:j+1])
		rest = rest[j+1:]
	}
}
