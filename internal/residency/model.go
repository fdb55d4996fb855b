package residency

import (
	"math"
	"time"
)

// perToken turns a price per million tokens into one per token.
const perToken = 1e-6

// tokenPrices is p per token, in dollars: a price left at zero is taken
// at Anthropic's rate to Input (a cache read 0.1×, a 5-minute write 1.25×,
// a 1-hour one 2×) — a binding's config may name only its input price —
// and with no price at all OrRatios' ratios, which still order keys.
func (p Prices) tokenPrices() Prices {
	if p.Input > 0 {
		if p.CacheRead <= 0 {
			p.CacheRead = 0.1 * p.Input
		}
		if p.CacheWrite5m <= 0 {
			p.CacheWrite5m = 1.25 * p.Input
		}
		if p.CacheWrite1h <= 0 {
			p.CacheWrite1h = 2 * p.Input
		}
	}
	p = p.OrRatios()
	return Prices{Input: p.Input * perToken, Output: p.Output * perToken, CacheRead: p.CacheRead * perToken,
		CacheWrite5m: p.CacheWrite5m * perToken, CacheWrite1h: p.CacheWrite1h * perToken}
}

// Prior is what the model assumes of a key's return gaps besides the
// ones it has seen: a mixture of exponential gaps with the given means
// and shares, counted as Weight gaps. With no gaps seen it is the whole
// estimate; with many it is a small part of it.
type Prior struct {
	Weight float64
	Means  []time.Duration
	Shares []float64
}

// DefaultPrior: a person comes back within the burst (a few minutes),
// within the working session (half an hour) or much later (hours), worth
// two gaps seen. Its hazard falls with the idle time, as people's does: a
// key idle for hours is expected to stay idle.
func DefaultPrior() Prior {
	return Prior{Weight: 2, Means: []time.Duration{3 * time.Minute, 30 * time.Minute, 4 * time.Hour}, Shares: []float64{0.3, 0.4, 0.3}}
}

func (p Prior) orDefault() Prior {
	if p.Weight == 0 && len(p.Means) == 0 {
		return DefaultPrior()
	}
	return p
}

// Returns is the distribution of when a key is mentioned again, seen from
// a moment it has been idle for some time: its gaps longer than that
// idle time, each weighing 1, and the prior's exponentials, each weighing
// Weight × share × its chance of lasting that long (an exponential has no
// memory, so what is left of it is the same exponential).
type Returns struct {
	left  []time.Duration // each gap seen beyond the idle time, less the idle time
	exps  []expPart
	total float64
}

type expPart struct {
	weight float64
	mean   float64 // seconds
}

// ReturnsAfter is the return distribution of a key with gaps, idle for
// idle.
func ReturnsAfter(gaps []time.Duration, prior Prior, idle time.Duration) Returns {
	var r Returns
	for _, g := range gaps {
		if g > idle {
			r.left = append(r.left, g-idle)
			r.total++
		}
	}
	for i, m := range prior.Means {
		if m <= 0 || i >= len(prior.Shares) {
			continue
		}
		w := prior.Weight * prior.Shares[i] * math.Exp(-idle.Seconds()/m.Seconds())
		if w > 0 {
			r.exps = append(r.exps, expPart{weight: w, mean: m.Seconds()})
			r.total += w
		}
	}
	return r
}

// Within is the chance the key is mentioned again within x.
func (r Returns) Within(x time.Duration) float64 {
	if r.total == 0 || x <= 0 {
		return 0
	}
	n := 0.0
	for _, g := range r.left {
		if g <= x {
			n++
		}
	}
	for _, e := range r.exps {
		n += e.weight * (1 - math.Exp(-x.Seconds()/e.mean))
	}
	return n / r.total
}

// Held is how long, expected, a process kept for at most h waits before
// its key is mentioned again or h ends: E[min(T, h)].
func (r Returns) Held(h time.Duration) time.Duration {
	if h <= 0 {
		return 0
	}
	if r.total == 0 {
		return h
	}
	s := 0.0
	for _, g := range r.left {
		s += min(g, h).Seconds()
	}
	for _, e := range r.exps {
		s += e.weight * e.mean * (1 - math.Exp(-h.Seconds()/e.mean))
	}
	return time.Duration(s / r.total * float64(time.Second))
}

// Values are what a person's wait and a process's memory are worth, in
// dollars, to weigh them against the provider's prices.
type Values struct {
	WaitPerSecond float64 // a second a person waits for a start or a restore
	MemoryGiBHour float64 // a GiB of memory held for an hour
	DefaultMemory int64   // bytes, for a key whose memory is not known
}

// DefaultValues: a person's second at a cent ($36 an hour), a GiB-hour
// of a desktop's memory at five cents, 280 MiB for a process whose size
// is not known (claude-agent-acp's tree holds 262–291 MiB).
func DefaultValues() Values {
	return Values{WaitPerSecond: 0.01, MemoryGiBHour: 0.05, DefaultMemory: 280 << 20}
}

// Estimate is what keeping a key's process warm is worth at a moment,
// against letting it go now. Money is in dollars.
type Estimate struct {
	Idle      time.Duration // since its last turn ended
	CacheLeft time.Duration // until its prompt cache expires; 0 or less: expired
	// RestoreCost is what a return inside the cache's life adds when the
	// process was let go: C × (write − read), the context written again
	// instead of read; 0 when a restore keeps the cache.
	RestoreCost float64
	// PInCache is the chance of a return before the cache expires;
	// TokenSaving = PInCache × RestoreCost.
	PInCache, TokenSaving float64
	// StartCost is what a return after it was let go waits, in dollars:
	// RestoreSeconds × WaitPerSecond.
	StartCost float64
	// HoldRate is what its memory costs an hour.
	HoldRate float64
	// Horizon is the time to keep it for that pays best; PInHorizon the
	// chance of a return within it. Value is the expected saving of
	// keeping it that long (cache writes within the cache's life, the
	// start-up within the horizon) less its memory for as long as it is
	// held: 0 when nothing pays, and then letting it go now costs nothing.
	Horizon    time.Duration
	PInHorizon float64
	Value      float64
	// Loss is what letting it go now costs, expected: TokenSaving plus
	// StartCost × PInHorizon (a return after it would have been let go
	// anyway waits for a restore either way). Until is how long its slot
	// stays free if it goes: the expected time to its return, at most
	// SlotHorizon. Rate = Loss / Until is the loss per hour of slot freed.
	Loss  float64
	Until time.Duration
	Rate  float64
}

// horizons are the candidate times to keep a process for, besides the
// cache's expiry and each gap seen.
var horizons = []time.Duration{
	time.Minute, 2 * time.Minute, 3 * time.Minute, 5 * time.Minute, 8 * time.Minute, 10 * time.Minute,
	15 * time.Minute, 20 * time.Minute, 30 * time.Minute, 45 * time.Minute, time.Hour, 90 * time.Minute,
	2 * time.Hour, 3 * time.Hour, 4 * time.Hour, 6 * time.Hour, 8 * time.Hour, 12 * time.Hour, 24 * time.Hour,
}

// Estimate computes k's estimate at now.
func (v Values) Estimate(now time.Time, k Key, prior Prior) Estimate {
	a := k.Agent
	e := Estimate{Idle: max(now.Sub(k.LastUsed), 0), CacheLeft: k.CacheExpires().Sub(now)}
	if !a.RestoreKeepsCache {
		tp := a.Prices.tokenPrices()
		e.RestoreCost = float64(k.ContextTokens) * (tp.Write(a.CacheTTL) - tp.CacheRead)
	}
	e.StartCost = a.RestoreSeconds * v.WaitPerSecond
	mem := k.MemoryBytes
	if mem <= 0 {
		mem = v.DefaultMemory
	}
	e.HoldRate = float64(mem) / (1 << 30) * v.MemoryGiBHour
	r := ReturnsAfter(k.Gaps, prior.orDefault(), e.Idle)
	e.PInCache = r.Within(e.CacheLeft)
	e.TokenSaving = e.PInCache * e.RestoreCost
	value := func(h time.Duration) float64 {
		return e.StartCost*r.Within(h) + e.RestoreCost*r.Within(min(h, e.CacheLeft)) - e.HoldRate*r.Held(h).Hours()
	}
	try := func(h time.Duration) {
		if h <= 0 {
			return
		}
		if x := value(h); x > e.Value {
			e.Horizon, e.Value = h, x
		}
	}
	try(e.CacheLeft)
	for _, h := range horizons {
		try(h)
	}
	for _, g := range r.left {
		try(g)
	}
	e.PInHorizon = r.Within(e.Horizon)
	e.Loss = e.TokenSaving + e.StartCost*e.PInHorizon
	e.Until = r.Held(SlotHorizon)
	if e.Until > 0 {
		e.Rate = e.Loss / e.Until.Hours()
	}
	return e
}

// SlotHorizon is how far ahead a freed slot counts in Estimate.Until: the
// source's idle timer, 30 minutes. Past it the slot's use is anyone's
// guess (other keys come and go), and counting a key's whole expected
// absence would favour evicting keys that leave for the night over keys
// whose live cache is about to be read.
const SlotHorizon = 30 * time.Minute
