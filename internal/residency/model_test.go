package residency

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/residentd/residentd/internal/session"
)

// team's prices: the default team day's, per million tokens.
var team = Prices{Input: 3, CacheWrite5m: 3.75, CacheWrite1h: 6, CacheRead: 0.30}

// idleKey is an idle key of context ctx whose last turn (and request)
// ended idle ago, with the TTL, restore mode and return gaps given.
func idleKey(ch string, idle, ttl time.Duration, keeps bool, ctx int64, gaps ...time.Duration) Key {
	at := t0.Add(-idle)
	return Key{
		Key: session.Key{Channel: ch, Binding: "b"}, LastUsed: at, LastRequest: at, ContextTokens: ctx, Gaps: gaps,
		Agent: Agent{CacheTTL: ttl, RestoreKeepsCache: keeps, StartSeconds: 6, RestoreSeconds: 4, Prices: team},
	}
}

func repeat(d time.Duration, n int) []time.Duration {
	out := make([]time.Duration, n)
	for i := range out {
		out[i] = d
	}
	return out
}

func near(a, b float64) bool { return math.Abs(a-b) <= 1e-9*max(1, math.Abs(b)) }

// TestTokenPrices: a price left at zero is Anthropic's ratio to Input;
// none at all is the ratios themselves.
func TestTokenPrices(t *testing.T) {
	for _, c := range []struct {
		name       string
		p          Prices
		r, w5, w1h float64 // per million
	}{
		{"all given", team, 0.30, 3.75, 6},
		{"input only", Prices{Input: 3}, 0.30, 3.75, 6},
		{"1h missing", Prices{Input: 3, CacheWrite5m: 4, CacheRead: 0.2}, 0.2, 4, 6},
		{"none", Prices{}, 0.1, 1.25, 2},
	} {
		tp := c.p.tokenPrices()
		if !near(tp.CacheRead, c.r*perToken) || !near(tp.Write(TTL5m), c.w5*perToken) || !near(tp.Write(TTL1h), c.w1h*perToken) {
			t.Errorf("%s: read %g, write 5m %g, 1h %g per token; want %g, %g, %g per million", c.name, tp.CacheRead, tp.Write(TTL5m), tp.Write(TTL1h), c.r, c.w5, c.w1h)
		}
	}
}

// TestReturnsAfter: the gaps longer than the idle time, less it, each
// counting one; a prior's exponential counts by its weight and its
// chance of lasting that long.
func TestReturnsAfter(t *testing.T) {
	gaps := []time.Duration{time.Minute, 10 * time.Minute, 30 * time.Minute, 2 * time.Hour}
	r := ReturnsAfter(gaps, Prior{}, 5*time.Minute) // left: 5m, 25m, 115m
	for _, c := range []struct {
		x    time.Duration
		want float64
	}{{0, 0}, {4 * time.Minute, 0}, {5 * time.Minute, 1. / 3}, {30 * time.Minute, 2. / 3}, {2 * time.Hour, 1}} {
		if got := r.Within(c.x); !near(got, c.want) {
			t.Errorf("Within(%s) = %g, want %g", c.x, got, c.want)
		}
	}
	if got, want := r.Held(time.Hour), (5+25+60)*time.Minute/3; got != want {
		t.Errorf("Held(1h) = %s, want %s", got, want)
	}
	if got := ReturnsAfter(gaps, Prior{}, 3*time.Hour).Within(time.Hour); got != 0 {
		t.Errorf("idle past every gap with no prior: Within = %g, want 0", got)
	}
	p := Prior{Weight: 1, Means: []time.Duration{time.Hour}, Shares: []float64{1}}
	e := ReturnsAfter(nil, p, 3*time.Hour) // memoryless: still a mean of an hour
	if got, want := e.Within(time.Hour), 1-math.Exp(-1); !near(got, want) {
		t.Errorf("prior only: Within(1h) = %g, want %g", got, want)
	}
}

// TestEstimate: what a key's staying warm is worth, case by case.
func TestEstimate(t *testing.T) {
	v := DefaultValues()
	often := repeat(10*time.Minute, 20)
	rare := repeat(6*time.Hour, 20)
	for _, c := range []struct {
		name        string
		k           Key
		restoreCost float64 // dollars
		pIn         string  // "high", "low", "zero"
		pays        bool
	}{
		{"live 1h cache, back often, restore loses it", idleKey("a", 5*time.Minute, TTL1h, false, 100000, often...), 100000 * 5.7e-6, "high", true},
		{"same, restore keeps the cache", idleKey("a", 5*time.Minute, TTL1h, true, 100000, often...), 0, "high", true},
		{"5m cache expired, back rarely", idleKey("a", 2*time.Hour, TTL5m, false, 100000, rare...), 100000 * 3.45e-6, "zero", false},
		{"live 1h cache, back rarely", idleKey("a", 5*time.Minute, TTL1h, false, 100000, rare...), 100000 * 5.7e-6, "low", true},
	} {
		e := v.Estimate(t0, c.k, DefaultPrior())
		if !near(e.RestoreCost, c.restoreCost) {
			t.Errorf("%s: restore cost $%g, want $%g", c.name, e.RestoreCost, c.restoreCost)
		}
		switch {
		case c.pIn == "high" && e.PInCache < 0.9, c.pIn == "low" && (e.PInCache <= 0 || e.PInCache > 0.3), c.pIn == "zero" && e.PInCache != 0:
			t.Errorf("%s: chance of a return in the cache's life %g, want %s", c.name, e.PInCache, c.pIn)
		}
		if (e.Value > 0) != c.pays || e.Value < 0 {
			t.Errorf("%s: value $%g, want paying %v", c.name, e.Value, c.pays)
		}
		if !near(e.TokenSaving, e.PInCache*e.RestoreCost) || e.Loss < e.TokenSaving || e.Until <= 0 || e.Until > SlotHorizon {
			t.Errorf("%s: inconsistent estimate %+v", c.name, e)
		}
	}
}

// TestSavingVictim: who goes when a slot is needed, and why.
func TestSavingVictim(t *testing.T) {
	s := Saving{}
	often := repeat(10*time.Minute, 20)
	rare := repeat(5*time.Hour, 20)
	busy := idleKey("busy", 3*time.Hour, TTL5m, false, 20000)
	busy.Working = true
	for _, c := range []struct {
		name   string
		idle   []Key
		want   int
		reason string
	}{
		{"an expired cache goes before a live one, however recent",
			[]Key{idleKey("live", 50*time.Minute, TTL1h, false, 20000, rare...), idleKey("expired", 10*time.Minute, TTL5m, false, 150000, often...)},
			1, ReasonExpiredSavesLeast},
		{"of live caches, the one least likely back before it expires",
			[]Key{idleKey("often", 5*time.Minute, TTL1h, false, 100000, often...), idleKey("rare", 5*time.Minute, TTL1h, false, 100000, rare...)},
			1, ReasonSavesLeast},
		{"of live caches equally likely back, the smaller context",
			[]Key{idleKey("big", 5*time.Minute, TTL1h, false, 140000, often...), idleKey("small", 5*time.Minute, TTL1h, false, 20000, often...)},
			1, ReasonSavesLeast},
		{"a restore that keeps the cache: no class of live caches, the key least likely back",
			[]Key{idleKey("expired-often", 10*time.Minute, TTL5m, true, 100000, often...), idleKey("live-rare", 5*time.Minute, TTL1h, true, 100000, rare...)},
			1, ReasonSavesLeast},
		{"a working key is never the victim", []Key{busy, idleKey("live", time.Minute, TTL1h, false, 150000, often...)}, 1, ReasonSavesLeast},
		{"none idle", []Key{busy}, -1, ""},
	} {
		got := s.Victim(t0, c.idle)
		if got.Index != c.want || ReasonLabel(got.Reason) != c.reason {
			t.Errorf("%s: victim %d (%q), want %d (%q)", c.name, got.Index, got.Reason, c.want, c.reason)
		}
	}
}

// TestSavingExpire: the reaper keeps a key while staying warm pays.
func TestSavingExpire(t *testing.T) {
	often := repeat(10*time.Minute, 20)
	rare := repeat(20*time.Hour, 40)
	busy := idleKey("busy", 5*time.Hour, TTL5m, false, 20000)
	busy.Working = true
	for _, c := range []struct {
		name   string
		s      Saving
		k      Key
		goes   bool
		reason string
	}{
		{"working", Saving{}, busy, false, ReasonWorking},
		{"live cache, back often", Saving{Idle: 30 * time.Minute}, idleKey("a", 20*time.Minute, TTL1h, false, 100000, often...), false, ReasonPays},
		{"live cache past the idle time: kept", Saving{Idle: 10 * time.Minute}, idleKey("a", 20*time.Minute, TTL1h, false, 100000, often...), false, ReasonPays},
		{"expired cache past the idle time", Saving{Idle: 30 * time.Minute}, idleKey("a", 40*time.Minute, TTL5m, false, 100000, often...), true, ReasonExpiredIdle},
		{"expired cache, back in a day at best", Saving{}, idleKey("a", 40*time.Minute, TTL5m, false, 100000, rare...), true, ReasonNoLongerPays},
	} {
		goes, why := c.s.Expire(t0, c.k)
		if goes != c.goes || ReasonLabel(why) != c.reason {
			t.Errorf("%s: goes %v (%q), want %v (%q)", c.name, goes, why, c.goes, c.reason)
		}
	}
}

// TestSavingRegistered: the daemon's name makes it, with its idle time.
func TestSavingRegistered(t *testing.T) {
	p, err := ByName("saving", Settings{Idle: 30 * time.Minute})
	if err != nil || p != (Saving{Idle: 30 * time.Minute}) || p.Name() != "saving" {
		t.Fatalf("ByName(saving) = %v, %v", p, err)
	}
	if _, ok := p.(KeepAliver); !ok {
		t.Fatal("saving does not decide keep-alives itself")
	}
}

// TestReasonLabel: a reason's fixed part, for a metrics label.
func TestReasonLabel(t *testing.T) {
	for in, want := range map[string]string{
		ReasonPays + ": idle 3m, cache alive": ReasonPays,
		ReasonCacheExpired:                    ReasonCacheExpired,
		"":                                    "",
	} {
		if got := ReasonLabel(in); got != want {
			t.Errorf("ReasonLabel(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestChooseTTL: the hour where returns come within it but after 5
// minutes, 5 minutes where they come sooner or much later.
func TestChooseTTL(t *testing.T) {
	keys := func(gaps ...time.Duration) []Key {
		return []Key{idleKey("a", 0, 0, false, 60000, gaps...), idleKey("b", 0, 0, false, 30000, gaps...)}
	}
	for _, c := range []struct {
		name string
		keys []Key
		want time.Duration
		why  string
	}{
		{"returns within minutes", keys(repeat(2*time.Minute, 30)...), TTL5m, "5m, 2 keys, 60 gaps seen"},
		{"returns within the hour", keys(repeat(25*time.Minute, 30)...), TTL1h, "1h, 2 keys"},
		{"returns after hours", keys(repeat(8*time.Hour, 30)...), TTL5m, "5m, 2 keys"},
		{"no keys yet: the provider's default", nil, TTL5m, "5m, no keys yet"},
	} {
		got, why := ChooseTTL(c.keys, 2000, Prior{})
		if got != c.want || !strings.HasPrefix(why, c.why) {
			t.Errorf("%s: %s (%q), want %s (%q…)", c.name, got, why, c.want, c.why)
		}
	}
}

// TestKeepAlive: a keep-alive pays where returns come just past the
// cache's life, not where they come much later, and never for an
// expired cache.
func TestKeepAlive(t *testing.T) {
	soon := t0.Add(-4*time.Minute - 30*time.Second) // a 5m cache expires in 30 s
	k := func(gap time.Duration) Key {
		x := idleKey("a", 0, TTL5m, false, 100000, repeat(gap, 20)...)
		x.LastUsed, x.LastRequest = soon, soon
		return x
	}
	for _, c := range []struct {
		name string
		k    Key
		now  time.Time
		want bool
	}{
		{"back 7 minutes after", k(7 * time.Minute), t0, true},
		{"back hours after", k(3 * time.Hour), t0, false},
		{"expired", k(7 * time.Minute), t0.Add(time.Minute), false},
	} {
		if got, why := (Saving{}).KeepAlive(c.now, c.k); got != c.want {
			t.Errorf("%s: keep-alive %v (%s), want %v", c.name, got, why, c.want)
		}
	}
}

// TestOracle: it evicts the key whose next mention is farthest, after
// those whose cache will not serve it, and keeps a live cache that will.
func TestOracle(t *testing.T) {
	next := map[string]time.Duration{"soon": 10 * time.Minute, "later": 40 * time.Minute, "late": 3 * time.Hour}
	o := Oracle{Next: func(k session.Key, after time.Time) (time.Time, bool) {
		d, ok := next[k.Channel]
		return after.Add(d), ok
	}}
	live := func(ch string) Key { return idleKey(ch, time.Minute, TTL1h, false, 50000) }
	dead := func(ch string) Key { return idleKey(ch, 10*time.Minute, TTL5m, false, 50000) }
	for _, c := range []struct {
		name string
		idle []Key
		want int
	}{
		{"a cache that will not serve goes before one that will, though sooner", []Key{live("later"), dead("soon")}, 1},
		{"a live cache that will not serve is no better than an expired one", []Key{dead("soon"), live("late"), live("later")}, 1},
		{"every cache serves: the farthest", []Key{live("soon"), live("later")}, 1},
		{"never mentioned again goes first", []Key{dead("soon"), dead("never"), dead("late")}, 1},
	} {
		if got := o.Victim(t0, c.idle); got.Index != c.want || got.Reason == "" {
			t.Errorf("%s: victim %+v, want %d", c.name, got, c.want)
		}
	}
	for _, c := range []struct {
		k    Key
		goes bool
	}{{live("later"), false}, {dead("soon"), false}, {dead("late"), true}, {dead("never"), true}} {
		if goes, why := o.Expire(t0, c.k); goes != c.goes {
			t.Errorf("expire %s: %v (%s), want %v", c.k.Key.Channel, goes, why, c.goes)
		}
	}
}
