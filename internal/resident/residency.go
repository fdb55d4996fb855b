// What the keeper knows for the residency policy: each key's process as
// the pool's Describe asks it (ResidencyKey), the bindings' measured start
// and restore times, the keys' return gaps, and what a spawn asks of the
// agent's prompt cache and idle compaction. The daemon's own prompts on an
// idle session (an idle compaction, a cache keep-alive) run here too.

package resident

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/residentd/residentd/apitype"
	"github.com/residentd/residentd/internal/acp"
	"github.com/residentd/residentd/internal/child"
	"github.com/residentd/residentd/internal/config"
	"github.com/residentd/residentd/internal/lease"
	"github.com/residentd/residentd/internal/policy"
	"github.com/residentd/residentd/internal/pool"
	"github.com/residentd/residentd/internal/residency"
	"github.com/residentd/residentd/internal/run"
	"github.com/residentd/residentd/internal/session"
)

// burstGap: turns of a key closer than this are one burst; a longer gap
// between one turn's end and the next one's start is a return.
const burstGap = time.Minute

// maxGaps bounds the return gaps kept per key.
const maxGaps = 32

// ttlEnvMax is claude-agent-acp 0.101's longest idle-compaction delay
// (CLAUDE_AGENT_ACP_IDLE_COMPACT_DELAY_MS, setTimeout's limit, about 24.8
// days): its own timer then never fires while the daemon keeps the
// process, and the daemon times the compaction.
const ttlEnvMax = "2147483647"

// DefaultCompactTokens is the context an idle compaction wants at least:
// claude-agent-acp 0.101's default (CLAUDE_CODE_IDLE_COMPACT_MIN_TOKENS,
// at least 100,000).
const DefaultCompactTokens = 200_000

// resState is the keeper's residency knowledge; mu is innermost.
type resState struct {
	tight atomic.Bool // the agents' memory is over the daemon's limit: no spare starts

	mu               sync.Mutex
	starts, restores map[string]float64 // binding -> seconds, a moving mean of what was measured
	keys             map[session.Key]*returns
}

// returns is when a key's last turn ended and its gaps before returning.
type returns struct {
	lastEnd time.Time
	gaps    []time.Duration
}

// procRes is what one process knows for its residency.
type procRes struct {
	ttl        time.Duration // the cache TTL it was started with
	compaction string        // its binding's idle_compaction when it started

	mu          sync.Mutex
	lastRequest time.Time // the end of its last prompt (a turn's or the daemon's)
	bytes       int64     // the bytes its prompts and replies carried: the context estimate without usage reports
}

// agentFacts is what residentd knows of an agent's prompt cache and
// compaction.
type agentFacts struct {
	restoreKeepsCache bool   // a restored session re-sends the prefix the cache holds
	compact           string // the prompt that compacts its session, "" for none known
	ttlByEnv          bool   // it takes its cache TTL and idle-compaction delay from env at spawn
}

// factsOf is the table of agents residentd knows: claude-agent-acp (its
// slash command /compact; 0.101 resumes with a prefix 99.9 % the same, so
// its cache survives a restore) and the built-in agent (its /compact).
func factsOf(a policy.Agent) agentFacts {
	switch policy.KindOf(a) {
	case policy.KindClaude:
		return agentFacts{restoreKeepsCache: a.Name == policy.ClaudeName && inLine(a.Version, "0.101"), compact: "/compact", ttlByEnv: true}
	case policy.KindBuiltin:
		return agentFacts{compact: "/compact"}
	}
	return agentFacts{}
}

// inLine: version v is of release line ("0.101.3" of "0.101").
func inLine(v, line string) bool {
	v = strings.TrimPrefix(v, "v")
	return v == line || strings.HasPrefix(v, line+".") || strings.HasPrefix(v, line+"-")
}

// claudeLike says whether binding b runs claude-agent-acp, before its
// agent has said so: its last-seen agent, else its command line.
func (kp *Keeper) claudeLike(b config.Binding) bool {
	kp.mu.Lock()
	seen, ok := kp.seen[b.ID]
	kp.mu.Unlock()
	if ok && seen.Name != "" {
		return policy.KindOf(policy.Agent{Name: seen.Name, Version: seen.Version}) == policy.KindClaude
	}
	line := b.Command + " " + strings.Join(b.Args, " ")
	return strings.Contains(line, "claude-agent-acp") || strings.Contains(line, "claude-code-acp")
}

// residencyEnv adds to env (the binding's, KEY=VALUE) what a spawn of
// claude-agent-acp asks of its cache and idle compaction: the TTL the
// binding's cache_ttl names or the daemon chose (auto), and, unless the
// binding leaves compaction to the agent or sets the delay itself, its own
// idle-compaction timer out of reach.
func (kp *Keeper) residencyEnv(b config.Binding, env []string) []string {
	if !kp.claudeLike(b) {
		return env
	}
	switch ttl, auto := b.TTL(); {
	case auto:
		ttl, why := kp.chooseTTL(b)
		env = append(env, ttlEnv(ttl)...)
		kp.m.ResidencyDecided(b.ID, "rule", "ttl_"+shortDur(ttl), why)
	case b.CacheTTL != "":
		env = append(env, ttlEnv(ttl)...)
	}
	if _, set := b.Env["CLAUDE_AGENT_ACP_IDLE_COMPACT_DELAY_MS"]; !set && b.Compaction() != config.CompactAgent {
		env = append(env, "CLAUDE_AGENT_ACP_IDLE_COMPACT_DELAY_MS="+ttlEnvMax)
	}
	return env
}

// ttlEnv is what asks Claude Code for a cache TTL of ttl: the 1-hour
// TTL (ENABLE_PROMPT_CACHING_1H) for an hour or more, else the 5-minute
// one (FORCE_PROMPT_CACHING_5M, which it reads first, so it also wins over
// a 1-hour TTL its account would choose). Each names both variables, so
// what the daemon's own environment says of them is replaced: the last
// value of a name is the one a child gets.
func ttlEnv(ttl time.Duration) []string {
	if ttl >= residency.TTL1h {
		return []string{"FORCE_PROMPT_CACHING_5M=", "ENABLE_PROMPT_CACHING_1H=1"}
	}
	return []string{"ENABLE_PROMPT_CACHING_1H=", "FORCE_PROMPT_CACHING_5M=1"}
}

// shortDur is 5m or 1h as the settings write them.
func shortDur(d time.Duration) string {
	s := d.String()
	s = strings.TrimSuffix(s, "0s")
	return strings.TrimSuffix(s, "0m")
}

// chooseTTL is the TTL a spawn of binding b asks for, from its keys'
// return gaps, and a reason with no numbers (the metrics' label).
func (kp *Keeper) chooseTTL(b config.Binding) (time.Duration, string) {
	var gaps []time.Duration
	kp.res.mu.Lock()
	for k, r := range kp.res.keys {
		if k.Binding == b.ID {
			gaps = append(gaps, r.gaps...)
		}
	}
	kp.res.mu.Unlock()
	ttl, detail := residency.TTLByGaps(gaps, pricesOf(b))
	kp.log.Info("cache TTL chosen for the binding's next process", zap.String("binding", b.ID), zap.Duration("ttl", ttl), zap.String("why", detail), zap.Int("gaps", len(gaps)))
	if len(gaps) < residency.MinGaps {
		return ttl, "too few returns"
	}
	return ttl, "return gaps"
}

// procResOf is what a process started for binding b with env knows of
// its cache and idle compaction.
func procResOf(b config.Binding, env []string) *procRes {
	withEnv := b
	withEnv.Env = maps.Clone(b.Env)
	if withEnv.Env == nil {
		withEnv.Env = map[string]string{}
	}
	for _, kv := range env {
		if k, v, ok := strings.Cut(kv, "="); ok {
			withEnv.Env[k] = v
		}
	}
	if withEnv.CacheTTL == config.CacheTTLAuto {
		withEnv.CacheTTL = ""
	}
	ttl, _ := withEnv.TTL()
	return &procRes{ttl: ttl, compaction: b.Compaction()}
}

// pricesOf is binding b's prices as the policy reads them.
func pricesOf(b config.Binding) residency.Prices {
	if b.Prices == nil {
		return residency.Prices{}
	}
	p := b.Prices
	return residency.Prices{Input: p.Input, Output: p.Output, CacheRead: p.CacheRead, CacheWrite5m: p.CacheWrite, CacheWrite1h: p.CacheWrite1h}
}

// res is the process's residency record.
func (s *Process) res() *procRes {
	if s.between.res == nil {
		return &procRes{}
	}
	return s.between.res
}

// prompting notes a prompt of text to s about to be sent; the func it
// returns notes its result. A turn's prompt (turn true) starts a return
// when the key's last turn ended a burst ago.
func (s *Process) prompting(text string, turn bool) func(acp.Result) {
	kp := s.between.k
	if turn {
		kp.res.turnStarts(s.key, kp.now())
	}
	return func(res acp.Result) {
		r := s.res()
		now := kp.now()
		r.mu.Lock()
		r.lastRequest = now
		r.bytes += int64(len(text) + len(res.Text))
		r.mu.Unlock()
		if turn {
			kp.res.turnEnds(s.key, now)
		}
	}
}

func (st *resState) turnStarts(k session.Key, now time.Time) {
	st.mu.Lock()
	defer st.mu.Unlock()
	r := st.keys[k]
	if r == nil || r.lastEnd.IsZero() {
		return
	}
	if gap := now.Sub(r.lastEnd); gap >= burstGap {
		r.gaps = append(r.gaps, gap)
		if len(r.gaps) > maxGaps {
			r.gaps = slices.Delete(r.gaps, 0, len(r.gaps)-maxGaps)
		}
	}
}

func (st *resState) turnEnds(k session.Key, now time.Time) {
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.keys == nil {
		st.keys = map[session.Key]*returns{}
	}
	r := st.keys[k]
	if r == nil {
		r = &returns{}
		st.keys[k] = r
	}
	r.lastEnd = now
}

// spawned records how long a spawn of binding took that ended with
// shape: a cold one is the binding's start time (a spare taken makes it
// short), a restored one its restore time.
func (st *resState) spawned(binding string, shape lease.Shape, d time.Duration) {
	st.mu.Lock()
	defer st.mu.Unlock()
	m := &st.starts
	if shape == lease.Restored {
		m = &st.restores
	}
	if *m == nil {
		*m = map[string]float64{}
	}
	s := d.Seconds()
	if old, ok := (*m)[binding]; ok {
		s = 0.7*old + 0.3*s
	}
	(*m)[binding] = s
}

// contextOf is the context s's session holds: what the agent's last
// usage_update said ("agent"), else a quarter of the bytes its prompts and
// replies in this process carried ("estimate").
func (s *Process) contextOf() (int64, string) {
	if n := s.a.ContextUsed(s.native); n > 0 {
		return n, "agent"
	}
	r := s.res()
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.bytes / 4, "estimate"
}

// lastRequest is when s's agent last sent its provider a request, as far
// as the daemon sees: its last prompt's end, or its last output between
// prompts (its own turns), whichever came later.
func (s *Process) lastRequest() time.Time {
	r := s.res()
	r.mu.Lock()
	last := r.lastRequest
	r.mu.Unlock()
	s.between.mu.Lock()
	between := s.between.last
	s.between.mu.Unlock()
	if between.After(last) {
		return between
	}
	return last
}

// ResidencyKey is the pool's Describe: what the residency policy knows of
// key k's process s, idle since lastUsed. It is called with the pool's
// lock held: it reads the agent's and the keeper's state and the process
// tree's memory, and calls nothing of the pool.
func (kp *Keeper) ResidencyKey(k session.Key, s pool.Session, lastUsed time.Time) residency.Key {
	rk := residency.Key{Key: k, LastUsed: lastUsed}
	p, ok := s.(*Process)
	if !ok {
		return rk
	}
	b, _ := kp.conf().Binding(k.Binding)
	facts := factsOf(policy.Agent(p.a.Info()))
	keeps := facts.restoreKeepsCache
	if b.RestoreKeepsCache != nil {
		keeps = *b.RestoreKeepsCache
	}
	rk.Agent = residency.Agent{CacheTTL: p.res().ttl, RestoreKeepsCache: keeps, Prices: pricesOf(b)}
	rk.LastRequest = p.lastRequest()
	rk.ContextTokens, _ = p.contextOf()
	if n, _, err := child.Memory(p.Pid()); err == nil {
		rk.MemoryBytes = n
	}
	kp.res.mu.Lock()
	rk.Agent.StartSeconds, rk.Agent.RestoreSeconds = kp.res.starts[k.Binding], kp.res.restores[k.Binding]
	if r := kp.res.keys[k]; r != nil {
		rk.Gaps = slices.Clone(r.gaps)
	}
	kp.res.mu.Unlock()
	return rk
}

// Tending says what the daemon may do itself to the idle session of the
// process pid: the prompt that compacts it ("" when it may not: the agent
// compacts on its own, compaction is off, or no way to ask is known), the
// threshold the compaction wants, and whether its binding asks for
// keep-alives. False: no such process.
func (kp *Keeper) Tending(pid int) (compact string, minTokens int64, keepAlive, ok bool) {
	v, ok := kp.procs.Load(pid)
	if !ok {
		return "", 0, false, false
	}
	p := v.(*Process)
	b, _ := kp.conf().Binding(p.key.Binding)
	if p.res().compaction == config.CompactDaemon {
		compact = factsOf(policy.Agent(p.a.Info())).compact
	}
	minTokens = DefaultCompactTokens
	if v, err := strconv.ParseInt(strings.TrimSpace(b.Env["CLAUDE_CODE_IDLE_COMPACT_MIN_TOKENS"]), 10, 64); err == nil && v > 0 {
		minTokens = max(v, 100_000)
	}
	return compact, minTokens, b.KeepAlive, true
}

// SetMemoryTight says whether the agents' memory is over the daemon's
// limit (max_memory, memory_pressure): while it is, no spare starts; when
// it no longer is, the spares' goroutine fills them again.
func (kp *Keeper) SetMemoryTight(tight bool) {
	if kp.res.tight.Swap(tight) && !tight {
		kp.kickSpares()
	}
}

// ShedSpare stops the oldest spare of any binding, for memory (spares go
// before any key's process), and names its binding and pid; false: none.
func (kp *Keeper) ShedSpare() (string, int, bool) {
	s := &kp.sp
	s.mu.Lock()
	var oldest *agentProc
	for _, list := range s.ready {
		if len(list) > 0 && (oldest == nil || list[0].born.Before(oldest.born)) {
			oldest = list[0]
		}
	}
	if oldest == nil {
		s.mu.Unlock()
		return "", 0, false
	}
	s.ready[oldest.binding] = s.ready[oldest.binding][1:]
	left := len(s.ready[oldest.binding])
	s.mu.Unlock()
	kp.m.SpareProcesses.WithLabelValues(oldest.binding).Set(float64(left))
	pid := oldest.a.Pid()
	kp.stopEach([]*agentProc{oldest}, "memory")
	return oldest.binding, pid, true
}

// AgentMemoryTotal is the memory of every live agent, key-bound and
// spare, each its whole tree.
func (kp *Keeper) AgentMemoryTotal() int64 {
	var n int64
	for _, v := range kp.AgentMemory() {
		n += v
	}
	return n
}

// KeepAlivePrompt is the daemon's cache keep-alive: a short prompt whose
// model request reads the session's cache and so renews it.
const KeepAlivePrompt = "(residentd keep-alive: nothing to do; reply with OK only)"

// Tend sends the daemon's own prompt text to process p's idle session
// (an idle compaction, a cache keep-alive: what names it) as an agent run
// of its key: announced on the feed, its updates (a compaction_update
// with the agent's summary) in the run's events, its reply its result.
// The caller holds the key's process (pool.Borrow). The prompt is no turn
// of the key: it starts no return, and its text joins no conversation.
func (kp *Keeper) Tend(ctx context.Context, p *Process, what, text string) error {
	log := kp.log.Named("agent").With(zap.String("key", p.key.String()), zap.String("tend", what), zap.String("native", p.native))
	r, err := kp.runs.NewKind(apitype.RunKindAgent, agentRunID(), p.key, "", run.Trace{})
	if err != nil {
		return fmt.Errorf("tend %s: open its run: %w", what, err)
	}
	r.Emit(apitype.Event{Event: apitype.EventStarted, Shape: apitype.ShapeAgent, Native: p.native, Pid: p.Pid()})
	kp.m.AgentRun()
	log.Info("daemon's own prompt on the idle session: agent run started", zap.String("run", r.ID))
	done := p.prompting(text, false)
	res, err := p.a.PromptMeta(ctx, p.native, text, nil, nil, func(u acp.Update) {
		up := u.Update
		r.Emit(apitype.Event{Event: apitype.EventUpdate, Update: &up})
	})
	done(res)
	if res.Compacted {
		p.compacted()
		kp.m.Compacted(p.key.Binding)
	}
	if err != nil {
		msg := fmt.Sprintf("the daemon's %s of the idle session failed: %v", what, err)
		r.Finish(apitype.Event{Event: apitype.EventError, Shape: apitype.ShapeAgent, Native: p.native, Code: apitype.CodeAgentFailed, Message: msg}, errors.New(msg))
		log.Warn("daemon's own prompt failed", zap.String("run", r.ID), zap.Error(err))
		return err
	}
	r.Finish(apitype.Event{Event: apitype.EventDone, Shape: apitype.ShapeAgent, Native: p.native, Text: res.Text, StopReason: res.StopReason, Watermark: apitype.WatermarkNone}, nil)
	log.Info("daemon's own prompt done", zap.String("run", r.ID), zap.Bool("compacted", res.Compacted))
	return nil
}

// Residency fills in the sessions listing what the keeper knows of
// ses's process for the policy: its cache's TTL and estimated expiry, its
// context and where that figure comes from.
func (kp *Keeper) Residency(ses *apitype.Session, rk residency.Key) {
	if ses.Residency == nil {
		return
	}
	v, ok := kp.procs.Load(ses.Pid)
	if !ok {
		return
	}
	p := v.(*Process)
	r := ses.Residency
	r.CacheTTLS = rk.Agent.CacheTTL.Seconds()
	if !rk.LastRequest.IsZero() {
		last, exp := rk.LastRequest, rk.CacheExpires()
		r.LastRequest, r.CacheExpires = &last, &exp
	}
	r.ContextTokens, r.ContextSource = p.contextOf()
}
