// Package pool owns the live agent processes: one per (channel, binding)
// key, at most MaxLive at once, reaped when idle, evicted least recently used
// when a new key needs a slot, never while a turn runs.
package pool

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/residentd/residentd/internal/lease"
	"github.com/residentd/residentd/internal/session"
)

// Reason says why a process left the pool.
type Reason string

const (
	ReasonIdle     Reason = "idle"     // idle longer than IdleTimeout
	ReasonCapacity Reason = "capacity" // least recently used when a new key needed a slot
	ReasonCrash    Reason = "crash"    // the process exited by itself
	ReasonFresh    Reason = "fresh"    // "start fresh" for the key
	ReasonShutdown Reason = "shutdown" // the daemon is stopping
)

// Reasons lists every eviction reason, for metrics that pre-create series.
var Reasons = []Reason{ReasonIdle, ReasonCapacity, ReasonCrash, ReasonFresh, ReasonShutdown}

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
	Close() error          // stops the process; idempotent
}

// Spawner starts the process for a key and returns its shape: lease.Cold for
// a new native session, lease.Restored for a reloaded one.
type Spawner[S Session] interface {
	Spawn(ctx context.Context, k session.Key) (S, lease.Shape, error)
}

// Config holds the pool's limits. Zero values take the defaults.
type Config struct {
	MaxLive      int           // live processes at once; default 4
	IdleTimeout  time.Duration // default 30m
	ReapInterval time.Duration // how often the reaper looks; default IdleTimeout/10, at most 1m
	QueueLen     int           // turns waiting for a slot; default 64
	QueueTimeout time.Duration // longest wait for a slot; default 2m
	Now          func() time.Time
	// OnEvict is called (outside the pool's lock) for every process that
	// leaves the pool, with the reason.
	OnEvict func(k session.Key, reason Reason)
}

func (c *Config) setDefaults() {
	if c.MaxLive <= 0 {
		c.MaxLive = 4
	}
	if c.IdleTimeout <= 0 {
		c.IdleTimeout = 30 * time.Minute
	}
	if c.ReapInterval <= 0 {
		c.ReapInterval = min(c.IdleTimeout/10, time.Minute)
	}
	if c.QueueLen <= 0 {
		c.QueueLen = 64
	}
	if c.QueueTimeout <= 0 {
		c.QueueTimeout = 2 * time.Minute
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.OnEvict == nil {
		c.OnEvict = func(session.Key, Reason) {}
	}
}

// entry is one key's state. All fields are guarded by Pool.mu.
type entry[S Session] struct {
	key      session.Key
	sess     S
	live     bool // sess is set and running
	held     bool // a turn holds the key (at most one at a time)
	waiters  []chan struct{}
	lastUsed time.Time
	started  time.Time
	// onFresh holds "start fresh" requests that arrived while a turn held
	// the key: the process is dropped and each runs when it lets go.
	onFresh []func()
	turns   [3]int
}

// Pool keeps the live processes. Create it with New; stop it with Close,
// which stops the reaper and every process.
type Pool[S Session] struct {
	cfg   Config
	spawn Spawner[S]

	mu       sync.Mutex // guards everything below
	entries  map[session.Key]*entry[S]
	slots    int             // live plus starting processes
	starting int             // processes being spawned
	slotQ    []chan struct{} // turns waiting for a slot, FIFO
	closed   bool
	closeCh  chan struct{}

	wg sync.WaitGroup // reaper and per-process watchers
}

// New returns a pool and starts its idle reaper; Close stops it.
func New[S Session](cfg Config, sp Spawner[S]) *Pool[S] {
	cfg.setDefaults()
	p := &Pool[S]{cfg: cfg, spawn: sp, entries: make(map[session.Key]*entry[S]), closeCh: make(chan struct{})}
	p.wg.Add(1)
	go p.reaper()
	return p
}

// Checkout is one turn's hold on a key's process. Call Release exactly once.
type Checkout[S Session] struct {
	Key     session.Key
	Session S
	Lease   *lease.Lease
	Waited  time.Duration // time spent waiting for the key and a slot

	p        *Pool[S]
	e        *entry[S]
	released bool
}

// Acquire waits for the key (turns on one key run one at a time, in arrival
// order) and for a slot, then returns the key's process: warm when it was
// alive, otherwise newly spawned (cold or restored).
func (p *Pool[S]) Acquire(ctx context.Context, k session.Key) (*Checkout[S], error) {
	start := p.cfg.Now()
	e, err := p.holdKey(ctx, k)
	if err != nil {
		return nil, err
	}
	p.mu.Lock()
	if e.live {
		select {
		case <-e.sess.Done():
			// Died while idle and its watcher has not run yet: drop it here.
			p.dropLocked(e)
			p.mu.Unlock()
			p.cfg.OnEvict(k, ReasonCrash)
			p.mu.Lock()
		default:
		}
	}
	if e.live {
		e.turns[lease.Warm]++
		sess := e.sess
		p.mu.Unlock()
		return &Checkout[S]{Key: k, Session: sess, Lease: lease.New(lease.Warm, sess.Native()), Waited: p.cfg.Now().Sub(start), p: p, e: e}, nil
	}
	p.mu.Unlock()

	if err := p.takeSlot(ctx, k); err != nil {
		p.releaseKey(e)
		return nil, err
	}
	// takeSlot counted this spawn in p.wg, so Close waits for it; on success
	// the count passes to the process's watcher.
	sess, shape, err := p.spawn.Spawn(ctx, k)
	p.mu.Lock()
	p.starting--
	if err != nil {
		p.slots--
		p.signalSlotLocked()
		p.mu.Unlock()
		p.wg.Done()
		p.releaseKey(e)
		return nil, fmt.Errorf("pool: spawn binding %q for channel %q: %w", k.Binding, k.Channel, err)
	}
	now := p.cfg.Now()
	e.sess, e.live, e.started, e.lastUsed = sess, true, now, now
	e.turns[shape]++
	if p.closed {
		// Close ran while we spawned: this process was never counted live.
		p.dropLocked(e)
		p.mu.Unlock()
		sess.Close()
		p.cfg.OnEvict(k, ReasonShutdown)
		p.wg.Done()
		p.releaseKey(e)
		return nil, ErrClosed
	}
	p.mu.Unlock()
	go p.watch(e, sess)
	return &Checkout[S]{Key: k, Session: sess, Lease: lease.New(shape, sess.Native()), Waited: now.Sub(start), p: p, e: e}, nil
}

// holdKey waits until this caller holds k.
func (p *Pool[S]) holdKey(ctx context.Context, k session.Key) (*entry[S], error) {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil, ErrClosed
	}
	e := p.entries[k]
	if e == nil {
		e = &entry[S]{key: k}
		p.entries[k] = e
	}
	if !e.held {
		e.held = true
		p.mu.Unlock()
		return e, nil
	}
	ch := make(chan struct{})
	e.waiters = append(e.waiters, ch)
	p.mu.Unlock()
	select {
	case <-ch:
		// The releaser handed us the key; it also fails waiters on close.
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
		for i, w := range e.waiters {
			if w == ch {
				e.waiters = append(e.waiters[:i], e.waiters[i+1:]...)
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

// releaseKey carries out "start fresh" requests made while the key was
// held, then hands k to its next waiter, or frees it. Every way a turn lets
// go of a key passes here, so no request is lost and none runs while a turn
// could still write to what it resets.
func (p *Pool[S]) releaseKey(e *entry[S]) {
	p.mu.Lock()
	pending := e.onFresh
	e.onFresh = nil
	var victim S
	drop := len(pending) > 0 && e.live
	if drop {
		victim = e.sess
		p.dropLocked(e)
	}
	p.mu.Unlock()
	if drop {
		victim.Close()
		p.cfg.OnEvict(e.key, ReasonFresh)
	}
	for _, f := range pending {
		f()
	}
	p.mu.Lock()
	if len(e.waiters) > 0 {
		next := e.waiters[0]
		e.waiters = e.waiters[1:]
		close(next)
		p.mu.Unlock()
		return
	}
	e.held = false
	if !e.live && p.entries[e.key] == e {
		delete(p.entries, e.key)
	}
	p.signalSlotLocked()
	p.mu.Unlock()
}

// takeSlot reserves room for one more process, evicting the least recently
// used idle process when every slot is taken, or waiting in FIFO order.
func (p *Pool[S]) takeSlot(ctx context.Context, k session.Key) error {
	var me chan struct{}
	var timeout <-chan time.Time
	for {
		p.mu.Lock()
		if p.closed {
			p.removeSlotWaiterLocked(me)
			p.mu.Unlock()
			return ErrClosed
		}
		first := len(p.slotQ) == 0 || (me != nil && p.slotQ[0] == me)
		if first {
			if p.slots < p.cfg.MaxLive {
				p.slots++
				p.starting++
				p.wg.Add(1) // Close waits for the spawn; see Acquire
				p.removeSlotWaiterLocked(me)
				p.signalSlotLocked()
				p.mu.Unlock()
				return nil
			}
			if v := p.lruIdleLocked(); v != nil {
				victim := v.sess
				p.dropLocked(v)
				delete(p.entries, v.key)
				p.slots++ // dropLocked freed the victim's slot; take it over
				p.starting++
				p.wg.Add(1) // Close waits for the spawn; see Acquire
				p.removeSlotWaiterLocked(me)
				p.signalSlotLocked()
				p.mu.Unlock()
				// The slot is ours only once the victim is gone: never more
				// than MaxLive processes at once.
				victim.Close()
				<-victim.Done()
				p.cfg.OnEvict(v.key, ReasonCapacity)
				return nil
			}
		}
		if me == nil {
			if len(p.slotQ) >= p.cfg.QueueLen {
				p.mu.Unlock()
				return fmt.Errorf("%w (%d waiting); try again later or raise max_live", ErrQueueFull, p.cfg.QueueLen)
			}
			me = make(chan struct{}, 1)
			p.slotQ = append(p.slotQ, me)
			t := time.NewTimer(p.cfg.QueueTimeout)
			defer t.Stop()
			timeout = t.C
		}
		p.mu.Unlock()
		select {
		case <-me:
		case <-timeout:
			p.mu.Lock()
			p.removeSlotWaiterLocked(me)
			p.signalSlotLocked()
			p.mu.Unlock()
			return fmt.Errorf("%w (%s) for channel %q; try again later or raise max_live", ErrQueueTimeout, p.cfg.QueueTimeout, k.Channel)
		case <-ctx.Done():
			p.mu.Lock()
			p.removeSlotWaiterLocked(me)
			p.signalSlotLocked()
			p.mu.Unlock()
			return ctx.Err()
		}
	}
}

func (p *Pool[S]) removeSlotWaiterLocked(me chan struct{}) {
	if me == nil {
		return
	}
	for i, w := range p.slotQ {
		if w == me {
			p.slotQ = append(p.slotQ[:i], p.slotQ[i+1:]...)
			return
		}
	}
}

// signalSlotLocked wakes the head of the slot queue to look again.
func (p *Pool[S]) signalSlotLocked() {
	if len(p.slotQ) > 0 {
		select {
		case p.slotQ[0] <- struct{}{}:
		default:
		}
	}
}

// lruIdleLocked returns the least recently used process no turn holds.
func (p *Pool[S]) lruIdleLocked() *entry[S] {
	var best *entry[S]
	for _, e := range p.entries {
		if e.live && !e.held && (best == nil || e.lastUsed.Before(best.lastUsed)) {
			best = e
		}
	}
	return best
}

// dropLocked detaches e's process from the pool and frees its slot, waking
// the head of the slot queue: whatever happens to the key next (a waiter for
// it may take it over), the slot itself is free now.
func (p *Pool[S]) dropLocked(e *entry[S]) {
	var zero S
	e.sess, e.live = zero, false
	p.slots--
	p.signalSlotLocked()
}

// Release ends a turn. keep=false stops the process (bindings that start
// fresh every turn); a process that died during the turn is dropped either
// way and counted as a crash.
func (p *Pool[S]) Release(c *Checkout[S], keep bool) {
	if c.released {
		return
	}
	c.released = true
	e := c.e
	var victim S
	var reason Reason
	stop := false
	p.mu.Lock()
	if e.live {
		dead := false
		select {
		case <-e.sess.Done():
			dead = true
		default:
		}
		switch {
		case p.closed:
			// Close already stopped it and counted it as a shutdown.
			victim, stop = e.sess, true
		case dead:
			victim, reason, stop = e.sess, ReasonCrash, true
		case !keep:
			victim, stop = e.sess, true
		default:
			e.lastUsed = p.cfg.Now()
		}
		if stop {
			p.dropLocked(e)
		}
	}
	p.mu.Unlock()
	if stop {
		victim.Close()
		if reason != "" {
			p.cfg.OnEvict(e.key, reason)
		}
	}
	p.releaseKey(e)
}

// watch drops a process that exits on its own.
func (p *Pool[S]) watch(e *entry[S], s S) {
	defer p.wg.Done()
	<-s.Done()
	p.mu.Lock()
	mine := e.live && !e.held && p.entries[e.key] == e && sameSession(e.sess, s)
	if mine {
		p.dropLocked(e)
		delete(p.entries, e.key)
		p.signalSlotLocked()
	}
	p.mu.Unlock()
	if mine {
		p.cfg.OnEvict(e.key, ReasonCrash)
	}
}

func sameSession[S Session](a, b S) bool { return any(a) == any(b) }

func (p *Pool[S]) reaper() {
	defer p.wg.Done()
	t := time.NewTicker(p.cfg.ReapInterval)
	defer t.Stop()
	for {
		select {
		case <-p.closeCh:
			return
		case <-t.C:
			p.ReapIdle()
		}
	}
}

// ReapIdle stops every process idle for longer than IdleTimeout and returns
// how many it stopped. The reaper calls it; tests call it with an injected
// clock.
func (p *Pool[S]) ReapIdle() int {
	now := p.cfg.Now()
	var victims []*entry[S]
	var sessions []S
	p.mu.Lock()
	for _, e := range p.entries {
		if e.live && !e.held && now.Sub(e.lastUsed) >= p.cfg.IdleTimeout {
			victims = append(victims, e)
			sessions = append(sessions, e.sess)
			p.dropLocked(e)
			delete(p.entries, e.key)
		}
	}
	if len(victims) > 0 {
		p.signalSlotLocked()
	}
	p.mu.Unlock()
	for i, e := range victims {
		sessions[i].Close()
		p.cfg.OnEvict(e.key, ReasonIdle)
	}
	return len(victims)
}

// Fresh starts k over: it drops k's process and calls reset (which wipes
// what the key's sessions have stored) while no turn can run on k. When a
// turn holds k, both happen as that turn lets go of the key, after it has
// written its results; otherwise Fresh takes the key itself and does them
// now. It reports whether there was a process, or a turn starting one.
func (p *Pool[S]) Fresh(k session.Key, reset func()) bool {
	p.mu.Lock()
	e := p.entries[k]
	if e != nil && e.held {
		e.onFresh = append(e.onFresh, reset)
		p.mu.Unlock()
		return true
	}
	had := e != nil && e.live
	if e == nil {
		e = &entry[S]{key: k}
		p.entries[k] = e
	}
	e.held = true
	e.onFresh = append(e.onFresh, reset)
	p.mu.Unlock()
	p.releaseKey(e)
	return had
}

// Info describes one key's process for the sessions listing.
type Info struct {
	Key     session.Key
	Pid     int
	Native  string
	State   string // "idle" or "busy"
	Idle    time.Duration
	Started time.Time
	Turns   map[string]int // by shape
}

// Sessions lists the live processes, sorted by key.
func (p *Pool[S]) Sessions() []Info {
	now := p.cfg.Now()
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []Info
	for _, e := range p.entries {
		if !e.live {
			continue
		}
		in := Info{Key: e.key, Pid: e.sess.Pid(), Native: e.sess.Native(), State: "idle", Started: e.started, Turns: map[string]int{}}
		if e.held {
			in.State = "busy"
		} else {
			in.Idle = now.Sub(e.lastUsed)
		}
		for _, s := range lease.Shapes {
			in.Turns[s.String()] = e.turns[s]
		}
		out = append(out, in)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Key.String() < out[j].Key.String() })
	return out
}

// Live reports processes alive or starting.
func (p *Pool[S]) Live() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.slots
}

// Busy reports processes in a turn.
func (p *Pool[S]) Busy() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := p.starting
	for _, e := range p.entries {
		if e.live && e.held {
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
	var victims []*entry[S]
	var sessions []S
	for _, e := range p.entries {
		for _, w := range e.waiters {
			close(w)
		}
		e.waiters = nil
		if e.live {
			victims = append(victims, e)
			sessions = append(sessions, e.sess)
			if !e.held {
				p.dropLocked(e)
			}
		}
	}
	for _, w := range p.slotQ {
		select {
		case w <- struct{}{}:
		default:
		}
	}
	p.mu.Unlock()
	var wg sync.WaitGroup
	for i := range sessions {
		wg.Add(1)
		go func(s S, k session.Key) {
			defer wg.Done()
			s.Close()
			p.cfg.OnEvict(k, ReasonShutdown)
		}(sessions[i], victims[i].key)
	}
	wg.Wait()
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
