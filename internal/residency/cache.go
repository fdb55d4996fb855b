package residency

import "time"

// CacheFirst ("cache") is a minimal cache-aware policy: a process whose
// prompt cache has expired goes before one whose cache lives, and one
// whose cache lives is kept past the idle timer until it expires. It
// knows no prices: what staying warm saves is the rest of the model's.
//
//   - Victim: of the idle keys, the least recently used of those whose
//     cache has expired (reason "cache expired"); when every cache lives,
//     the one that expires soonest ("cache expires soonest").
//   - Expire: a key goes once its cache has expired and it has been idle
//     for Idle ("cache expired and idle past Idle"); until then it stays,
//     because its cache lives ("cache alive") or it was used lately.
//
// An agent with no cache (CacheTTL 0) has always expired: the timer's
// order and time.
type CacheFirst struct{ Idle time.Duration }

var _ Policy = CacheFirst{}

// Name is "cache".
func (CacheFirst) Name() string { return "cache" }

// Reasons CacheFirst gives, fixed phrases (the metrics' reason label).
const (
	ReasonCacheExpired = "cache expired"
	ReasonCacheSoonest = "cache expires soonest"
	ReasonCacheAlive   = "cache alive"
	ReasonWorking      = "working"
)

// Victim is an expired cache's key, least recently used first, else the
// key whose cache expires soonest.
func (CacheFirst) Victim(now time.Time, idle []Key) Choice {
	expired, alive := -1, -1
	for i, k := range idle {
		switch {
		case k.Working:
		case !now.Before(k.CacheExpires()):
			if expired < 0 || k.LastUsed.Before(idle[expired].LastUsed) {
				expired = i
			}
		case alive < 0 || k.CacheExpires().Before(idle[alive].CacheExpires()):
			alive = i
		}
	}
	switch {
	case expired >= 0:
		return Choice{Index: expired, Reason: ReasonCacheExpired}
	case alive >= 0:
		return Choice{Index: alive, Reason: ReasonCacheSoonest}
	}
	return Choice{Index: -1}
}

// Expire lets a key go once its cache has expired and it has been idle for
// Idle.
func (c CacheFirst) Expire(now time.Time, k Key) (bool, string) {
	switch {
	case k.Working:
		return false, ReasonWorking
	case now.Before(k.CacheExpires()):
		return false, ReasonCacheAlive
	case now.Sub(k.LastUsed) < c.Idle:
		return false, "idle for less than " + c.Idle.String()
	}
	return true, ReasonCacheExpired + " and idle past " + c.Idle.String()
}
