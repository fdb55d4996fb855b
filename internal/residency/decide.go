package residency

import (
	"fmt"
	"time"
)

// The provider's TTLs the agents let a client choose between.
const (
	TTL5m = 5 * time.Minute
	TTL1h = time.Hour
)

// MinGaps is how many return gaps the rules below want before they judge
// a key or binding by them.
const MinGaps = 3

// OrRatios is p, or where p gives no price, Anthropic's ratios to an input
// price of 1: a 5-minute cache write 1.25, a 1-hour one 2, a cache read
// 0.1. A 1-hour write price missing beside a 5-minute one is 1.6 times it.
func (p Prices) OrRatios() Prices {
	if p.Input <= 0 && p.CacheWrite5m <= 0 && p.CacheWrite1h <= 0 && p.CacheRead <= 0 {
		return Prices{Input: 1, Output: 5, CacheRead: 0.1, CacheWrite5m: 1.25, CacheWrite1h: 2}
	}
	if p.CacheWrite1h <= 0 {
		p.CacheWrite1h = 1.6 * p.CacheWrite5m
	}
	return p
}

// Write is the price of a cache write with TTL ttl.
func (p Prices) Write(ttl time.Duration) float64 {
	if ttl >= TTL1h {
		return p.CacheWrite1h
	}
	return p.CacheWrite5m
}

// TTLByGaps is a simple rule for the TTL a binding's processes ask for
// (where the agent lets the daemon choose, claude-agent-acp by
// ENABLE_PROMPT_CACHING_1H at spawn): of 5 minutes and 1 hour, the one
// whose returns cost least per million tokens of context. A return within
// the TTL reads the cache (CacheRead); a later one writes it again at the
// TTL's price. With fewer than MinGaps gaps it says 5 minutes. The cost
// model's own choice can replace it.
func TTLByGaps(gaps []time.Duration, p Prices) (time.Duration, string) {
	if len(gaps) < MinGaps {
		return TTL5m, fmt.Sprintf("fewer than %d returns seen", MinGaps)
	}
	p = p.OrRatios()
	cost := func(ttl time.Duration) float64 {
		c := 0.0
		for _, g := range gaps {
			if g <= ttl {
				c += p.CacheRead
			} else {
				c += p.Write(ttl)
			}
		}
		return c / float64(len(gaps))
	}
	c5, c1 := cost(TTL5m), cost(TTL1h)
	if c1 < c5 {
		return TTL1h, fmt.Sprintf("returns cost %.3g with 1h, %.3g with 5m", c1, c5)
	}
	return TTL5m, fmt.Sprintf("returns cost %.3g with 5m, %.3g with 1h", c5, c1)
}

// Margin is how long before a cache expires the daemon acts on it (an
// idle compaction, a keep-alive): a tenth of its TTL, as claude-agent-acp
// 0.101 compacts 54 minutes into a 1-hour cache.
func Margin(ttl time.Duration) time.Duration { return ttl / 10 }

// Compactor is a policy that times the agent's idle compaction itself;
// the daemon asks CompactDue of one that is not.
type Compactor interface {
	// Compact says whether k's session is to be compacted now.
	Compact(now time.Time, k Key, minTokens int64) (bool, string)
}

// KeepAliver is a policy that decides cache keep-alives itself; the
// daemon asks KeepAliveDue of one that is not.
type KeepAliver interface {
	// KeepAlive says whether k's cache is to be kept alive now with a
	// request of its own.
	KeepAlive(now time.Time, k Key) (bool, string)
}

// dueSoon says why k's cache is not about to expire, "" when it is: it
// expires within Margin from now.
func dueSoon(now time.Time, k Key) string {
	switch {
	case k.Working:
		return ReasonWorking
	case k.Agent.CacheTTL <= 0 || k.LastRequest.IsZero():
		return "no cache"
	case !now.Before(k.CacheExpires()):
		return ReasonCacheExpired
	case now.Before(k.CacheExpires().Add(-Margin(k.Agent.CacheTTL))):
		return ReasonCacheAlive
	}
	return ""
}

// CompactDue is the rule for an idle compaction the daemon times: the
// session's context holds at least minTokens, its cache expires within
// Margin, and it is unlikely to be read before then — its TTL is 1 hour
// (claude-agent-acp 0.101's own rule) or most of the key's returns came
// after a TTL. A compaction then costs a cache read of the context and a
// short summary, and the next turn writes the summary instead of the whole
// context.
func CompactDue(now time.Time, k Key, minTokens int64) (bool, string) {
	if k.ContextTokens < minTokens {
		return false, "context below the compaction threshold"
	}
	if why := dueSoon(now, k); why != "" {
		return false, why
	}
	if k.Agent.CacheTTL < TTL1h {
		late := 0
		for _, g := range k.Gaps {
			late += btoi(g > k.Agent.CacheTTL)
		}
		if len(k.Gaps) < MinGaps || 2*late <= len(k.Gaps) {
			return false, "returns often within the cache's life"
		}
	}
	return true, "cache expires soon with a large context"
}

// KeepAliveDue is the rule for a cache keep-alive: k's cache expires
// within Margin, and of the key's returns that came later than that
// expiry, enough came within one more TTL that the cache reads they would
// make pay for the keep-alive's own read: share × (write − read) > read.
func KeepAliveDue(now time.Time, k Key) (bool, string) {
	if why := dueSoon(now, k); why != "" {
		return false, why
	}
	if len(k.Gaps) < MinGaps {
		return false, "too few returns to tell"
	}
	at := k.CacheExpires().Sub(k.LastUsed)
	later, within := 0, 0
	for _, g := range k.Gaps {
		if g > at {
			later++
			within += btoi(g <= at+k.Agent.CacheTTL)
		}
	}
	if later == 0 {
		return false, "never returned this late"
	}
	p := k.Agent.Prices.OrRatios()
	share := float64(within) / float64(later)
	if share*(p.Write(k.Agent.CacheTTL)-p.CacheRead) <= p.CacheRead {
		return false, "a keep-alive would not pay"
	}
	return true, "returns within the next cache life often enough to pay"
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}
