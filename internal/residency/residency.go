// Package residency decides which agent processes stay warm: by a fixed
// idle timer and least-recent use (the source's 30 minutes), or by what
// staying warm saves — the provider's prompt cache for the key's session,
// its start-up, its memory. It is pure: the pool asks it, the sim drives
// it with a clock of its own, and the keeper gives it what it knows of
// each key.
package residency

import (
	"time"

	"github.com/residentd/residentd/internal/session"
)

// Prices are per million tokens.
type Prices struct {
	Input        float64 // uncached input
	Output       float64
	CacheRead    float64
	CacheWrite5m float64 // a cache write with the 5-minute TTL
	CacheWrite1h float64 // a cache write with the 1-hour TTL
}

// Agent is what the policy knows of the agent behind a key's binding.
type Agent struct {
	// CacheTTL is how long the provider keeps the session's prompt cache
	// after the last request that read or wrote it (5 minutes, or 1 hour).
	CacheTTL time.Duration
	// RestoreKeepsCache: a session restored in a new process re-sends the
	// prefix the cache holds (claude-agent-acp 0.101 resumed re-sends a
	// prefix identical in 99.9 % of its bytes), so a restore inside the
	// cache's life costs start-up, not a cache write.
	RestoreKeepsCache bool
	StartSeconds      float64 // a cold start, as measured for the binding
	RestoreSeconds    float64 // a restore, as measured
	Prices            Prices
}

// Key is what the policy knows of one key's live process at a moment.
type Key struct {
	Key   session.Key
	Agent Agent
	// LastUsed is when its last turn ended; LastRequest when the agent
	// last sent the provider a request (its own between-prompt turns
	// included): the cache lives CacheTTL from then.
	LastUsed, LastRequest time.Time
	// ContextTokens is the session's context size (usage reports, or
	// estimated where none come): what a cache write of it costs.
	ContextTokens int64
	// MemoryBytes is its process tree's memory.
	MemoryBytes int64
	// Gaps are the key's recent gaps between one burst's last turn and the
	// next burst's first, newest last: how soon it tends to come back.
	Gaps []time.Duration
	// Working: the process works with no turn in flight (background work,
	// an agent run): it is never a victim nor expired.
	Working bool
}

// CacheExpires is when k's prompt cache expires.
func (k Key) CacheExpires() time.Time { return k.LastRequest.Add(k.Agent.CacheTTL) }

// Choice is a decision with a reason a person can read.
type Choice struct {
	Index  int    // the chosen key (Victim), or -1 for none
	Reason string // why, in words, for the log, the metrics' reason label and the sessions listing
}

// Policy decides residency.
type Policy interface {
	// Name names the policy in settings, metrics and the sim.
	Name() string
	// Victim picks, of the idle keys (none working), the one whose
	// process goes when a new key needs a slot.
	Victim(now time.Time, idle []Key) Choice
	// Expire says whether an idle key's process goes now, and why it goes
	// or stays.
	Expire(now time.Time, k Key) (bool, string)
}

// Timer is the source's policy: an idle process goes after Idle, and a
// new key takes the least recently used one's slot.
type Timer struct{ Idle time.Duration }

var _ Policy = Timer{}

// Name is "timer".
func (Timer) Name() string { return "timer" }

// Victim is the least recently used idle key.
func (Timer) Victim(_ time.Time, idle []Key) Choice {
	c := Choice{Index: -1}
	for i, k := range idle {
		if k.Working {
			continue
		}
		if c.Index < 0 || k.LastUsed.Before(idle[c.Index].LastUsed) {
			c.Index = i
		}
	}
	if c.Index >= 0 {
		c.Reason = "least recently used"
	}
	return c
}

// Expire lets a key go once it has been idle for Idle.
func (t Timer) Expire(now time.Time, k Key) (bool, string) {
	if k.Working {
		return false, "working"
	}
	if idle := now.Sub(k.LastUsed); idle >= t.Idle {
		return true, "idle past " + t.Idle.String()
	}
	return false, "idle for less than " + t.Idle.String()
}
