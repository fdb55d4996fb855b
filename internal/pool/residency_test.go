package pool

import (
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/residentd/residentd/internal/lease"
	"github.com/residentd/residentd/internal/residency"
	"github.com/residentd/residentd/internal/session"
)

// byChannel is a residency policy for the tests: its victim is the idle
// key whose channel comes first in its order, and it lets go only the
// channels named in expire. It records what it was told.
type byChannel struct {
	mu     sync.Mutex
	order  []string
	expire map[string]bool
	told   []residency.Key
}

func (*byChannel) Name() string { return "by-channel" }

func (b *byChannel) Victim(_ time.Time, idle []residency.Key) residency.Choice {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.told = append(b.told, idle...)
	for _, ch := range b.order {
		for i, k := range idle {
			if k.Key.Channel == ch {
				return residency.Choice{Index: i, Reason: "first in order"}
			}
		}
	}
	return residency.Choice{Index: -1}
}

func (b *byChannel) Expire(_ time.Time, k residency.Key) (bool, string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.told = append(b.told, k)
	if b.expire[k.Key.Channel] {
		return true, "named to go"
	}
	return false, "not named"
}

func (b *byChannel) setExpire(chs ...string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.expire = map[string]bool{}
	for _, ch := range chs {
		b.expire[ch] = true
	}
}

// decisions records what OnDecide hears.
type decisions struct {
	mu  sync.Mutex
	got []Decision
}

func (d *decisions) record(x Decision) { d.mu.Lock(); d.got = append(d.got, x); d.mu.Unlock() }
func (d *decisions) list() []Decision {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]Decision(nil), d.got...)
}

// describer answers Describe with each key's context size from a table,
// and records the lastUsed it was given.
type describer struct {
	mu      sync.Mutex
	tokens  map[string]int64
	lastArg map[string]time.Time
}

func (d *describer) describe(k session.Key, s Session, lastUsed time.Time) residency.Key {
	d.mu.Lock()
	defer d.mu.Unlock()
	if s == nil || s.Pid() <= 0 {
		panic("Describe without the key's process")
	}
	d.lastArg[k.Channel] = lastUsed
	return residency.Key{LastUsed: lastUsed, ContextTokens: d.tokens[k.Channel]}
}

// TestPolicyPicksTheVictim: a new key that needs a slot evicts the policy's
// victim, not the least recently used; the decision names the policy, its
// reason and what Describe said of the key, and reaches OnDecide before
// OnEvict.
func TestPolicyPicksTheVictim(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	var mu sync.Mutex
	now := t0
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	advance := func(d time.Duration) { mu.Lock(); now = now.Add(d); mu.Unlock() }
	pol := &byChannel{order: []string{key(1).Channel, key(0).Channel}}
	desc := &describer{tokens: map[string]int64{key(1).Channel: 4242}, lastArg: map[string]time.Time{}}
	var dec decisions
	var order []string
	var omu sync.Mutex
	ev := newEvictLog()
	sp := &spawner{t: t}
	p := New[*proc](Config{MaxLive: 2, Now: clock, Residency: pol, Describe: desc.describe,
		OnDecide: func(d Decision) {
			dec.record(d)
			omu.Lock()
			order = append(order, "decide")
			omu.Unlock()
		},
		OnEvict: func(k session.Key, r Reason) {
			omu.Lock()
			order = append(order, "evict")
			omu.Unlock()
			ev.record(k, r)
		}}, sp)
	t.Cleanup(func() { p.Close(); sp.wg.Wait() })
	for i := range 2 {
		co := acquire(t, p, key(i))
		advance(time.Minute)
		p.Release(co, true)
	}
	// Key 0 is the least recently used; the policy names key 1.
	co := acquire(t, p, key(2))
	if got := ev.wait(t); got != key(1).String()+" capacity" {
		t.Fatalf("evicted %s, want the policy's victim %s", got, key(1))
	}
	p.Release(co, true)
	ds := dec.list()
	if len(ds) != 1 {
		t.Fatalf("decisions %+v, want one", ds)
	}
	d := ds[0]
	if d.Reason != ReasonCapacity || d.Policy != "by-channel" || d.Why != "first in order" || d.Key.Key != key(1) || d.Key.ContextTokens != 4242 || d.At != t0.Add(2*time.Minute) {
		t.Fatalf("decision %+v", d)
	}
	if !d.Key.LastUsed.Equal(t0.Add(2*time.Minute)) || d.Key.Working {
		t.Fatalf("told LastUsed %s working %v, want the end of key 1's turn", d.Key.LastUsed, d.Key.Working)
	}
	omu.Lock()
	if len(order) != 2 || order[0] != "decide" || order[1] != "evict" {
		t.Fatalf("callbacks in order %v, want decide then evict", order)
	}
	omu.Unlock()
}

// TestPolicyPicksNoneTheTurnWaits: a policy that picks no victim keeps
// every idle process; the new key's turn waits for a slot, and times out.
func TestPolicyPicksNoneTheTurnWaits(t *testing.T) {
	pol := &byChannel{}
	p, _, _ := newPool(t, Config{MaxLive: 1, Residency: pol, QueueTimeout: 50 * time.Millisecond})
	co := acquire(t, p, key(0))
	p.Release(co, true)
	if _, err := p.Acquire(t.Context(), key(1), AcquireOptions{}); !errors.Is(err, ErrQueueTimeout) {
		t.Fatal("a slot was freed though the policy picked no victim")
	}
	if ss := p.Sessions(); len(ss) != 1 || ss[0].Key != key(0) {
		t.Fatalf("sessions %+v, want key 0's idle process kept", ss)
	}
}

// TestReapAsksThePolicy: the reaper stops the idle processes the policy's
// Expire lets go, whatever IdleTimeout says, with its reason; the sessions
// listing shows its current reason to keep the others.
func TestReapAsksThePolicy(t *testing.T) {
	var mu sync.Mutex
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	pol := &byChannel{}
	var dec decisions
	p, _, ev := newPool(t, Config{MaxLive: 3, IdleTimeout: time.Minute, ReapInterval: time.Hour, Now: clock, Residency: pol, OnDecide: dec.record})
	busy := acquire(t, p, key(2))
	for i := range 2 {
		p.Release(acquire(t, p, key(i)), true)
	}
	mu.Lock()
	now = now.Add(time.Hour) // far past IdleTimeout: the policy decides
	mu.Unlock()
	if n := p.ReapIdle(); n != 0 {
		t.Fatalf("reaped %d the policy kept", n)
	}
	for _, in := range p.Sessions() {
		want := "not named"
		if in.Key == key(2) {
			want = "in a turn"
		}
		if in.Keep != want || in.Residency.Key != in.Key {
			t.Fatalf("listing %s: keep %q residency %+v, want %q", in.Key, in.Keep, in.Residency, want)
		}
	}
	pol.setExpire(key(1).Channel, key(2).Channel) // key 2 is busy: never asked
	if n := p.ReapIdle(); n != 1 {
		t.Fatalf("reaped %d, want key 1 alone", n)
	}
	if got := ev.wait(t); got != key(1).String()+" idle" {
		t.Fatalf("evicted %s", got)
	}
	if ds := dec.list(); len(ds) != 1 || ds[0].Reason != ReasonIdle || ds[0].Why != "named to go" || ds[0].Key.Key != key(1) {
		t.Fatalf("decisions %+v", ds)
	}
	p.Release(busy, true)
}

// TestDefaultPolicyIsTheTimer: with no policy the pool reaps by IdleTimeout,
// and follows a new IdleTimeout set by SetLimits; Describe, when given,
// hears each idle key with the time it was last used.
func TestDefaultPolicyIsTheTimer(t *testing.T) {
	var mu sync.Mutex
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	now := t0
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	advance := func(d time.Duration) { mu.Lock(); now = now.Add(d); mu.Unlock() }
	desc := &describer{lastArg: map[string]time.Time{}}
	var dec decisions
	p, _, ev := newPool(t, Config{IdleTimeout: 30 * time.Minute, ReapInterval: time.Hour, Now: clock, Describe: desc.describe, OnDecide: dec.record})
	p.Release(acquire(t, p, key(0)), true)
	advance(20 * time.Minute)
	if n := p.ReapIdle(); n != 0 {
		t.Fatalf("reaped %d before 30m", n)
	}
	desc.mu.Lock()
	if got := desc.lastArg[key(0).Channel]; !got.Equal(t0) {
		t.Fatalf("Describe heard lastUsed %s, want %s", got, t0)
	}
	desc.mu.Unlock()
	p.SetLimits(Limits{IdleTimeout: 10 * time.Minute})
	if n := p.ReapIdle(); n != 1 {
		t.Fatalf("reaped %d after lowering the idle timeout below the idle time", n)
	}
	if got := ev.wait(t); got != key(0).String()+" idle" {
		t.Fatalf("evicted %s", got)
	}
	if ds := dec.list(); len(ds) != 1 || ds[0].Policy != "timer" || ds[0].Why != "idle past 10m0s" {
		t.Fatalf("decisions %+v, want the timer's", ds)
	}
}

// TestSetLimitsSwapsThePolicy: a policy set by SetLimits chooses the next
// victims, here for a lower MaxLive; nil goes back to the timer's least
// recently used.
func TestSetLimitsSwapsThePolicy(t *testing.T) {
	p, _, ev := newPool(t, Config{MaxLive: 3})
	for i := range 3 {
		p.Release(acquire(t, p, key(i)), true)
	}
	pol := &byChannel{order: []string{key(2).Channel}}
	p.SetLimits(Limits{MaxLive: 2, Residency: pol})
	if got := ev.wait(t); got != key(2).String()+" capacity" {
		t.Fatalf("evicted %s, want the policy's victim", got)
	}
	p.SetLimits(Limits{MaxLive: 1})
	if got := ev.wait(t); got != key(0).String()+" capacity" {
		t.Fatalf("evicted %s, want the timer's least recently used", got)
	}
}

// TestShedStopsThePolicysVictim: Shed stops the policy's victim among the
// idle processes for the reason given, never a busy one, and says so when
// there is none.
func TestShedStopsThePolicysVictim(t *testing.T) {
	pol := &byChannel{order: []string{key(0).Channel, key(1).Channel}}
	var dec decisions
	p, _, ev := newPool(t, Config{MaxLive: 3, Residency: pol, OnDecide: dec.record})
	busy := acquire(t, p, key(0))
	p.Release(acquire(t, p, key(1)), true)
	k, ok := p.Shed(ReasonMemory)
	if !ok || k != key(1) {
		t.Fatalf("Shed: %s %v, want key 1 (key 0 is busy)", k, ok)
	}
	if got := ev.wait(t); got != key(1).String()+" memory" {
		t.Fatalf("evicted %s", got)
	}
	if p.Live() != 1 {
		t.Fatalf("live %d after Shed returned, want the victim reaped", p.Live())
	}
	if _, ok := p.Shed(ReasonMemory); ok {
		t.Fatal("Shed stopped a busy process")
	}
	if ds := dec.list(); len(ds) != 1 || ds[0].Reason != ReasonMemory || ds[0].Policy != "by-channel" {
		t.Fatalf("decisions %+v", ds)
	}
	p.Release(busy, true)
}

// TestBorrowKeepsTheLastUse: the daemon's own work on an idle process
// (Borrow) leaves its last use as it was, so the reaper lets it go when it
// would have; a turn that comes meanwhile waits and gets it warm; Borrow
// refuses a held key, a key with no process and any key while turns wait
// for a slot.
func TestBorrowKeepsTheLastUse(t *testing.T) {
	var mu sync.Mutex
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	advance := func(d time.Duration) { mu.Lock(); now = now.Add(d); mu.Unlock() }
	p, _, ev := newPool(t, Config{MaxLive: 2, IdleTimeout: 30 * time.Minute, ReapInterval: time.Hour, Now: clock})
	p.Release(acquire(t, p, key(0)), true)
	if _, ok := p.Borrow(key(1)); ok {
		t.Fatal("borrowed a key with no process")
	}
	advance(20 * time.Minute)
	b, ok := p.Borrow(key(0))
	if !ok || b.Session == nil {
		t.Fatal("could not borrow an idle process")
	}
	if _, ok := p.Borrow(key(0)); ok {
		t.Fatal("borrowed a key twice")
	}
	prompt(t, b) // the daemon's own prompt
	turn := start(t, p, key(0))
	turn.heard(t, Wait{Position: 1})
	turn.waiting(t)
	advance(5 * time.Minute)
	p.Release(b, true)
	co := turn.checkout(t)
	if co.Lease.Shape != lease.Warm {
		t.Fatalf("the turn that waited for the borrowed process: %s, want warm", co.Lease.Shape)
	}
	advance(time.Minute)
	p.Release(co, true) // the turn's end is the last use
	b, ok = p.Borrow(key(0))
	if !ok {
		t.Fatal("could not borrow again")
	}
	advance(10 * time.Minute)
	p.Release(b, true)
	advance(19 * time.Minute)
	if n := p.ReapIdle(); n != 0 {
		t.Fatalf("reaped %d 29 min after the turn's end: the borrow counted as a use", n)
	}
	advance(time.Minute)
	if n := p.ReapIdle(); n != 1 {
		t.Fatalf("reaped %d 30 min after the turn's end, want 1: the borrow moved the last use", n)
	}
	if got := ev.wait(t); got != key(0).String()+" idle" {
		t.Fatalf("evicted %s", got)
	}
	// Turns waiting for a slot: no borrowing, of an idle process (the
	// policy picks no victim, so it stays) or a busy one.
	p.SetLimits(Limits{MaxLive: 2, IdleTimeout: 30 * time.Minute, Residency: &byChannel{}})
	p.Release(acquire(t, p, key(1)), true)
	busy := acquire(t, p, key(3))
	waiting := start(t, p, key(2))
	waiting.heard(t, Wait{Slot: true, Position: 1})
	if _, ok := p.Borrow(key(1)); ok {
		t.Fatal("borrowed an idle process while a turn waits for a slot")
	}
	if _, ok := p.Borrow(key(3)); ok {
		t.Fatal("borrowed a busy key")
	}
	p.Release(busy, false) // stopped: its slot goes to the waiting turn
	p.Release(waiting.checkout(t), true)
}
