package config

import (
	"fmt"
	"strings"
	"time"

	"github.com/residentd/residentd/apitype"
	"github.com/residentd/residentd/internal/residency"
)

// DefaultResidency is the residency policy when the config names none: the
// source's idle timer, until a cache-aware one is measured to do better.
const DefaultResidency = "timer"

// A binding's idle_compaction: who times the agent's own compaction of an
// idle session's context (claude-agent-acp 0.101 compacts a session 54
// minutes after its last model request when its cache TTL is 1 hour and
// its context at least 200,000 tokens).
const (
	// CompactDaemon (the default): the agent's own timer is put out of
	// reach (CLAUDE_AGENT_ACP_IDLE_COMPACT_DELAY_MS at its longest) and the
	// daemon sends the compaction when its rule or policy says so.
	CompactDaemon = "daemon"
	// CompactAgent leaves the agent's own timer as it is.
	CompactAgent = "agent"
	// CompactOff: no idle compaction at all.
	CompactOff = "off"
)

// CacheTTLAuto is the cache_ttl that lets the daemon choose 5 minutes or 1
// hour from the binding's keys' return gaps, where the agent takes it at
// spawn (claude-agent-acp: ENABLE_PROMPT_CACHING_1H).
const CacheTTLAuto = "auto"

// truthy reads an environment flag as Claude Code does.
func truthy(v string) bool {
	switch strings.ToLower(strings.TrimSpace(v)) {
	case "1", "true", "yes", "on":
		return true
	}
	return false
}

// TTL is how long the provider keeps the binding's prompt cache after
// a request, and whether the daemon chooses it (auto). Unset, it is what
// the binding's env asks of claude-agent-acp's CLI (FORCE_PROMPT_CACHING_5M,
// CLAUDE_CODE_PROMPT_CACHE_TTL, ENABLE_PROMPT_CACHING_1H, in the CLI's
// order), else 5 minutes.
func (b Binding) TTL() (ttl time.Duration, auto bool) {
	switch b.CacheTTL {
	case CacheTTLAuto:
		return residency.TTL5m, true
	case "":
	default:
		if d, err := time.ParseDuration(b.CacheTTL); err == nil {
			return d, false
		}
	}
	switch {
	case truthy(b.Env["FORCE_PROMPT_CACHING_5M"]):
		return residency.TTL5m, false
	case b.Env["CLAUDE_CODE_PROMPT_CACHE_TTL"] == "1h":
		return residency.TTL1h, false
	case b.Env["CLAUDE_CODE_PROMPT_CACHE_TTL"] == "5m":
		return residency.TTL5m, false
	case truthy(b.Env["ENABLE_PROMPT_CACHING_1H"]):
		return residency.TTL1h, false
	}
	return residency.TTL5m, false
}

// CostTTL is Cost for a process whose cache TTL is ttl: its cache writes
// at the 1-hour price (CacheWrite1h, else 1.6 times CacheWrite) when ttl
// is an hour or more.
func (p Prices) CostTTL(in, out, cacheRead, cacheWrite int64, ttl time.Duration) apitype.Amount {
	if ttl >= residency.TTL1h {
		if p.CacheWrite1h > 0 {
			p.CacheWrite = p.CacheWrite1h
		} else {
			p.CacheWrite *= 1.6
		}
	}
	return p.Cost(in, out, cacheRead, cacheWrite)
}

// Compaction is who times the binding's idle compaction.
func (b Binding) Compaction() string {
	if b.IdleCompaction == "" {
		return CompactDaemon
	}
	return b.IdleCompaction
}

func (b Binding) checkResidency() error {
	if t := b.CacheTTL; t != "" && t != CacheTTLAuto {
		if d, err := time.ParseDuration(t); err != nil || d <= 0 {
			return fmt.Errorf("%w: binding %q: cache_ttl %q: use \"5m\", \"1h\", another duration above 0, or \"auto\"", ErrInvalid, b.ID, t)
		}
	}
	switch b.IdleCompaction {
	case "", CompactDaemon, CompactAgent, CompactOff:
	default:
		return fmt.Errorf("%w: binding %q: idle_compaction %q: use daemon, agent or off", ErrInvalid, b.ID, b.IdleCompaction)
	}
	return nil
}

func (c *Config) checkResidency() error {
	if _, err := residency.ByName(c.Residency, residency.Settings{}); c.Residency != "" && err != nil {
		return fmt.Errorf("%w: residency: %v", ErrInvalid, err)
	}
	if p := c.MemoryPressure; p < 0 || p >= 100 {
		return fmt.Errorf("%w: memory_pressure %g must be a percentage from 0 (not watched) to below 100", ErrInvalid, p)
	}
	if m := c.MaxMemory; m > 0 && m < 1<<20 {
		return fmt.Errorf("%w: max_memory %d bytes is too small for any agent; use at least \"1M\"", ErrInvalid, m)
	}
	return nil
}
