// What agents report a turn cost: deltas of running totals per process.

package resident

import (
	"sort"

	"github.com/residentd/residentd/apitype"
	"github.com/residentd/residentd/internal/acp"
	"github.com/residentd/residentd/internal/config"
	"github.com/residentd/residentd/internal/policy"
)

// turnUsage turns what the agent reported for one turn into that turn's
// usage: the tokens of its prompt response (deltas of running totals with
// usage_totals, which start at 0 in a new process) or the sum of the model
// calls it reported one by one, and its cost (package acp sums the
// increases of the session's running cost over the turn), priced by the
// binding's table when the agent gave tokens but no cost. Unknown when the
// agent reported nothing.
func (s *Process) turnUsage(b config.Binding, res acp.Result) apitype.Usage {
	s.mu.Lock()
	defer s.mu.Unlock()
	var u apitype.Usage
	if r := res.Usage; r != nil {
		cur := *r
		if b.UsageTotals && !res.PerCall {
			cur = acp.Usage{
				InputTokens: delta(r.InputTokens, s.seen.InputTokens), OutputTokens: delta(r.OutputTokens, s.seen.OutputTokens),
				CacheReadTokens: delta(r.CacheReadTokens, s.seen.CacheReadTokens), CacheWriteTokens: delta(r.CacheWriteTokens, s.seen.CacheWriteTokens),
				ThoughtTokens: delta(r.ThoughtTokens, s.seen.ThoughtTokens),
			}
			s.seen = *r
		}
		u.InputTokens, u.OutputTokens, u.CacheReadTokens, u.CacheWriteTokens = cur.InputTokens, cur.OutputTokens, cur.CacheReadTokens, cur.CacheWriteTokens
		u.ThoughtTokens = cur.ThoughtTokens
	}
	switch {
	case res.Cost != nil:
		// package acp summed the turn's increases of the running total.
		c := apitype.AmountOf(res.Cost.Amount)
		u.Cost, u.Currency, u.CostSource = &c, res.Cost.Currency, "agent"
	case res.Usage != nil && b.Prices != nil:
		c := b.Prices.CostTTL(u.InputTokens, u.OutputTokens, u.CacheReadTokens, u.CacheWriteTokens, s.res().ttl)
		u.Cost, u.Currency, u.CostSource = &c, b.Prices.Currency, "prices"
	}
	if res.Usage == nil && res.Cost == nil {
		return apitype.Usage{Unknown: true}
	}
	s.reported = true
	s.used.InputTokens += u.InputTokens
	s.used.OutputTokens += u.OutputTokens
	s.used.CacheReadTokens += u.CacheReadTokens
	s.used.CacheWriteTokens += u.CacheWriteTokens
	s.used.ThoughtTokens += u.ThoughtTokens
	if u.Cost != nil {
		total := *u.Cost
		if s.used.Cost != nil {
			total += *s.used.Cost
		}
		s.used.Cost, s.used.Currency, s.used.CostSource = &total, u.Currency, u.CostSource
	}
	return u
}

// usedSoFar is the sum of the process's turns, unknown before any reported.
func (s *Process) usedSoFar() *apitype.Usage {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.reported {
		return &apitype.Usage{Unknown: true}
	}
	u := s.used
	if u.Cost != nil {
		c := *u.Cost
		u.Cost = &c
	}
	return &u
}

// delta is now - before, or now when the count went back (a new baseline).
func delta(now, before int64) int64 {
	if now < before {
		return now
	}
	return now - before
}

// noteCost keeps whether binding b's last turn (one that succeeded, or
// gave a cost), on process p, gave a cost a budget can count (usage u,
// its tokens from source), and why not.
func (kp *Keeper) noteCost(b config.Binding, p *Process, u apitype.Usage, source string) {
	var blind apitype.BudgetBlind
	if u.Cost == nil {
		blind = apitype.BudgetBlind{Binding: b.ID, Agent: policy.Agent(p.a.Info()).String(), UsageSource: source,
			Reason: "the agent reported neither tokens nor a cost"}
		if !u.Unknown {
			blind.Reason = "the agent reports tokens but no cost, and the binding has no prices"
		}
	}
	kp.mu.Lock()
	kp.of(b.ID).blind = blind
	kp.mu.Unlock()
}

// CostBlind lists the bindings whose last turn gave no cost a budget
// could count, by binding.
func (kp *Keeper) CostBlind() []apitype.BudgetBlind {
	kp.mu.Lock()
	defer kp.mu.Unlock()
	var out []apitype.BudgetBlind
	for id, h := range kp.health {
		if h.blind.Binding == "" {
			continue
		}
		if _, ok := kp.conf().Binding(id); ok {
			out = append(out, h.blind)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Binding < out[j].Binding })
	return out
}
