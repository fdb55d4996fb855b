package residency

import (
	"fmt"
	"time"
)

// TTLCost is the expected provider cost of one return of the keys with
// cache TTL ttl: a return inside it reads the context (C × read), one
// after it writes it again (C × write at ttl's rate); the turn's own new
// tokens are written at that rate either way. It assumes the session's
// cache is there to read (its process is warm, or a restore keeps the
// cache); each key counts by its gaps seen (at least one).
func TTLCost(keys []Key, ttl time.Duration, turnTokens int64, prior Prior) float64 {
	prior = prior.orDefault()
	cost, n := 0.0, 0.0
	for _, k := range keys {
		p := k.Agent.Prices.tokenPrices()
		in := ReturnsAfter(k.Gaps, prior, 0).Within(ttl)
		c := float64(k.ContextTokens)
		w := float64(max(len(k.Gaps), 1))
		cost += w * (in*c*p.CacheRead + (1-in)*c*p.Write(ttl) + float64(turnTokens)*p.Write(ttl))
		n += w
	}
	if n == 0 {
		return 0
	}
	return cost / n
}

// ChooseTTL picks a binding's cache TTL, 5 minutes or 1 hour, from its
// keys' return gaps and contexts: the one of lower TTLCost (5 minutes on
// a tie, and with no keys yet: the provider's default). It is for an agent
// that lets the daemon choose (claude-agent-acp: ENABLE_PROMPT_CACHING_1H
// in its environment at spawn); turnTokens is what a turn adds to the
// context.
func ChooseTTL(keys []Key, turnTokens int64, prior Prior) (time.Duration, string) {
	gaps := 0
	for _, k := range keys {
		gaps += len(k.Gaps)
	}
	why := fmt.Sprintf("%d keys, %d gaps seen", len(keys), gaps)
	if len(keys) == 0 {
		return TTL5m, "5m, no keys yet: the provider's default"
	}
	c5, c1 := TTLCost(keys, TTL5m, turnTokens, prior), TTLCost(keys, TTL1h, turnTokens, prior)
	why += fmt.Sprintf(": a return costs $%.4f expected with 5m, $%.4f with 1h", c5, c1)
	if c1 < c5 {
		return TTL1h, "1h, " + why
	}
	return TTL5m, "5m, " + why
}

// KeepAlive says whether a keep-alive pays for k at now, a moment before
// its cache expires: a request that reads the cached context (C × read)
// makes the cache live TTL from now, which saves a full write less a read
// (C × (write − read)) if the key comes back after the old expiry and
// within the new one. It
// pays when the chance of that return is above read / (write − read)
// (8.7 % with Anthropic's 5-minute prices, 5.3 % with the hour's). It
// assumes the cache is there to read and a restore loses it, or the
// process stays warm; residentd sends no such request (the sim reports
// what it would save, apart).
func KeepAlive(now time.Time, k Key, prior Prior) (bool, string) {
	p, ttl := k.Agent.Prices.tokenPrices(), k.Agent.CacheTTL
	left := k.CacheExpires().Sub(now)
	if left <= 0 {
		return false, "cache expired " + round(-left) + " ago: nothing to keep alive"
	}
	r := ReturnsAfter(k.Gaps, prior.orDefault(), max(now.Sub(k.LastUsed), 0))
	// A return before the keep-alive's moment needs none; one within the
	// extension is what it saves.
	in := r.Within(ttl) - r.Within(left)
	c := float64(k.ContextTokens)
	save, cost := in*c*(p.Write(ttl)-p.CacheRead), c*p.CacheRead
	why := fmt.Sprintf("a %.0f%% chance of a return in the next %s saves $%.4f expected against a read of $%.4f", 100*in, round(ttl), save, cost)
	return save > cost, why
}
