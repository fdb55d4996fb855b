// Package pool owns the live agent processes: one per (channel, binding)
// key, at most MaxLive at once, reaped when idle and evicted when a new key
// needs a slot as its residency policy decides (by default the source's:
// after IdleTimeout, least recently used first), never while a turn runs.
// Slots are shared fairly: while turns wait for one, a key that keeps its
// process busy yields it after YieldAfter turns.
package pool

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/residentd/residentd/internal/lease"
	"github.com/residentd/residentd/internal/residency"
	"github.com/residentd/residentd/internal/session"
)

// Reason says why a process left the pool.
type Reason string

const (
	ReasonIdle     Reason = "idle"     // the residency policy let it go (by default: idle longer than IdleTimeout)
	ReasonCapacity Reason = "capacity" // the policy's victim when a new key needed a slot (by default the least recently used)
	ReasonMemory   Reason = "memory"   // the policy's victim when the processes' memory was over its limit (Shed)
	ReasonYield    Reason = "yield"    // served YieldAfter turns in a row while other keys waited for a slot
	ReasonCrash    Reason = "crash"    // the process exited by itself
	ReasonFresh    Reason = "fresh"    // "start fresh" for the key
	ReasonShutdown Reason = "shutdown" // the daemon is stopping
	ReasonReplaced Reason = "replaced" // its settings changed (a config reload): replaced at its key's next turn
	ReasonRemoved  Reason = "removed"  // its binding was removed (a config reload): stopped after its turn
)

// Reasons lists every eviction reason, for metrics that pre-create series.
var Reasons = []Reason{ReasonIdle, ReasonCapacity, ReasonMemory, ReasonYield, ReasonCrash, ReasonFresh, ReasonShutdown, ReasonReplaced, ReasonRemoved}

// Errors a caller can tell apart with errors.Is.
var (
	ErrQueueFull    = errors.New("pool: every slot is busy and the wait queue is full")
	ErrQueueTimeout = errors.New("pool: every slot stayed busy for the whole queue timeout")
	ErrClosed       = errors.New("pool: shutting down")
)

// Session is a live agent process as the pool sees it.
type Session interface {
	Native() string        // the native ACP session id it serves
	Pid() int              // its process id
	Done() <-chan struct{} // closed once the process has exited and been reaped
	Close() error          // stops the process and waits for the reap; idempotent
}

// Worker is a Session whose process may work with no turn in flight
// (background work, output between prompts). The pool neither reaps nor
// evicts it while it works, and counts its idle time from when it last
// worked.
type Worker interface {
	Working() (working bool, last time.Time)
}

// Ender is a Session whose process may have work running that must be
// ended explicitly before it is stopped for start fresh or shutdown (the
// agent asked to cancel, its agent run closed with the reason). EndWork
// returns once the work ended or a bounded wait passed.
type Ender interface {
	EndWork(reason Reason)
}

// idleSince reports whether e's process is idle (not working) and since
// when it has been.
func idleSince[S Session](e *entry[S]) (bool, time.Time) {
	w, ok := any(e.sess).(Worker)
	if !ok {
		return true, e.lastUsed
	}
	working, last := w.Working()
	if working {
		return false, time.Time{}
	}
	if last.After(e.lastUsed) {
		return true, last
	}
	return true, e.lastUsed
}

// Spawner starts the process for a key and returns its shape: lease.Cold for
// a new native session, lease.Restored for a reloaded one. exited is the
// pool's exit hook: the spawner arranges for it to be called once the
// process has exited by itself or been stopped (it may run before Spawn
// returns, and must not be called when Spawn fails).
type Spawner[S Session] interface {
	Spawn(ctx context.Context, k session.Key, exited func()) (S, lease.Shape, error)
}

// Config holds the pool's limits. Zero values take the defaults.
type Config struct {
	MaxLive      int           // live processes at once; default 4
	IdleTimeout  time.Duration // default 30m
	ReapInterval time.Duration // how often the reaper looks; default IdleTimeout/10, at most 1m
	QueueLen     int           // turns waiting for a slot; default 64
	QueueTimeout time.Duration // longest wait for a slot; default 2m
	// YieldAfter is how many turns in a row a key's process may serve while
	// other keys wait for a slot; the key's next turn then stops it (reason
	// yield) and queues for a slot behind them. Default 4.
	YieldAfter int
	Now        func() time.Time
	// OnEvict is called (outside the pool's lock) for every process that
	// leaves the pool for a Reason, once it is stopped and before its slot is
	// free again.
	OnEvict func(k session.Key, reason Reason)
	// Retired, when set, reports whether key k's processes must stop (their
	// binding was removed): the one that ends a turn is stopped at Release,
	// and Sweep stops the idle ones (reason removed).
	Retired func(k session.Key) bool
	// Residency decides which idle process goes when a new key needs a slot
	// (its Victim, reason capacity; Shed's, reason memory) and when an idle
	// one is reaped (its Expire, reason idle). nil is the source's timer,
	// residency.Timer{Idle: IdleTimeout}, which follows IdleTimeout when
	// SetLimits changes it.
	Residency residency.Policy
	// Describe tells the policy what is known of key k's process s;
	// lastUsed is when it last worked (its last turn's end, or its
	// background work's, whichever came later). The pool sets the Key's
	// Key and Working itself. It is called with the pool's lock held: it
	// must not call the pool. nil gives a Key with LastUsed and Working
	// only.
	Describe func(k session.Key, s Session, lastUsed time.Time) residency.Key
	// OnDecide, when set, hears of every process a residency decision
	// stopped (reasons idle, capacity and memory), with the policy's name
	// and reason, once it is stopped and just before OnEvict hears of it
	// (outside the pool's lock).
	OnDecide func(Decision)
}

// Decision is a residency decision that stopped a process.
type Decision struct {
	Reason Reason // idle, capacity or memory
	Policy string // the policy's Name
	Why    string // the policy's reason, in words
	At     time.Time
	// Key is what the policy was told of the key (Key.Key names it).
	Key residency.Key
}

func (c *Config) setDefaults() {
	if c.MaxLive <= 0 {
		c.MaxLive = 4
	}
	if c.IdleTimeout <= 0 {
		c.IdleTimeout = 30 * time.Minute
	}
	if c.ReapInterval <= 0 {
		c.ReapInterval = reapEvery(c.IdleTimeout)
	}
	if c.QueueLen <= 0 {
		c.QueueLen = 64
	}
	if c.QueueTimeout <= 0 {
		c.QueueTimeout = 2 * time.Minute
	}
	if c.YieldAfter <= 0 {
		c.YieldAfter = 4
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.OnEvict == nil {
		c.OnEvict = func(session.Key, Reason) {}
	}
}

func reapEvery(idle time.Duration) time.Duration { return min(idle/10, time.Minute) }

// policyLocked is the residency policy in force.
func (p *Pool[S]) policyLocked() residency.Policy {
	if p.cfg.Residency != nil {
		return p.cfg.Residency
	}
	return residency.Timer{Idle: p.cfg.IdleTimeout}
}

// describeLocked is what the policy knows of e's live process: idle since
// when, or working.
func (p *Pool[S]) describeLocked(e *entry[S]) residency.Key {
	idle, since := idleSince(e)
	if !idle {
		since = e.lastUsed
	}
	var k residency.Key
	if p.cfg.Describe != nil {
		k = p.cfg.Describe(e.key, e.sess, since)
	} else {
		k.LastUsed = since
	}
	k.Key, k.Working = e.key, !idle
	return k
}

// state is where a key's process is in its life.
type state int

const (
	gone     state = iota // no process
	starting              // a turn is spawning it
	ready                 // alive and idle
	busy                  // alive and in a turn
	stopping              // being stopped; it still holds its slot until reaped
)

func (s state) String() string {
	switch s {
	case gone:
		return "gone"
	case starting:
		return "starting"
	case ready:
		return "idle" // the sessions listing's word for it
	case busy:
		return "busy"
	case stopping:
		return "stopping"
	}
	return fmt.Sprintf("state(%d)", int(s))
}

// next lists the transitions each state may make; anything else is a bug.
var next = map[state][]state{
	gone:     {starting},
	starting: {busy, gone, stopping},
	ready:    {busy, stopping},
	busy:     {ready, stopping},
	stopping: {gone},
}

// entry is one key's state. All fields are guarded by Pool.mu.
type entry[S Session] struct {
	key   session.Key
	state state
	sess  S             // set in ready, busy and stopping
	gen   int           // counts the key's processes; an exit hook names the one it is for
	gone  chan struct{} // closed when a stopping process is reaped

	// The key's hold: at most one turn (or exclusive request) at a time.
	held     bool
	holder   string          // the owner Acquire was given
	waiters  []*keyWaiter    // turns waiting for the key, FIFO
	excl     []chan struct{} // exclusive requests, served before waiters
	lastUsed time.Time
	started  time.Time
	turns    [3]int // by shape
	// streak counts the process's turns in a row that began while turns
	// waited for a slot; a turn that began with none waiting resets it.
	streak int
	// decision is the residency decision stopping the process, if one is.
	decision *Decision
}

type keyWaiter struct {
	ch    chan struct{}
	owner string
	wait  waitReport
}

// Wait says why a turn waits and where it stands: Slot false means it
// waits for its key (another turn holds it), true for a free slot.
// Position 1 is next in line.
type Wait struct {
	Slot     bool
	Position int
}

// waitReport tells one waiting turn where it stands, once per change.
type waitReport struct {
	on   func(Wait)
	last Wait
}

func (w *waitReport) report(x Wait) {
	if w.on != nil && w.last != x {
		w.last = x
		w.on(x)
	}
}

type slotWaiter struct {
	ch   chan struct{}
	wait waitReport
}

// Pool keeps the live processes. Create it with New; stop it with Close,
// which stops the reaper and every process.
type Pool[S Session] struct {
	cfg   Config
	spawn Spawner[S]

	// mu guards everything below and every entry. Lock order: mu, then
	// what the callbacks called under it take (AcquireOptions.OnWait and
	// Reuse, Config.Retired, a Worker's Working, a Session's Pid, Native
	// and Done): none may call the pool. The daemon's OnWait takes a run's
	// lock; resident's Working takes acp.Agent.mu, then its between.mu.
	// The daemon's lanes call Reserve and Unreserve with a lane's lock held
	// (lane, then mu). Spawn, OnEvict, OnStart, Close and EndWork run
	// without mu.
	mu      sync.Mutex
	entries map[session.Key]*entry[S]
	slots   int           // entries not gone: starting, ready, busy or stopping
	slotQ   []*slotWaiter // turns waiting for a slot, FIFO
	closed  bool
	closeCh chan struct{}
	// reapAuto: ReapInterval follows IdleTimeout (it was not given);
	// reapReset tells the reaper the interval changed.
	reapAuto  bool
	reapReset chan struct{}

	wg sync.WaitGroup // the reaper, spawns in flight and stops in flight
}

// New returns a pool and starts its idle reaper; Close stops it.
func New[S Session](cfg Config, sp Spawner[S]) *Pool[S] {
	auto := cfg.ReapInterval <= 0
	cfg.setDefaults()
	p := &Pool[S]{cfg: cfg, spawn: sp, entries: make(map[session.Key]*entry[S]), closeCh: make(chan struct{}), reapAuto: auto, reapReset: make(chan struct{}, 1)}
	p.wg.Add(1)
	go p.reaper()
	return p
}

// setLocked moves e to state to, keeping the slot count, and panics on a
// transition the lifecycle does not have: that is a bug in this package.
func (p *Pool[S]) setLocked(e *entry[S], to state) {
	legal := false
	for _, s := range next[e.state] {
		legal = legal || s == to
	}
	if !legal {
		panic(fmt.Sprintf("pool: key %s: illegal transition %s -> %s", e.key, e.state, to))
	}
	switch {
	case e.state == gone:
		p.slots++
	case to == gone:
		p.slots--
	}
	e.state = to
}

// Checkout is one turn's hold on a key's process. Call Release exactly once.
type Checkout[S Session] struct {
	Key     session.Key
	Session S
	Lease   *lease.Lease
	Waited  time.Duration // time spent waiting for the key and a slot, spawning not included

	p        *Pool[S]
	e        *entry[S]
	released bool
	borrowed bool // Borrow's: no turn, so the process's last use stays
}

// AcquireOptions are optional parts of an Acquire.
type AcquireOptions struct {
	// Owner names the turn; an Exclusive request is told who holds the key.
	Owner string
	// OnWait, when set, hears each time the turn starts waiting or moves up
	// in line. It is called with the pool's lock held: it must not call the
	// pool.
	OnWait func(Wait)
	// OnStart, when set, hears once the turn waits no more: it holds its
	// key and its process (warm) or a slot for one (about to spawn).
	// Called without the pool's lock.
	OnStart func()
	// Reuse, when set, is asked of the key's idle process before the turn
	// takes it: false stops it (reason replaced) and the turn spawns a new
	// one, as for a key with none.
	// It gets the pool's Session (the S of the pool); it is called with the
	// pool's lock held.
	Reuse func(Session) bool
}

func (o AcquireOptions) started() {
	if o.OnStart != nil {
		o.OnStart()
	}
}

// Acquire waits for the key (turns on one key run one at a time, in arrival
// order) and for a slot, then returns the key's process: warm when it was
// alive, otherwise newly spawned (cold or restored). A key whose process has
// served YieldAfter turns in a row while others waited for a slot gives it
// up first and waits its turn for a slot like them.
func (p *Pool[S]) Acquire(ctx context.Context, k session.Key, o AcquireOptions) (*Checkout[S], error) {
	start := p.cfg.Now()
	e, err := p.holdKey(ctx, k, o.Owner, o.OnWait)
	if err != nil {
		return nil, err
	}
	queued := p.yield(e, o.OnWait)
	warm, err := p.settle(ctx, e, true, o.Reuse)
	if err != nil {
		p.leaveSlotQueue(queued)
		p.releaseKey(e)
		return nil, err
	}
	if warm {
		p.mu.Lock()
		p.setLocked(e, busy)
		e.turns[lease.Warm]++
		p.countStreakLocked(e)
		sess := e.sess
		p.mu.Unlock()
		o.started()
		return &Checkout[S]{Key: k, Session: sess, Lease: lease.New(lease.Warm, sess.Native()), Waited: p.cfg.Now().Sub(start), p: p, e: e}, nil
	}

	if err := p.takeSlot(ctx, e, o.OnWait, queued); err != nil {
		p.releaseKey(e)
		return nil, err
	}
	waited := p.cfg.Now().Sub(start) // the wait, not the spawn that follows
	o.started()
	// takeSlot counted this spawn in p.wg, so Close waits for it.
	defer p.wg.Done()
	p.mu.Lock()
	e.gen++
	gen := e.gen
	p.mu.Unlock()
	sess, shape, err := p.spawn.Spawn(ctx, k, func() { p.exited(e, gen) })
	p.mu.Lock()
	if err != nil {
		p.setLocked(e, gone)
		p.signalSlotLocked()
		p.mu.Unlock()
		p.releaseKey(e)
		return nil, fmt.Errorf("pool: spawn binding %q for channel %q: %w", k.Binding, k.Channel, err)
	}
	now := p.cfg.Now()
	e.sess, e.started, e.lastUsed = sess, now, now
	if p.closed {
		// Close ran while we spawned: stop what we got.
		done := p.stopLocked(e, ReasonShutdown)
		p.mu.Unlock()
		<-done
		p.releaseKey(e)
		return nil, ErrClosed
	}
	p.setLocked(e, busy)
	e.turns[shape]++
	e.streak = 0
	p.countStreakLocked(e)
	p.mu.Unlock()
	return &Checkout[S]{Key: k, Session: sess, Lease: lease.New(shape, sess.Native()), Waited: waited, p: p, e: e}, nil
}

// yield stops e's idle process (reason yield) when turns wait for a slot
// and it has served YieldAfter turns in a row with them waiting: the freed
// slot goes to the longest waiter. The caller's turn, which holds e's key,
// joins the slot queue behind them at once, even when the queue is full: it
// was displaced, not turned away. yield returns its place in line, or nil
// when the process stays.
func (p *Pool[S]) yield(e *entry[S], onWait func(Wait)) *slotWaiter {
	p.mu.Lock()
	defer p.mu.Unlock()
	if e.state != ready || dead(e.sess) || len(p.slotQ) == 0 || e.streak < p.cfg.YieldAfter {
		return nil
	}
	p.stopLocked(e, ReasonYield)
	return p.queueLocked(onWait)
}

// countStreakLocked counts a turn that has just got e's process towards its
// streak, or ends the streak when no turn waits for a slot.
func (p *Pool[S]) countStreakLocked(e *entry[S]) {
	if len(p.slotQ) == 0 {
		e.streak = 0
		return
	}
	e.streak++
}

// settle waits, holding e's key, until its process is either ready (true)
// or gone (false): a process still stopping is waited for, and one found
// dead while idle is stopped as a crash, and one reuse refuses as replaced.
// With keep false a ready process is stopped too (as fresh), so settle ends
// with the key's process gone.
func (p *Pool[S]) settle(ctx context.Context, e *entry[S], keep bool, reuse func(Session) bool) (bool, error) {
	for {
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			return false, ErrClosed
		}
		var wait <-chan struct{}
		switch e.state {
		case gone:
			p.mu.Unlock()
			return false, nil
		case ready:
			stale := keep && reuse != nil && !reuse(e.sess)
			if keep && !stale && !dead(e.sess) {
				p.mu.Unlock()
				return true, nil
			}
			reason := ReasonFresh
			switch {
			case dead(e.sess):
				reason = ReasonCrash // died while idle; its exit hook has not run yet
			case stale:
				reason = ReasonReplaced
			}
			wait = p.stopLocked(e, reason)
		case stopping:
			wait = e.gone
		default:
			s := e.state
			p.mu.Unlock()
			panic(fmt.Sprintf("pool: key %s held by a new turn while %s", e.key, s))
		}
		p.mu.Unlock()
		select {
		case <-wait:
		case <-ctx.Done():
			return false, ctx.Err()
		}
	}
}

func dead[S Session](s S) bool {
	select {
	case <-s.Done():
		return true
	default:
		return false
	}
}

// holdKey waits until this caller holds k: at once when k is free or was
// reserved for owner and handed to it, otherwise in line (in its reserved
// place, when it has one).
func (p *Pool[S]) holdKey(ctx context.Context, k session.Key, owner string, onWait func(Wait)) (*entry[S], error) {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil, ErrClosed
	}
	e := p.entryLocked(k)
	if e.held && owner != "" && e.holder == owner {
		p.mu.Unlock()
		return e, nil
	}
	if !e.held {
		e.held, e.holder = true, owner
		p.mu.Unlock()
		return e, nil
	}
	var w *keyWaiter
	for _, x := range e.waiters {
		if owner != "" && x.owner == owner {
			w = x
		}
	}
	if w == nil {
		w = &keyWaiter{ch: make(chan struct{}), owner: owner}
		e.waiters = append(e.waiters, w)
	}
	w.wait = waitReport{on: onWait}
	p.reportKeyLocked(e)
	p.mu.Unlock()
	select {
	case <-w.ch:
		// The releaser handed us the key; on close it wakes every waiter.
		p.mu.Lock()
		closed := p.closed
		p.mu.Unlock()
		if closed {
			p.releaseKey(e)
			return nil, ErrClosed
		}
		return e, nil
	case <-ctx.Done():
		p.mu.Lock()
		for i, x := range e.waiters {
			if x == w {
				e.waiters = append(e.waiters[:i], e.waiters[i+1:]...)
				p.reportKeyLocked(e)
				p.cleanupLocked(e)
				p.mu.Unlock()
				return nil, ctx.Err()
			}
		}
		p.mu.Unlock()
		// Handed over just as we gave up: pass the key on.
		p.releaseKey(e)
		return nil, ctx.Err()
	}
}

// Reserve puts owner in line for key k now, before it asks: the turn that
// holds the key hands it to owner at its release (after any start-fresh
// request, before the turns that wait for a slot can evict the key's idle
// process), and a free key is held for owner at once. An Acquire with
// Owner owner takes the key reserved for it; Unreserve gives up a
// reservation that will not be taken. A key's turns are ordered outside
// the pool (the daemon's lanes); this keeps that order's next turn on the
// key's warm process.
func (p *Pool[S]) Reserve(k session.Key, owner string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed || owner == "" {
		return
	}
	e := p.entryLocked(k)
	if !e.held {
		e.held, e.holder = true, owner
		return
	}
	e.waiters = append(e.waiters, &keyWaiter{ch: make(chan struct{}), owner: owner})
}

// Unreserve gives up owner's reservation of key k, and the key itself when
// it was handed to owner and not taken: it passes on.
func (p *Pool[S]) Unreserve(k session.Key, owner string) {
	p.mu.Lock()
	e := p.entries[k]
	if e == nil || owner == "" {
		p.mu.Unlock()
		return
	}
	for i, w := range e.waiters {
		if w.owner == owner {
			e.waiters = append(e.waiters[:i], e.waiters[i+1:]...)
			p.reportKeyLocked(e)
			p.cleanupLocked(e)
			p.mu.Unlock()
			return
		}
	}
	held := e.held && e.holder == owner
	p.mu.Unlock()
	if held {
		p.releaseKey(e)
	}
}

func (p *Pool[S]) entryLocked(k session.Key) *entry[S] {
	e := p.entries[k]
	if e == nil {
		e = &entry[S]{key: k}
		p.entries[k] = e
	}
	return e
}

// cleanupLocked forgets an entry nothing refers to any more.
func (p *Pool[S]) cleanupLocked(e *entry[S]) {
	if e.state == gone && !e.held && len(e.waiters) == 0 && len(e.excl) == 0 && p.entries[e.key] == e {
		delete(p.entries, e.key)
	}
}

// releaseKey hands e's key to the next exclusive request, else to the next
// turn in line, or frees it.
func (p *Pool[S]) releaseKey(e *entry[S]) {
	p.mu.Lock()
	defer p.mu.Unlock()
	switch {
	case len(e.excl) > 0:
		next := e.excl[0]
		e.excl = e.excl[1:]
		e.holder = ""
		close(next)
	case len(e.waiters) > 0:
		next := e.waiters[0]
		e.waiters = e.waiters[1:]
		e.holder = next.owner
		close(next.ch)
		p.reportKeyLocked(e)
	default:
		e.held, e.holder = false, ""
		p.cleanupLocked(e)
	}
	p.signalSlotLocked()
}

// reportKeyLocked tells the turns waiting for e's key where they stand.
func (p *Pool[S]) reportKeyLocked(e *entry[S]) {
	for i, w := range e.waiters {
		w.wait.report(Wait{Position: i + 1})
	}
}

// reportSlotsLocked tells the turns waiting for a slot where they stand.
func (p *Pool[S]) reportSlotsLocked() {
	for i, w := range p.slotQ {
		w.wait.report(Wait{Slot: true, Position: i + 1})
	}
}

// takeSlot moves e from gone to starting once a slot is free, evicting the
// least recently used idle process when every slot is taken, or waiting in
// FIFO order; me is the turn's place in line when it has one already (see
// yield). On success it has added one to p.wg for the spawn.
func (p *Pool[S]) takeSlot(ctx context.Context, e *entry[S], onWait func(Wait), me *slotWaiter) error {
	var timeout <-chan time.Time
	for {
		p.mu.Lock()
		if p.closed {
			p.removeSlotWaiterLocked(me)
			p.mu.Unlock()
			return ErrClosed
		}
		var evicted <-chan struct{}
		if len(p.slotQ) == 0 || (me != nil && p.slotQ[0] == me) {
			if p.slots < p.cfg.MaxLive {
				p.setLocked(e, starting)
				p.wg.Add(1) // Close waits for the spawn; see Acquire
				p.removeSlotWaiterLocked(me)
				p.signalSlotLocked()
				p.mu.Unlock()
				return nil
			}
			if !p.anyStoppingLocked() {
				// The slot is ours only once the victim is reaped: never
				// more than MaxLive processes at once. Queued first, we
				// are the one its freed slot wakes.
				_, evicted = p.evictLocked(ReasonCapacity)
			}
		}
		if me == nil {
			if len(p.slotQ) >= p.cfg.QueueLen && evicted == nil {
				p.mu.Unlock()
				return fmt.Errorf("%w (%d waiting, the setting queue_len); try again later or raise max_live or queue_len", ErrQueueFull, p.cfg.QueueLen)
			}
			me = p.queueLocked(onWait)
		}
		if timeout == nil {
			t := time.NewTimer(p.cfg.QueueTimeout)
			defer t.Stop()
			timeout = t.C
		}
		p.mu.Unlock()
		select {
		case <-me.ch:
		case <-evicted:
		case <-timeout:
			p.leaveSlotQueue(me)
			return fmt.Errorf("%w (%s, the setting queue_timeout) for channel %q; try again later or raise max_live", ErrQueueTimeout, p.cfg.QueueTimeout, e.key.Channel)
		case <-ctx.Done():
			p.leaveSlotQueue(me)
			return ctx.Err()
		}
	}
}

// queueLocked puts a turn at the back of the slot queue.
func (p *Pool[S]) queueLocked(onWait func(Wait)) *slotWaiter {
	me := &slotWaiter{ch: make(chan struct{}, 1), wait: waitReport{on: onWait}}
	p.slotQ = append(p.slotQ, me)
	me.wait.report(Wait{Slot: true, Position: len(p.slotQ)})
	return me
}

// leaveSlotQueue takes a turn that gives up out of the slot queue (nil: it
// was not in it) and wakes the new head.
func (p *Pool[S]) leaveSlotQueue(me *slotWaiter) {
	if me == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.removeSlotWaiterLocked(me)
	p.signalSlotLocked()
}

func (p *Pool[S]) anyStoppingLocked() bool {
	for _, e := range p.entries {
		if e.state == stopping {
			return true
		}
	}
	return false
}

func (p *Pool[S]) removeSlotWaiterLocked(me *slotWaiter) {
	if me == nil {
		return
	}
	for i, w := range p.slotQ {
		if w == me {
			p.slotQ = append(p.slotQ[:i], p.slotQ[i+1:]...)
			p.reportSlotsLocked()
			return
		}
	}
}

// signalSlotLocked wakes the head of the slot queue to look again.
func (p *Pool[S]) signalSlotLocked() {
	if len(p.slotQ) > 0 {
		select {
		case p.slotQ[0].ch <- struct{}{}:
		default:
		}
	}
}

// idleLocked lists the idle processes no turn holds, in key order (so a
// policy's ties fall the same way each time).
func (p *Pool[S]) idleLocked() []*entry[S] {
	var out []*entry[S]
	for _, e := range p.entries {
		if e.state != ready || e.held {
			continue
		}
		if idle, _ := idleSince(e); idle {
			out = append(out, e)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].key.String() < out[j].key.String() })
	return out
}

// evictLocked stops the idle process the residency policy picks as its
// victim, for reason r, and returns its key and the channel closed once it
// is reaped; nil when the policy picks none (or none is idle).
func (p *Pool[S]) evictLocked(r Reason) (session.Key, <-chan struct{}) {
	idle := p.idleLocked()
	if len(idle) == 0 {
		return session.Key{}, nil
	}
	keys := make([]residency.Key, len(idle))
	for i, e := range idle {
		keys[i] = p.describeLocked(e)
	}
	pol := p.policyLocked()
	c := pol.Victim(p.cfg.Now(), keys)
	if c.Index < 0 || c.Index >= len(idle) {
		return session.Key{}, nil
	}
	v := idle[c.Index]
	return v.key, p.decideLocked(v, Decision{Reason: r, Policy: pol.Name(), Why: c.Reason, Key: keys[c.Index]})
}

// decideLocked stops e's process for the residency decision d.
func (p *Pool[S]) decideLocked(e *entry[S], d Decision) <-chan struct{} {
	d.At = p.cfg.Now()
	e.decision = &d
	return p.stopLocked(e, d.Reason)
}

// stopLocked moves e's process to stopping and stops it in a goroutine the
// pool owns. Once the process is reaped OnEvict hears of it (unless r is
// ""), then the entry is gone, its slot free and the slot queue woken. The
// returned channel is closed at that point.
func (p *Pool[S]) stopLocked(e *entry[S], r Reason) <-chan struct{} {
	sess, decided := e.sess, e.decision
	e.decision = nil
	p.setLocked(e, stopping)
	reaped := make(chan struct{})
	e.gone = reaped
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		if en, ok := any(sess).(Ender); ok && (r == ReasonFresh || r == ReasonShutdown) {
			en.EndWork(r)
		}
		sess.Close()
		if decided != nil && p.cfg.OnDecide != nil {
			p.cfg.OnDecide(*decided)
		}
		if r != "" {
			p.cfg.OnEvict(e.key, r)
		}
		p.mu.Lock()
		var zero S
		e.sess, e.gone = zero, nil
		p.setLocked(e, gone)
		p.cleanupLocked(e)
		p.signalSlotLocked()
		p.mu.Unlock()
		close(reaped)
	}()
	return reaped
}

// exited is a process's exit hook: an idle process that exits by itself is
// dropped at once; a busy one is dropped when its turn lets go.
func (p *Pool[S]) exited(e *entry[S], gen int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if e.gen == gen && e.state == ready && !p.closed {
		p.stopLocked(e, ReasonCrash)
	}
}

// Release ends a turn. keep=false stops the process (bindings that start
// fresh every turn); a process that died during the turn is dropped either
// way and counted as a crash. Release returns once the process is idle
// again or reaped, so whoever hears the turn is over sees it so.
func (p *Pool[S]) Release(c *Checkout[S], keep bool) {
	if c.released {
		return
	}
	c.released = true
	e := c.e
	var stopped <-chan struct{}
	p.mu.Lock()
	if e.state == busy {
		switch {
		case dead(e.sess):
			stopped = p.stopLocked(e, ReasonCrash)
		case !keep:
			stopped = p.stopLocked(e, "")
		case p.cfg.Retired != nil && p.cfg.Retired(e.key):
			stopped = p.stopLocked(e, ReasonRemoved)
		case p.slots-p.stoppingLocked() > p.cfg.MaxLive:
			// max_live was lowered while it ran.
			stopped = p.stopLocked(e, ReasonCapacity)
		default:
			if !c.borrowed {
				e.lastUsed = p.cfg.Now()
			}
			p.setLocked(e, ready)
		}
	}
	p.mu.Unlock()
	// The key passes on at once: its next turn waits for the reap itself.
	p.releaseKey(e)
	if stopped != nil {
		<-stopped
	}
}

func (p *Pool[S]) reaper() {
	defer p.wg.Done()
	p.mu.Lock()
	every := p.cfg.ReapInterval
	p.mu.Unlock()
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-p.closeCh:
			return
		case <-p.reapReset:
			p.mu.Lock()
			every = p.cfg.ReapInterval
			p.mu.Unlock()
			t.Reset(every)
		case <-t.C:
			p.ReapIdle()
		}
	}
}

// Limits are the pool's numbers a config reload may change.
type Limits struct {
	MaxLive      int
	IdleTimeout  time.Duration
	QueueLen     int
	QueueTimeout time.Duration
	YieldAfter   int
	Residency    residency.Policy // nil: the timer of IdleTimeout
}

// SetLimits puts new limits and residency policy in force at once: a lower
// MaxLive stops idle processes (the policy's victims, reason capacity)
// until the live ones fit, and busy ones over it when their turn ends; a higher one lets
// waiting turns take the new slots. A turn already waiting for a slot
// keeps the queue timeout it started with. Zero values take the defaults.
func (p *Pool[S]) SetLimits(l Limits) {
	c := Config{MaxLive: l.MaxLive, IdleTimeout: l.IdleTimeout, QueueLen: l.QueueLen, QueueTimeout: l.QueueTimeout, YieldAfter: l.YieldAfter}
	c.setDefaults()
	var stopped []<-chan struct{}
	p.mu.Lock()
	reap := p.reapAuto && p.cfg.IdleTimeout != c.IdleTimeout
	p.cfg.MaxLive, p.cfg.IdleTimeout, p.cfg.QueueLen, p.cfg.QueueTimeout, p.cfg.YieldAfter = c.MaxLive, c.IdleTimeout, c.QueueLen, c.QueueTimeout, c.YieldAfter
	if reap {
		p.cfg.ReapInterval = reapEvery(c.IdleTimeout)
	}
	p.cfg.Residency = l.Residency
	for over := p.slots - p.stoppingLocked() - p.cfg.MaxLive; over > 0 && !p.closed; over-- {
		_, v := p.evictLocked(ReasonCapacity)
		if v == nil {
			break
		}
		stopped = append(stopped, v)
	}
	p.signalSlotLocked()
	p.mu.Unlock()
	if reap {
		select {
		case p.reapReset <- struct{}{}:
		default:
		}
	}
	for _, ch := range stopped {
		<-ch
	}
}

// stoppingLocked counts the processes being stopped.
func (p *Pool[S]) stoppingLocked() int {
	n := 0
	for _, e := range p.entries {
		if e.state == stopping {
			n++
		}
	}
	return n
}

// Sweep stops the idle processes of the keys Config.Retired names (reason
// removed) and waits for them to be reaped; busy ones stop when their turn
// ends. It returns how many it stopped.
func (p *Pool[S]) Sweep() int {
	if p.cfg.Retired == nil {
		return 0
	}
	var stopped []<-chan struct{}
	p.mu.Lock()
	for _, e := range p.entries {
		if e.state == ready && !e.held && p.cfg.Retired(e.key) {
			stopped = append(stopped, p.stopLocked(e, ReasonRemoved))
		}
	}
	p.mu.Unlock()
	for _, ch := range stopped {
		<-ch
	}
	return len(stopped)
}

// ReapIdle stops every idle process the residency policy lets go (by
// default: idle for IdleTimeout), waits for them to be reaped and returns
// how many it stopped. The reaper calls it; tests call it with an injected
// clock.
func (p *Pool[S]) ReapIdle() int {
	now := p.cfg.Now()
	var stopped []<-chan struct{}
	p.mu.Lock()
	pol := p.policyLocked()
	for _, e := range p.idleLocked() {
		k := p.describeLocked(e)
		if expire, why := pol.Expire(now, k); expire {
			stopped = append(stopped, p.decideLocked(e, Decision{Reason: ReasonIdle, Policy: pol.Name(), Why: why, Key: k}))
		}
	}
	p.mu.Unlock()
	for _, ch := range stopped {
		<-ch
	}
	return len(stopped)
}

// Shed stops the idle process the residency policy picks as its victim,
// for reason r (the daemon's memory limit: ReasonMemory), and waits for its
// reap; it reports the key it stopped, and false when none was idle or the
// policy picked none.
func (p *Pool[S]) Shed(r Reason) (session.Key, bool) {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return session.Key{}, false
	}
	k, stopped := p.evictLocked(r)
	p.mu.Unlock()
	if stopped == nil {
		return session.Key{}, false
	}
	<-stopped
	return k, true
}

// Exclusive gives the caller sole access to key k: it waits for the key
// ahead of every turn queued for it, stops k's process (reason fresh) and
// returns with the key held, so no turn runs on k until release is called.
// queued, when not nil, runs once the request is in line, with the owner of
// the turn holding the key ("" if none): "start fresh" cancels that turn
// there. stopped reports whether there was a process to stop.
func (p *Pool[S]) Exclusive(ctx context.Context, k session.Key, queued func(holder string)) (release func(), stopped bool, err error) {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil, false, ErrClosed
	}
	e := p.entryLocked(k)
	var wait chan struct{}
	holder := ""
	if e.held {
		wait = make(chan struct{})
		e.excl = append(e.excl, wait)
		holder = e.holder
	} else {
		e.held = true
	}
	stopped = e.state != gone
	p.mu.Unlock()
	if queued != nil {
		queued(holder)
	}
	if wait != nil {
		select {
		case <-wait:
		case <-ctx.Done():
			p.mu.Lock()
			for i, x := range e.excl {
				if x == wait {
					e.excl = append(e.excl[:i], e.excl[i+1:]...)
					p.cleanupLocked(e)
					p.mu.Unlock()
					return nil, false, ctx.Err()
				}
			}
			p.mu.Unlock()
			p.releaseKey(e)
			return nil, false, ctx.Err()
		}
	}
	if _, err := p.settle(ctx, e, false, nil); err != nil {
		p.releaseKey(e)
		return nil, false, err
	}
	var once sync.Once
	return func() { once.Do(func() { p.releaseKey(e) }) }, stopped, nil
}

// Borrow takes key k's idle process for work of the daemon's own that is
// no turn (an idle compaction, a cache keep-alive), only when nothing waits
// for it: no turn holds or waits for the key, none waits for a slot, and
// the process neither works nor has died. Release gives it back with its
// last use as it was, so the policy's view of the key's idleness does not
// change; turns that come meanwhile wait for it as for any turn. False:
// not now.
func (p *Pool[S]) Borrow(k session.Key) (*Checkout[S], bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	e := p.entries[k]
	if p.closed || e == nil || e.state != ready || e.held || len(e.waiters) > 0 || len(e.excl) > 0 || len(p.slotQ) > 0 || dead(e.sess) {
		return nil, false
	}
	if idle, _ := idleSince(e); !idle {
		return nil, false
	}
	e.held, e.holder = true, ""
	p.setLocked(e, busy)
	return &Checkout[S]{Key: k, Session: e.sess, p: p, e: e, borrowed: true}, true
}

// Info describes one key's process for the sessions listing.
type Info struct {
	Key     session.Key
	Pid     int
	Native  string
	State   string // "idle", "busy" or "stopping"
	Idle    time.Duration
	Started time.Time
	Turns   map[string]int // by shape
	// Residency is what the policy knows of the process (Describe), and
	// Keep its current reason to keep it: the policy's Expire for an idle
	// one ("in a turn" for a busy one, "" for one stopping).
	Residency residency.Key
	Keep      string
}

// Sessions lists the processes alive now, sorted by key.
func (p *Pool[S]) Sessions() []Info {
	now := p.cfg.Now()
	p.mu.Lock()
	defer p.mu.Unlock()
	pol := p.policyLocked()
	var out []Info
	for _, e := range p.entries {
		if e.state != ready && e.state != busy && e.state != stopping {
			continue
		}
		in := Info{Key: e.key, Pid: e.sess.Pid(), Native: e.sess.Native(), State: e.state.String(), Started: e.started, Turns: map[string]int{}}
		if e.state == ready {
			in.Idle = now.Sub(e.lastUsed)
		}
		if e.state != stopping {
			in.Residency, in.Keep = p.describeLocked(e), "in a turn"
			if e.state == ready {
				_, in.Keep = pol.Expire(now, in.Residency)
			}
		}
		for _, s := range lease.Shapes {
			in.Turns[s.String()] = e.turns[s]
		}
		out = append(out, in)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Key.String() < out[j].Key.String() })
	return out
}

// Live reports processes alive, starting or stopping.
func (p *Pool[S]) Live() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.slots
}

// Busy reports processes starting or in a turn.
func (p *Pool[S]) Busy() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for _, e := range p.entries {
		if e.state == starting || e.state == busy {
			n++
		}
	}
	return n
}

// Queued reports turns waiting for a slot.
func (p *Pool[S]) Queued() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.slotQ)
}

// Close stops the reaper and every process, failing turns still waiting.
// Turns in flight see their process exit; callers cancel them first. Close
// is idempotent and returns once every process is reaped, including one
// that was still being spawned.
func (p *Pool[S]) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		p.wg.Wait()
		return nil
	}
	p.closed = true
	close(p.closeCh)
	for _, e := range p.entries {
		for _, w := range e.waiters {
			close(w.ch)
		}
		for _, w := range e.excl {
			close(w)
		}
		e.waiters, e.excl = nil, nil
		if e.state == ready || e.state == busy {
			p.stopLocked(e, ReasonShutdown)
		}
	}
	for _, w := range p.slotQ {
		select {
		case w.ch <- struct{}{}:
		default:
		}
	}
	p.mu.Unlock()
	p.wg.Wait()
	return nil
}

// keyWaiters reports turns queued behind the turn holding k.
func (p *Pool[S]) keyWaiters(k session.Key) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if e := p.entries[k]; e != nil {
		return len(e.waiters)
	}
	return 0
}

// Free reports whether a turn on k would start at once: no turn holds or
// waits for the key, and its process is idle, or a slot is free (or an
// idle process can be evicted for one) with nobody queued for slots. The
// answer may be stale as soon as it is given: a caller uses it as a hint.
func (p *Pool[S]) Free(k session.Key) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return false
	}
	e := p.entries[k]
	if e != nil && (e.held || len(e.waiters) > 0 || len(e.excl) > 0) {
		return false
	}
	if e != nil && e.state == ready {
		return true
	}
	if e != nil && e.state != gone || len(p.slotQ) > 0 {
		return false
	}
	return p.slots < p.cfg.MaxLive || !p.anyStoppingLocked() && len(p.idleLocked()) > 0
}
