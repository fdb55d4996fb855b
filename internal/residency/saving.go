package residency

import (
	"fmt"
	"strings"
	"time"
)

// Saving ("saving") decides by the cost model (Values.Estimate): a
// process stays warm while that saves more than it costs.
//
//   - What staying warm saves: a return inside the prompt cache's life
//     reads the context, where after a restore that loses the cache it
//     writes it again (C × (write − read)); and a return at all would wait
//     for a restore (RestoreSeconds, valued by Values.WaitPerSecond). Each
//     is weighed by the chance of that return, from the key's return gaps
//     longer than its idle time so far and a Prior.
//   - What it costs: the process's memory for as long as it is held.
//   - Victim: for an agent not known to keep its cache across a restore,
//     a key whose cache has expired goes before one whose cache lives;
//     within each class the key whose going loses least per hour of slot
//     freed (Estimate.Rate), ties to the least recently used.
//   - Expire: a key goes once no horizon makes keeping it pay (Value 0),
//     or once its cache has expired and it has been idle for Idle.
//
// Every reason starts with one of the fixed phrases below, then ": " and
// the figures (ReasonLabel cuts them off for a metrics label).
type Saving struct {
	Values Values // zero: DefaultValues
	// Prior, nil for DefaultPrior, is a pointer so that a Saving stays
	// comparable like the other policies.
	Prior *Prior
	// Idle, when set, is the longest a process whose cache has expired
	// stays idle, whatever its start-up is worth (the daemon's
	// idle_timeout: a desktop's memory is not the model's to spend
	// overnight).
	Idle time.Duration
}

var _ Policy = Saving{}
var _ KeepAliver = Saving{}

func init() {
	Register("saving", func(s Settings) Policy { return Saving{Idle: s.Idle} })
}

// The fixed phrases Saving's reasons start with.
const (
	ReasonSavesLeast        = "staying warm saves least"
	ReasonExpiredSavesLeast = "cache expired; staying warm saves least"
	ReasonPays              = "staying warm pays"
	ReasonNoLongerPays      = "staying warm no longer pays"
	ReasonExpiredIdle       = "cache expired and idle too long"
)

// ReasonLabel is the fixed part of a policy's reason, before the first
// ": " — what a metrics label may carry without a series per figure.
func ReasonLabel(why string) string {
	if i := strings.Index(why, ": "); i >= 0 {
		return why[:i]
	}
	return why
}

// Name is "saving".
func (Saving) Name() string { return "saving" }

func (s Saving) values() Values {
	if s.Values == (Values{}) {
		return DefaultValues()
	}
	v := s.Values
	if v.DefaultMemory <= 0 {
		v.DefaultMemory = DefaultValues().DefaultMemory
	}
	return v
}

// Estimate is the policy's estimate for k at now.
func (s Saving) Estimate(now time.Time, k Key) Estimate {
	return s.values().Estimate(now, k, s.prior())
}

func (s Saving) prior() Prior {
	if s.Prior == nil {
		return DefaultPrior()
	}
	return s.Prior.orDefault()
}

// Victim is the idle key whose staying warm saves least; see Saving.
func (s Saving) Victim(now time.Time, idle []Key) Choice {
	c := Choice{Index: -1}
	var best Estimate
	bestClass := 0
	for i, k := range idle {
		if k.Working {
			continue
		}
		e := s.Estimate(now, k)
		class := 0
		if !k.Agent.RestoreKeepsCache && e.CacheLeft > 0 {
			class = 1
		}
		better := c.Index < 0 || class < bestClass ||
			class == bestClass && (score(e) < score(best) || score(e) == score(best) && k.LastUsed.Before(idle[c.Index].LastUsed))
		if better {
			c.Index, best, bestClass = i, e, class
		}
	}
	if c.Index < 0 {
		return c
	}
	c.Reason = ReasonSavesLeast
	if bestClass == 0 && !idle[c.Index].Agent.RestoreKeepsCache && idle[c.Index].Agent.CacheTTL > 0 {
		c.Reason = ReasonExpiredSavesLeast
	}
	c.Reason += fmt.Sprintf(": losing $%.4f an hour of slot freed; ", best.Rate) + best.describe()
	return c
}

// Expire lets k go once keeping it warm no longer pays (its Value is 0),
// or its cache has expired and it has been idle for Idle; it says what
// keeping it saves when it stays.
func (s Saving) Expire(now time.Time, k Key) (bool, string) {
	if k.Working {
		return false, ReasonWorking
	}
	e := s.Estimate(now, k)
	if s.Idle > 0 && e.CacheLeft <= 0 && e.Idle >= s.Idle {
		return true, ReasonExpiredIdle + ": past " + round(s.Idle) + "; " + e.describe()
	}
	if e.Value > 0 {
		return false, ReasonPays + ": " + e.describe()
	}
	return true, ReasonNoLongerPays + ": " + e.describe()
}

// KeepAlive is the model's keep-alive rule (the package's KeepAlive) with
// the policy's prior.
func (s Saving) KeepAlive(now time.Time, k Key) (bool, string) {
	if k.Working {
		return false, ReasonWorking
	}
	return KeepAlive(now, k, s.prior())
}

// describe says in words what keeping the process is worth.
func (e Estimate) describe() string {
	cache := "cache expired " + round(-e.CacheLeft) + " ago"
	if e.CacheLeft > 0 {
		cache = fmt.Sprintf("cache alive %s more, %.0f%% chance of a return before then", round(e.CacheLeft), 100*e.PInCache)
		if e.RestoreCost > 0 {
			cache += fmt.Sprintf(" (a restore would write it again: $%.3f)", e.RestoreCost)
		}
	}
	if e.Value <= 0 {
		return fmt.Sprintf("idle %s, %s; no horizon where a return's start-up ($%.3f) and cache outweigh the memory ($%.4f an hour)",
			round(e.Idle), cache, e.StartCost, e.HoldRate)
	}
	return fmt.Sprintf("idle %s, %s; keeping it %s (a %.0f%% chance of a return) is worth $%.4f net of memory",
		round(e.Idle), cache, round(e.Horizon), 100*e.PInHorizon, e.Value)
}

// round prints d to the second below a minute, to the minute above.
func round(d time.Duration) string {
	if d < time.Minute {
		return d.Round(time.Second).String()
	}
	s := d.Round(time.Minute).String()
	if len(s) > 2 && s[len(s)-2:] == "0s" {
		s = s[:len(s)-2]
	}
	return s
}

// score orders victims: the loss per hour of slot freed, so that a key
// likely back within minutes (whose slot is needed again soon) is not
// taken for one gone for the afternoon at the same expected loss.
func score(e Estimate) float64 { return e.Rate }
