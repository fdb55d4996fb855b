package residency

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/residentd/residentd/internal/session"
)

var t0 = time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)

// cached is an idle key last used at used, its last request then, with
// the TTL given.
func cached(ch string, used, ttl time.Duration) Key {
	return Key{Key: session.Key{Channel: ch, Binding: "b"}, LastUsed: t0.Add(used), LastRequest: t0.Add(used), Agent: Agent{CacheTTL: ttl}}
}

// TestByName: the settings' names make their policies; an unknown name
// is refused with the names there are.
func TestByName(t *testing.T) {
	for name, want := range map[string]Policy{"timer": Timer{Idle: time.Minute}, "cache": CacheFirst{Idle: time.Minute}} {
		p, err := ByName(name, Settings{Idle: time.Minute})
		if err != nil || p != want || p.Name() != name {
			t.Fatalf("ByName(%q) = %v, %v; want %v", name, p, err, want)
		}
	}
	if _, err := ByName("lru", Settings{}); err == nil || !strings.Contains(err.Error(), "cache, ") {
		t.Fatalf("unknown name: %v, want an error listing the names", err)
	}
	if !slices.Contains(Names(), "test-only") { // -count runs it again
		Register("test-only", func(Settings) Policy { return Timer{} })
	}
	if _, err := ByName("test-only", Settings{}); err != nil {
		t.Fatalf("a registered policy: %v", err)
	}
	defer func() {
		if recover() == nil {
			t.Fatal("a name registered twice did not panic")
		}
	}()
	Register("timer", func(Settings) Policy { return Timer{} })
}

// TestCacheFirst: expired caches go first, least recently used first,
// whatever their recency against live ones; with every cache alive the
// soonest to expire goes; a process stays while its cache lives, even
// past the idle timer, and goes once it has expired and the timer ran.
func TestCacheFirst(t *testing.T) {
	p := CacheFirst{Idle: 30 * time.Minute}
	now := t0.Add(20 * time.Minute)
	long := cached("long", 0, time.Hour)                    // oldest, cache alive until 10:00
	short := cached("short", 10*time.Minute, 5*time.Minute) // newer, cache expired at 9:15
	none := cached("none", 15*time.Minute, 0)               // newest, no cache
	working := cached("busy", -time.Hour, 0)
	working.Working = true
	c := p.Victim(now, []Key{long, short, none, working})
	if c.Index != 1 || c.Reason != ReasonCacheExpired {
		t.Fatalf("victim %+v, want short (expired, least recently used of the expired)", c)
	}
	if c := p.Victim(now, []Key{long, cached("hour2", 5*time.Minute, time.Hour)}); c.Index != 0 || c.Reason != ReasonCacheSoonest {
		t.Fatalf("victim %+v, want long (expires first)", c)
	}
	for _, tt := range []struct {
		k    Key
		at   time.Duration
		want bool
		why  string
	}{
		{long, 45 * time.Minute, false, ReasonCacheAlive},
		{long, 61 * time.Minute, true, "cache expired and idle past 30m0s"},
		{short, 20 * time.Minute, false, "idle for less than 30m0s"},
		{short, 40 * time.Minute, true, "cache expired and idle past 30m0s"},
		{working, 5 * time.Hour, false, ReasonWorking},
	} {
		if got, why := p.Expire(t0.Add(tt.at), tt.k); got != tt.want || why != tt.why {
			t.Errorf("Expire(%s at +%s) = %v %q, want %v %q", tt.k.Key.Channel, tt.at, got, why, tt.want, tt.why)
		}
	}
}

// TestTTLByGaps: returns within the hour but past five minutes pay for the
// 1-hour cache's dearer writes; returns within five minutes, or after the
// hour, do not; too few returns say 5 minutes.
func TestTTLByGaps(t *testing.T) {
	m := time.Minute
	for _, tt := range []struct {
		gaps []time.Duration
		want time.Duration
	}{
		{[]time.Duration{20 * m, 30 * m, 40 * m}, TTL1h},
		{[]time.Duration{2 * m, 3 * m, 4 * m}, TTL5m},
		{[]time.Duration{2 * time.Hour, 3 * time.Hour, 20 * m}, TTL5m},
		{[]time.Duration{20 * m, 30 * m}, TTL5m},
	} {
		if got, why := TTLByGaps(tt.gaps, Prices{}); got != tt.want || why == "" {
			t.Errorf("TTLByGaps(%v) = %s %q, want %s", tt.gaps, got, why, tt.want)
		}
	}
	// At prices where a 1-hour write costs ten reads more, 20-minute
	// returns still pay for it; a third of them past the hour do not.
	p := Prices{Input: 3, CacheRead: 0.3, CacheWrite5m: 3.75, CacheWrite1h: 6}
	if got, _ := TTLByGaps([]time.Duration{20 * m, 25 * m, 30 * m}, p); got != TTL1h {
		t.Errorf("20-30 min returns at real prices: %s", got)
	}
	if got, _ := TTLByGaps([]time.Duration{20 * m, 2 * time.Hour, 3 * time.Hour}, p); got != TTL5m {
		t.Errorf("mostly past the hour at real prices: %s", got)
	}
}

// TestCompactDue: a large context whose 1-hour cache expires within the
// margin is compacted; not before the margin, not once it expired, not a
// small context, not a 5-minute cache the key tends to come back within.
func TestCompactDue(t *testing.T) {
	k := cached("a", 0, time.Hour)
	k.ContextTokens = 250_000
	for _, tt := range []struct {
		at   time.Duration
		k    func(Key) Key
		want bool
	}{
		{53 * time.Minute, nil, false},
		{54 * time.Minute, nil, true},
		{61 * time.Minute, nil, false},
		{55 * time.Minute, func(k Key) Key { k.ContextTokens = 10_000; return k }, false},
		{55 * time.Minute, func(k Key) Key { k.Working = true; return k }, false},
		{4*time.Minute + 40*time.Second, func(k Key) Key {
			k.Agent.CacheTTL, k.Gaps = TTL5m, []time.Duration{time.Minute, 2 * time.Minute, time.Hour}
			return k
		}, false},
		{4*time.Minute + 40*time.Second, func(k Key) Key {
			k.Agent.CacheTTL, k.Gaps = TTL5m, []time.Duration{time.Minute, 2 * time.Hour, time.Hour}
			return k
		}, true},
	} {
		kk := k
		if tt.k != nil {
			kk = tt.k(k)
		}
		if got, why := CompactDue(t0.Add(tt.at), kk, 200_000); got != tt.want || why == "" {
			t.Errorf("CompactDue at +%s (%+v) = %v %q, want %v", tt.at, kk, got, why, tt.want)
		}
	}
}

// TestKeepAliveDue: a keep-alive just before expiry pays when the key
// tends to return within the next cache life, and not when it returns
// much later or never this late.
func TestKeepAliveDue(t *testing.T) {
	m := time.Minute
	k := cached("a", 0, TTL5m)
	at := t0.Add(4*m + 40*time.Second)
	k.Gaps = []time.Duration{7 * m, 8 * m, 2 * m}
	if ok, why := KeepAliveDue(at, k); !ok {
		t.Fatalf("returns at 7-8 min: %q, want a keep-alive", why)
	}
	k.Gaps = []time.Duration{3 * time.Hour, 2 * time.Hour, 2 * m}
	if ok, why := KeepAliveDue(at, k); ok {
		t.Fatalf("returns after hours: %q, want none", why)
	}
	k.Gaps = []time.Duration{m, 2 * m, 3 * m}
	if ok, why := KeepAliveDue(at, k); ok || why != "never returned this late" {
		t.Fatalf("returns always within the cache: %v %q", ok, why)
	}
	k.Gaps = []time.Duration{7 * m, 8 * m, 2 * m}
	if ok, _ := KeepAliveDue(t0.Add(3*m), k); ok {
		t.Fatal("a keep-alive with minutes of cache left")
	}
}
