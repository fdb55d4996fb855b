package pool

import (
	"context"
	"sync/atomic"
	"testing"

	"github.com/residentd/residentd/internal/lease"
	"github.com/residentd/residentd/internal/session"
)

// TestSetLimitsLowersMaxLiveAtOnce: a lower MaxLive stops idle processes,
// least recently used first, until the live ones fit, and a busy one over
// it when its turn ends; a higher one is used at once.
func TestSetLimitsLowersMaxLiveAtOnce(t *testing.T) {
	p, _, ev := newPool(t, Config{MaxLive: 3})
	cos := make([]*Checkout[*proc], 3)
	for i := range cos {
		cos[i] = acquire(t, p, key(i))
	}
	p.Release(cos[0], true)
	p.Release(cos[1], true) // most recently used of the idle ones
	p.SetLimits(Limits{MaxLive: 2})
	if got := ev.wait(t); got != key(0).String()+" capacity" {
		t.Fatalf("first stopped: %s, want the least recently used idle key", got)
	}
	p.SetLimits(Limits{MaxLive: 1})
	if got := ev.wait(t); got != key(1).String()+" capacity" {
		t.Fatalf("second stopped: %s", got)
	}
	if live := p.Live(); live != 1 {
		t.Fatalf("live %d after lowering max_live to 1 with one busy", live)
	}
	p.SetLimits(Limits{MaxLive: 2})
	co := acquire(t, p, key(3)) // a slot at once
	p.SetLimits(Limits{MaxLive: 1})
	p.Release(cos[2], true) // over the limit: stopped after its turn
	if got := ev.wait(t); got != key(2).String()+" capacity" {
		t.Fatalf("busy over the limit: %s, want stopped at its release", got)
	}
	p.Release(co, true)
	if live := p.Live(); live != 1 {
		t.Fatalf("live %d, want 1", live)
	}
}

// TestRetiredKeysStop: Sweep stops the idle processes of retired keys at
// once, and a busy one stops when its turn lets go; other keys keep theirs.
func TestRetiredKeysStop(t *testing.T) {
	var gone atomic.Bool
	retired := func(k session.Key) bool { return gone.Load() && k.Binding == "b" }
	sp := &spawner{t: t}
	ev := newEvictLog()
	p := New[*proc](Config{MaxLive: 3, OnEvict: ev.record, Retired: retired}, sp)
	t.Cleanup(func() { p.Close(); sp.wg.Wait() })
	other := session.Key{Channel: "ch-x", Binding: "other"}
	idle, busy, keep := acquire(t, p, key(0)), acquire(t, p, key(1)), acquire(t, p, other)
	p.Release(idle, true)
	p.Release(keep, true)
	pid := keep.Session.Pid()
	gone.Store(true)
	if n := p.Sweep(); n != 1 {
		t.Fatalf("Sweep stopped %d, want the 1 idle retired process", n)
	}
	if got := ev.wait(t); got != key(0).String()+" removed" {
		t.Fatalf("evicted %s", got)
	}
	p.Release(busy, true)
	if got := ev.wait(t); got != key(1).String()+" removed" {
		t.Fatalf("evicted %s, want the busy one at its release", got)
	}
	ss := p.Sessions()
	if len(ss) != 1 || ss[0].Key != other || ss[0].Pid != pid {
		t.Fatalf("sessions %+v, want only the other binding's, untouched", ss)
	}
}

// TestReuseRefusedReplaces: a turn whose Reuse refuses the key's idle
// process gets a new one (reason replaced); one that accepts it is warm.
func TestReuseRefusedReplaces(t *testing.T) {
	p, _, ev := newPool(t, Config{MaxLive: 1})
	co := acquire(t, p, key(0))
	old := co.Session.Pid()
	p.Release(co, true)
	co, err := p.Acquire(context.Background(), key(0), AcquireOptions{Reuse: func(Session) bool { return true }})
	if err != nil || co.Lease.Shape != lease.Warm || co.Session.Pid() != old {
		t.Fatalf("accepted reuse: %v shape %v pid %d, want warm %d", err, co.Lease.Shape, co.Session.Pid(), old)
	}
	p.Release(co, true)
	co, err = p.Acquire(context.Background(), key(0), AcquireOptions{Reuse: func(s Session) bool { return s.Pid() != old }})
	if err != nil || co.Lease.Shape == lease.Warm || co.Session.Pid() == old {
		t.Fatalf("refused reuse: %v shape %v pid %d, want a new process", err, co.Lease.Shape, co.Session.Pid())
	}
	if got := ev.wait(t); got != key(0).String()+" replaced" {
		t.Fatalf("evicted %s", got)
	}
	p.Release(co, true)
}
