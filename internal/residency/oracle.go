package residency

import (
	"time"

	"github.com/residentd/residentd/internal/session"
)

// Oracle knows the future: when each key is mentioned next. Only a
// simulation can give it that, so it is the sim's reference, the bound no
// policy that cannot see ahead can beat: it evicts the key whose next
// mention is farthest away, after every key whose live cache would not
// serve its next mention anyway, and never lets a live cache go that
// would.
type Oracle struct {
	// Next returns k's next mention after after, false when there is none.
	Next func(k session.Key, after time.Time) (time.Time, bool)
	// Hold keeps a key whose cache will not serve its next mention while
	// that mention is at most Hold away (its start-up is saved); default
	// 30 minutes, the source's timer.
	Hold time.Duration
}

var _ Policy = Oracle{}

// Name is "oracle".
func (Oracle) Name() string { return "oracle" }

func (o Oracle) hold() time.Duration {
	if o.Hold <= 0 {
		return 30 * time.Minute
	}
	return o.Hold
}

// next is k's next mention after now, and whether its cache serves it:
// it comes before the cache expires and a restore would lose the cache.
func (o Oracle) next(now time.Time, k Key) (at time.Time, ok, cacheServes bool) {
	at, ok = o.Next(k.Key, now)
	cacheServes = ok && !k.Agent.RestoreKeepsCache && at.Before(k.CacheExpires())
	return at, ok, cacheServes
}

// Victim: the keys whose cache will not serve their next mention before
// the others, the one mentioned farthest ahead (or never) first.
func (o Oracle) Victim(now time.Time, idle []Key) Choice {
	c := Choice{Index: -1}
	var bestAt time.Time
	bestOK, bestServes := false, false
	for i, k := range idle {
		if k.Working {
			continue
		}
		at, ok, serves := o.next(now, k)
		better := c.Index < 0 || bestServes && !serves ||
			serves == bestServes && (bestOK && (!ok || at.After(bestAt)))
		if better {
			c.Index, bestAt, bestOK, bestServes = i, at, ok, serves
		}
	}
	switch {
	case c.Index < 0:
	case !bestOK:
		c.Reason = "never mentioned again"
	case bestServes:
		c.Reason = "every idle cache serves its next mention; this one's comes farthest ahead, in " + round(bestAt.Sub(now))
	default:
		c.Reason = "its cache will not serve its next mention, the farthest ahead, in " + round(bestAt.Sub(now))
	}
	return c
}

// Expire lets k go unless its cache serves its next mention or that
// mention is at most Hold away.
func (o Oracle) Expire(now time.Time, k Key) (bool, string) {
	if k.Working {
		return false, "working"
	}
	at, ok, serves := o.next(now, k)
	switch {
	case !ok:
		return true, "never mentioned again"
	case serves:
		return false, "its cache serves its next mention, in " + round(at.Sub(now))
	case at.Sub(now) <= o.hold():
		return false, "its next mention comes in " + round(at.Sub(now)) + ", within " + round(o.hold())
	}
	return true, "its next mention, in " + round(at.Sub(now)) + ", is past its cache and past " + round(o.hold())
}
