package sim

import (
	"container/heap"
	"context"
	"fmt"
	"math"
	"sort"
	"sync"
	"time"

	"github.com/residentd/residentd/internal/lease"
	"github.com/residentd/residentd/internal/pool"
	"github.com/residentd/residentd/internal/residency"
	"github.com/residentd/residentd/internal/session"
)

// TeamModel is the agent, its process and its provider as the team sim
// sees them.
type TeamModel struct {
	Slots int // the pool's MaxLive
	// A session's context: FirstContext tokens at its first turn, growing
	// by TurnTokens a turn, compacted to CompactTo once past CompactAbove
	// (the compacted context is a new prefix: written in full).
	FirstContext, TurnTokens, CompactAbove, CompactTo int64
	Prices                                            residency.Prices
	StartSeconds, RestoreSeconds                      float64 // a cold start, a restore: to the turn's started
	TurnSeconds                                       float64 // a turn, from started to its end (its last request)
	MemoryMin, MemoryMax                              int64   // a process's tree: MemoryMin with a fresh session, MemoryMax at CompactAbove
	ReapEvery                                         time.Duration
	GapsKept                                          int // the newest return gaps a key remembers
}

// DefaultTeamModel: 4 slots; 15,000 tokens at the first turn, 2,000 more
// a turn, compacted to 30,000 past 150,000; $3 input, $3.75 and $6 cache
// writes (5 minutes, 1 hour), $0.30 cache reads per million tokens; start
// 6 s, restore 4 s; a turn of a minute; 262–291 MiB a process
// (claude-agent-acp with its session open); the reaper every minute.
func DefaultTeamModel() TeamModel {
	return TeamModel{
		Slots: 4, FirstContext: 15000, TurnTokens: 2000, CompactAbove: 150000, CompactTo: 30000,
		Prices:       residency.Prices{Input: 3, CacheWrite5m: 3.75, CacheWrite1h: 6, CacheRead: 0.30},
		StartSeconds: 6, RestoreSeconds: 4, TurnSeconds: 60, MemoryMin: 262 << 20, MemoryMax: 291 << 20,
		ReapEvery: time.Minute, GapsKept: 64,
	}
}

// Cell is one cell of the matrix: the cache TTL (0: chosen per binding at
// each spawn from its keys' return gaps, residency.ChooseTTL) and whether
// a restore keeps the cache; KeepAlive adds keep-alive requests
// (residency.KeepAlive) to the warm processes.
type Cell struct {
	TTL               time.Duration
	RestoreKeepsCache bool
	KeepAlive         bool
}

// PolicySpec names a policy of the sim. Make returns it for one run (the
// oracle reads that run's future through next); a nil Make is the pool's
// own least-recent use and Idle timer, with no policy at all.
type PolicySpec struct {
	Name string
	Idle time.Duration
	Make func(next func(session.Key, time.Time) (time.Time, bool)) residency.Policy
}

// TeamPolicies are the sim's policies, in table order: today's pool
// (least recently used, reaped after 30 minutes idle), fixed timers of 10
// and 15 minutes, the saving policy and the oracle.
func TeamPolicies() []PolicySpec {
	timer := func(d time.Duration) func(func(session.Key, time.Time) (time.Time, bool)) residency.Policy {
		return func(func(session.Key, time.Time) (time.Time, bool)) residency.Policy { return residency.Timer{Idle: d} }
	}
	return []PolicySpec{
		{Name: "lru+30m", Idle: 30 * time.Minute},
		{Name: "timer-10m", Make: timer(10 * time.Minute)},
		{Name: "timer-15m", Make: timer(15 * time.Minute)},
		{Name: "saving", Make: func(func(session.Key, time.Time) (time.Time, bool)) residency.Policy {
			// As the daemon makes it, with its default idle_timeout.
			p, err := residency.ByName("saving", residency.Settings{Idle: 30 * time.Minute})
			if err != nil {
				panic(err) // registered by the residency package itself
			}
			return p
		}},
		{Name: "oracle", Make: func(next func(session.Key, time.Time) (time.Time, bool)) residency.Policy {
			return residency.Oracle{Next: next}
		}},
	}
}

// TeamFigures are one run's (or the mean of several runs') figures.
type TeamFigures struct {
	Mentions         float64 `json:"mentions"`
	Turns            float64 `json:"turns"`
	Ended            float64 `json:"ended"` // turns that ended: every mention's, once
	Cost             float64 `json:"cost"`
	CostPerMention   float64 `json:"cost_per_mention"`
	CacheWriteTokens float64 `json:"cache_write_tokens"`
	CacheReadTokens  float64 `json:"cache_read_tokens"`
	Cold             float64 `json:"cold"`
	Restores         float64 `json:"restores"`
	Warm             float64 `json:"warm"`
	Evictions        float64 `json:"capacity_evictions"`
	CachesLost       float64 `json:"caches_lost"` // restored turns whose cache was alive but lost with the process
	Reaped           float64 `json:"reaped"`
	MeanStartedS     float64 `json:"mean_started_s"`
	P95StartedS      float64 `json:"p95_started_s"`
	ProcessHours     float64 `json:"process_hours"`
	PeakMemoryMiB    float64 `json:"peak_memory_mib"`
	KeepAlives       float64 `json:"keep_alives,omitempty"`
	KeepAliveCost    float64 `json:"keep_alive_cost,omitempty"`
	Spawns           float64 `json:"spawns"`
	Spawns1h         float64 `json:"spawns_1h"`
}

// PlayTeam replays ms through a real pool (internal/pool) in virtual time
// with a fake spawner standing for the agent, under policy pol in cell,
// and accounts each turn's provider cost by its lease's shape and the
// session's cache.
func PlayTeam(ms []Mention, m TeamModel, cell Cell, pol PolicySpec) (TeamFigures, error) {
	if len(ms) == 0 {
		return TeamFigures{}, fmt.Errorf("sim: no mentions")
	}
	e := newEngine(ms, m, cell)
	cfg := pool.Config{
		MaxLive: m.Slots, IdleTimeout: pol.Idle, ReapInterval: 1000 * time.Hour, QueueTimeout: 1000 * time.Hour,
		Now:     e.now,
		OnEvict: e.evicted,
	}
	if pol.Make != nil {
		cfg.Residency, cfg.Describe = pol.Make(e.next), e.describe
	}
	e.pool = pool.New[*simProc](cfg, e)
	err := e.run()
	e.pool.Close()
	if err != nil {
		return TeamFigures{}, err
	}
	return e.figures(), nil
}

// simProc is a process of the fake spawner.
type simProc struct {
	e       *engine
	key     *keyState
	pid     int
	ttl     time.Duration
	mem     int64
	started time.Time
	done    chan struct{}
	once    sync.Once
	exit    func()
}

func (p *simProc) Native() string        { return "nat-" + p.key.id.Channel }
func (p *simProc) Pid() int              { return p.pid }
func (p *simProc) Done() <-chan struct{} { return p.done }
func (p *simProc) Close() error {
	p.once.Do(func() {
		p.e.ended(p)
		close(p.done)
		p.exit()
	})
	return nil
}

// keyState is what the sim knows of one key.
type keyState struct {
	id          session.Key
	future      []time.Time // its mentions, in order
	waiting     []time.Time // mentions waiting for a turn
	busy        bool
	co          *pool.Checkout[*simProc]
	proc        *simProc
	session     bool // a native session exists (a restore is possible)
	ctx         int64
	lastRequest time.Time
	cacheTTL    time.Duration // of the request that wrote the cache
	lastEnd     time.Time
	gaps        []time.Duration
}

type event struct {
	at   time.Time
	kind int // evEnd, evReap, evArrive: the order of events at one moment
	seq  int
	key  *keyState
}

const (
	evEnd = iota
	evReap
	evArrive
)

type events []event

func (h events) Len() int { return len(h) }
func (h events) Less(i, j int) bool {
	if !h[i].at.Equal(h[j].at) {
		return h[i].at.Before(h[j].at)
	}
	if h[i].kind != h[j].kind {
		return h[i].kind < h[j].kind
	}
	return h[i].seq < h[j].seq
}
func (h events) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *events) Push(x any)   { *h = append(*h, x.(event)) }
func (h *events) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

type engine struct {
	m    TeamModel
	cell Cell
	ms   []Mention
	pool *pool.Pool[*simProc]

	mu     sync.Mutex // guards clock and the process accounting below (Close runs in the pool's goroutines)
	clock  time.Time
	keys   map[session.Key]*keyState
	order  []*keyState // keys with waiting mentions, by their first waiting mention
	queue  events
	seq    int
	pid    int
	end    time.Time
	byBind map[string][]*keyState

	f       TeamFigures
	started []float64 // seconds from each mention to its turn's started
	live    int64     // memory of the live processes
	procSec float64
}

func newEngine(ms []Mention, m TeamModel, cell Cell) *engine {
	e := &engine{m: m, cell: cell, ms: ms, keys: map[session.Key]*keyState{}, byBind: map[string][]*keyState{}}
	for _, x := range ms {
		k := session.Key{Channel: x.Channel, Binding: x.Binding}
		ks := e.keys[k]
		if ks == nil {
			ks = &keyState{id: k}
			e.keys[k] = ks
			e.byBind[k.Binding] = append(e.byBind[k.Binding], ks)
		}
		ks.future = append(ks.future, x.At)
		e.push(event{at: x.At, kind: evArrive, key: ks})
	}
	first, last := ms[0].At, ms[len(ms)-1].At
	day := func(t time.Time) time.Time { return time.Date(t.Year(), t.Month(), t.Day(), 0, 0, 0, 0, t.Location()) }
	e.clock = day(first)
	e.end = day(last).AddDate(0, 0, 1)
	for t := e.clock.Add(m.ReapEvery); t.Before(e.end); t = t.Add(m.ReapEvery) {
		e.push(event{at: t, kind: evReap})
	}
	return e
}

func (e *engine) push(ev event) {
	e.seq++
	ev.seq = e.seq
	heap.Push(&e.queue, ev)
}

func (e *engine) now() time.Time {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.clock
}

func (e *engine) set(t time.Time) {
	e.mu.Lock()
	e.clock = t
	e.mu.Unlock()
}

// next is the oracle's view of the future: k's first mention after t.
func (e *engine) next(k session.Key, t time.Time) (time.Time, bool) {
	ks := e.keys[k]
	if ks == nil {
		return time.Time{}, false
	}
	i := sort.Search(len(ks.future), func(i int) bool { return ks.future[i].After(t) })
	if i == len(ks.future) {
		return time.Time{}, false
	}
	return ks.future[i], true
}

// agent is the residency view of the binding's agent for a process of
// cache TTL ttl.
func (e *engine) agent(ttl time.Duration) residency.Agent {
	return residency.Agent{
		CacheTTL: ttl, RestoreKeepsCache: e.cell.RestoreKeepsCache,
		StartSeconds: e.m.StartSeconds, RestoreSeconds: e.m.RestoreSeconds, Prices: e.m.Prices,
	}
}

// describe is the pool's Config.Describe: what the keeper would know of
// the key's process.
func (e *engine) describe(k session.Key, s pool.Session, lastUsed time.Time) residency.Key {
	ks := e.keys[k]
	p := s.(*simProc)
	return residency.Key{
		Agent: e.agent(ks.cacheTTL), LastUsed: lastUsed, LastRequest: ks.lastRequest, ContextTokens: ks.ctx,
		MemoryBytes: p.mem, Gaps: ks.gaps,
	}
}

// Spawn is the fake spawner: a process is a record, its shape restored
// when the key has a session to restore.
func (e *engine) Spawn(_ context.Context, k session.Key, exited func()) (*simProc, lease.Shape, error) {
	ks := e.keys[k]
	ttl := e.cell.TTL
	if ttl == 0 {
		var keys []residency.Key
		for _, o := range e.byBind[k.Binding] {
			if o.session {
				keys = append(keys, residency.Key{Agent: e.agent(0), ContextTokens: o.ctx, Gaps: o.gaps})
			}
		}
		ttl, _ = residency.ChooseTTL(keys, e.m.TurnTokens, residency.Prior{})
	}
	e.mu.Lock()
	e.pid++
	p := &simProc{e: e, key: ks, pid: e.pid, ttl: ttl, mem: e.memory(ks.ctx), started: e.clock, done: make(chan struct{}), exit: exited}
	e.live += p.mem
	e.f.PeakMemoryMiB = max(e.f.PeakMemoryMiB, float64(e.live)/(1<<20))
	e.f.Spawns++
	if ttl >= time.Hour {
		e.f.Spawns1h++
	}
	e.mu.Unlock()
	ks.proc = p
	if ks.session {
		return p, lease.Restored, nil
	}
	return p, lease.Cold, nil
}

func (e *engine) memory(ctx int64) int64 {
	f := math.Min(1, float64(ctx)/float64(max(e.m.CompactAbove, 1)))
	return e.m.MemoryMin + int64(f*float64(e.m.MemoryMax-e.m.MemoryMin))
}

// ended accounts a process that has stopped.
func (e *engine) ended(p *simProc) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.live -= p.mem
	e.procSec += e.clock.Sub(p.started).Seconds()
	if p.key.proc == p {
		p.key.proc = nil
	}
}

func (e *engine) evicted(_ session.Key, r pool.Reason) {
	e.mu.Lock()
	defer e.mu.Unlock()
	switch r {
	case pool.ReasonCapacity:
		e.f.Evictions++
	case pool.ReasonIdle:
		e.f.Reaped++
	}
}

func (e *engine) run() error {
	for e.queue.Len() > 0 {
		ev := heap.Pop(&e.queue).(event)
		e.set(ev.at)
		switch ev.kind {
		case evArrive:
			ks := ev.key
			if len(ks.waiting) == 0 {
				e.order = append(e.order, ks)
			}
			ks.waiting = append(ks.waiting, ev.at)
		case evEnd:
			ks := ev.key
			e.pool.Release(ks.co, true)
			ks.busy, ks.co, ks.lastEnd = false, nil, ev.at
			e.f.Ended++
		case evReap:
			e.pool.ReapIdle()
			if e.cell.KeepAlive {
				e.keepAlive(ev.at)
			}
		}
		if err := e.start(ev.at); err != nil {
			return err
		}
	}
	e.set(e.end)
	for _, ks := range e.keys {
		if len(ks.waiting) > 0 || ks.busy {
			return fmt.Errorf("sim: %s still has %d mention(s) waiting at the end of the days", ks.id, len(ks.waiting))
		}
	}
	return nil
}

// start begins a turn on every key with waiting mentions that can start
// now, in the order their first mention arrived; a turn answers the key's
// first waiting mention (the bursts mode queue, a binding's default: each
// mention is a turn whatever the policy, so the policies' turns are the
// same and only their shapes and caches differ).
func (e *engine) start(now time.Time) error {
	kept := e.order[:0]
	for _, ks := range e.order {
		if ks.busy || !e.pool.Free(ks.id) {
			kept = append(kept, ks)
			continue
		}
		if err := e.turn(now, ks); err != nil {
			return err
		}
		if len(ks.waiting) > 0 {
			kept = append(kept, ks)
		}
	}
	for i := len(kept); i < len(e.order); i++ {
		e.order[i] = nil
	}
	e.order = kept
	return nil
}

// turn runs one turn of ks at now: the pool's lease decides its shape,
// the shape and the cache what it costs.
func (e *engine) turn(now time.Time, ks *keyState) error {
	co, err := e.pool.Acquire(context.Background(), ks.id, pool.AcquireOptions{})
	if err != nil {
		return fmt.Errorf("sim: acquire %s at %s: %w", ks.id, now.Format(time.TimeOnly), err)
	}
	wait := 0.0
	switch co.Lease.Shape {
	case lease.Cold:
		wait = e.m.StartSeconds
		e.f.Cold++
	case lease.Restored:
		wait = e.m.RestoreSeconds
		e.f.Restores++
	default:
		e.f.Warm++
	}
	started := now.Add(time.Duration(wait * float64(time.Second)))
	if !ks.lastEnd.IsZero() && ks.waiting[0].After(ks.lastEnd) {
		ks.gaps = append(ks.gaps, ks.waiting[0].Sub(ks.lastEnd))
		if n := len(ks.gaps) - e.m.GapsKept; n > 0 {
			ks.gaps = append(ks.gaps[:0], ks.gaps[n:]...)
		}
	}
	e.started = append(e.started, started.Sub(ks.waiting[0]).Seconds())
	e.f.Mentions++
	ks.waiting = ks.waiting[1:]
	e.f.Turns++
	p := co.Session
	alive := ks.session && started.Before(ks.lastRequest.Add(ks.cacheTTL))
	cached := alive && (co.Lease.Shape == lease.Warm || co.Lease.Shape == lease.Restored && e.cell.RestoreKeepsCache)
	if alive && !cached {
		e.f.CachesLost++
	}
	ctx := e.m.FirstContext
	if ks.session {
		ctx = ks.ctx + e.m.TurnTokens
	}
	if ctx > e.m.CompactAbove {
		ctx, cached = e.m.CompactTo, false // a new prefix
	}
	write := ctx
	if cached {
		write = ctx - ks.ctx
		e.f.CacheReadTokens += float64(ks.ctx)
		e.f.Cost += float64(ks.ctx) * e.m.Prices.CacheRead * 1e-6
	}
	e.f.CacheWriteTokens += float64(write)
	e.f.Cost += float64(write) * e.m.Prices.Write(p.ttl) * 1e-6
	end := started.Add(time.Duration(e.m.TurnSeconds * float64(time.Second)))
	ks.session, ks.ctx, ks.lastRequest, ks.cacheTTL = true, ctx, end, p.ttl
	e.mu.Lock()
	mem := e.memory(ctx)
	e.live += mem - p.mem
	p.mem = mem
	e.f.PeakMemoryMiB = max(e.f.PeakMemoryMiB, float64(e.live)/(1<<20))
	e.mu.Unlock()
	ks.busy, ks.co = true, co
	e.push(event{at: end, kind: evEnd, key: ks})
	return nil
}

// keepAlive sends, for every warm idle key whose cache expires before the
// next reap, the keep-alive request residency.KeepAlive says pays.
func (e *engine) keepAlive(now time.Time) {
	for _, ks := range e.sortedKeys() {
		p := ks.proc
		if p == nil || ks.busy || !ks.session {
			continue
		}
		left := ks.lastRequest.Add(ks.cacheTTL).Sub(now)
		if left <= 0 || left > e.m.ReapEvery {
			continue
		}
		k := e.describe(ks.id, p, ks.lastEnd)
		k.Key = ks.id
		if ok, _ := residency.KeepAlive(now, k, residency.Prior{}); ok {
			e.f.KeepAlives++
			c := float64(ks.ctx) * e.m.Prices.CacheRead * 1e-6
			e.f.KeepAliveCost += c
			e.f.Cost += c
			e.f.CacheReadTokens += float64(ks.ctx)
			ks.lastRequest = now
		}
	}
}

func (e *engine) sortedKeys() []*keyState {
	out := make([]*keyState, 0, len(e.keys))
	for _, ks := range e.keys {
		out = append(out, ks)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].id.String() < out[j].id.String() })
	return out
}

// figures closes the books at the end of the last day.
func (e *engine) figures() TeamFigures {
	f := e.f
	f.ProcessHours = e.procSec / 3600
	if f.Mentions > 0 {
		f.CostPerMention = f.Cost / f.Mentions
	}
	s := append([]float64(nil), e.started...)
	sort.Float64s(s)
	sum := 0.0
	for _, x := range s {
		sum += x
	}
	if len(s) > 0 {
		f.MeanStartedS = sum / float64(len(s))
		f.P95StartedS = s[int(math.Ceil(0.95*float64(len(s))))-1]
	}
	return f
}
