package pool

import (
	"context"
	"errors"
	"fmt"
	"os"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/residentd/residentd/internal/acp"
	"github.com/residentd/residentd/internal/lease"
	"github.com/residentd/residentd/internal/session"
	"github.com/residentd/residentd/internal/testkit"
)

// The test binary doubles as the built-in agent: every pool test supervises
// real child processes.
func TestMain(m *testing.M) { testkit.Main(m) }

type proc struct {
	a      *acp.Agent
	native string
}

func (p *proc) Native() string        { return p.native }
func (p *proc) Pid() int              { return p.a.Pid() }
func (p *proc) Done() <-chan struct{} { return p.a.Done() }
func (p *proc) Close() error          { return p.a.Close() }

// spawner starts the built-in agent and tracks how many run at once.
type spawner struct {
	t  *testing.T
	mu sync.Mutex
	// live counts processes between spawn and reap; peak is its maximum.
	live, peak, spawned int
	wg                  sync.WaitGroup
}

func (s *spawner) Spawn(ctx context.Context, k session.Key, exited func()) (*proc, lease.Shape, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, lease.Cold, err
	}
	a, err := acp.Start(ctx, acp.Spec{
		Command: exe, Args: []string{"agent"}, Env: []string{"RESIDENTD_TEST_AGENT=1"},
		Dir: s.t.TempDir(), Grace: 2 * time.Second,
	}, zap.NewNop())
	if err != nil {
		return nil, lease.Cold, err
	}
	s.mu.Lock()
	s.live++
	s.spawned++
	s.peak = max(s.peak, s.live)
	s.mu.Unlock()
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		<-a.Done()
		s.mu.Lock()
		s.live--
		s.mu.Unlock()
		exited()
	}()
	native, err := a.NewSession(ctx)
	if err != nil {
		a.Close()
		return nil, lease.Cold, err
	}
	return &proc{a: a, native: native}, lease.Cold, nil
}

func (s *spawner) counts() (live, peak, spawned int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.live, s.peak, s.spawned
}

// evictLog records evictions and lets a test wait for one.
type evictLog struct {
	mu  sync.Mutex
	got []string
	ch  chan string
}

func newEvictLog() *evictLog { return &evictLog{ch: make(chan string, 64)} }

func (e *evictLog) record(k session.Key, r Reason) {
	s := k.String() + " " + string(r)
	e.mu.Lock()
	e.got = append(e.got, s)
	e.mu.Unlock()
	e.ch <- s
}

func (e *evictLog) wait(t *testing.T) string {
	t.Helper()
	select {
	case s := <-e.ch:
		return s
	case <-time.After(20 * time.Second):
		t.Fatal("no eviction reported")
		return ""
	}
}

func newPool(t *testing.T, cfg Config) (*Pool[*proc], *spawner, *evictLog) {
	t.Helper()
	sp := &spawner{t: t}
	ev := newEvictLog()
	cfg.OnEvict = ev.record
	p := New[*proc](cfg, sp)
	t.Cleanup(func() {
		p.Close()
		sp.wg.Wait()
	})
	return p, sp, ev
}

func key(i int) session.Key { return session.Key{Channel: fmt.Sprintf("ch-%d", i), Binding: "b"} }

func acquire(t *testing.T, p *Pool[*proc], k session.Key) *Checkout[*proc] {
	t.Helper()
	co, err := p.Acquire(context.Background(), k, AcquireOptions{})
	if err != nil {
		t.Fatalf("Acquire %s: %v", k, err)
	}
	return co
}

// prompt runs a real turn on a checkout.
func prompt(t *testing.T, co *Checkout[*proc]) string {
	t.Helper()
	res, err := co.Session.a.Prompt(context.Background(), co.Session.native, "User: hello", nil)
	if err != nil {
		t.Fatalf("prompt %s: %v", co.Key, err)
	}
	return res.Text
}

// waitFor polls an external condition (a queue length, a process state).
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	testkit.WaitFor(t, 20*time.Second, cond, testkit.Waiting("%s", what))
}

func TestCapOfFourUnderConcurrentTurnsOnSixKeys(t *testing.T) {
	p, sp, _ := newPool(t, Config{MaxLive: 4})
	var wg sync.WaitGroup
	release := make(chan struct{})
	acquired := make(chan session.Key, 6)
	errs := make(chan error, 6)
	for i := 0; i < 6; i++ {
		wg.Add(1)
		go func(k session.Key) {
			defer wg.Done()
			co, err := p.Acquire(context.Background(), k, AcquireOptions{})
			if err != nil {
				errs <- err
				return
			}
			acquired <- k
			if _, err := co.Session.a.Prompt(context.Background(), co.Session.native, "User: hi", nil); err != nil {
				errs <- err
			}
			<-release
			p.Release(co, true)
		}(key(i))
	}
	// Four get a slot, two wait in the queue: all four slots are busy.
	for i := 0; i < 4; i++ {
		<-acquired
	}
	waitFor(t, "two queued turns", func() bool { return p.Queued() == 2 })
	if live, _, _ := sp.counts(); live != 4 || p.Live() != 4 || p.Busy() != 4 {
		t.Fatalf("live %d (pool %d), busy %d; want 4, 4", live, p.Live(), p.Busy())
	}
	close(release)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	_, peak, spawned := sp.counts()
	if peak > 4 {
		t.Fatalf("peak live processes = %d, cap is 4", peak)
	}
	if spawned != 6 {
		t.Fatalf("spawned %d processes, want 6", spawned)
	}
}

func TestLRUEvictionOfIdleProcessNeverMidTurn(t *testing.T) {
	p, _, ev := newPool(t, Config{MaxLive: 3})
	busy := acquire(t, p, key(0)) // oldest, but in a turn
	for i := 1; i <= 2; i++ {
		co := acquire(t, p, key(i))
		prompt(t, co)
		p.Release(co, true)
	}
	// Touch key 2 again so key 1 is the least recently used idle one.
	co := acquire(t, p, key(2))
	p.Release(co, true)

	co = acquire(t, p, key(3))
	if got := ev.wait(t); got != key(1).String()+" capacity" {
		t.Fatalf("evicted %q, want %s capacity (LRU idle; key 0 is mid-turn)", got, key(1))
	}
	if co.Lease.Shape != lease.Cold {
		t.Fatalf("new key shape %s, want cold", co.Lease.Shape)
	}
	prompt(t, busy) // the busy process was never touched
	p.Release(busy, true)
	p.Release(co, true)
	if p.Live() != 3 {
		t.Fatalf("live = %d, want 3", p.Live())
	}
}

func TestWarmReuseAndQueueTimeout(t *testing.T) {
	p, _, _ := newPool(t, Config{MaxLive: 1, QueueTimeout: 50 * time.Millisecond, QueueLen: 1})
	co := acquire(t, p, key(0))
	p.Release(co, true)
	co = acquire(t, p, key(0))
	if co.Lease.Shape != lease.Warm {
		t.Fatalf("second turn on a live key: %s, want warm", co.Lease.Shape)
	}
	// The only slot is busy: a queued turn times out.
	if _, err := p.Acquire(context.Background(), key(1), AcquireOptions{}); !errors.Is(err, ErrQueueTimeout) {
		t.Fatalf("queued turn: %v, want ErrQueueTimeout", err)
	}
	p.Release(co, true)
}

// The queue's length is checked apart from its timeout, which is long here:
// on a loaded machine a short one could time the queued turn out before the
// third key asks, or run out while an evicted process is reaped.
func TestQueueFull(t *testing.T) {
	p, _, _ := newPool(t, Config{MaxLive: 1, QueueTimeout: time.Minute, QueueLen: 1})
	co := acquire(t, p, key(0))
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		_, err := p.Acquire(ctx, key(1), AcquireOptions{})
		errc <- err
	}()
	waitFor(t, "one queued turn", func() bool { return p.Queued() == 1 })
	if _, err := p.Acquire(context.Background(), key(2), AcquireOptions{}); !errors.Is(err, ErrQueueFull) {
		t.Fatalf("third key with a full queue: %v, want ErrQueueFull", err)
	}
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled queued turn: %v, want context.Canceled", err)
	}
	p.Release(co, true)
	co = acquire(t, p, key(1)) // capacity eviction of key 0 now it is idle
	p.Release(co, true)
}

func TestIdleReaperWithInjectedClock(t *testing.T) {
	var mu sync.Mutex
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	advance := func(d time.Duration) { mu.Lock(); now = now.Add(d); mu.Unlock() }
	p, _, ev := newPool(t, Config{IdleTimeout: 30 * time.Minute, ReapInterval: time.Hour, Now: clock})
	a := acquire(t, p, key(0))
	pid := a.Session.Pid()
	p.Release(a, true)
	b := acquire(t, p, key(1)) // busy: never reaped
	advance(29 * time.Minute)
	if n := p.ReapIdle(); n != 0 {
		t.Fatalf("reaped %d before the idle timeout", n)
	}
	advance(2 * time.Minute)
	if n := p.ReapIdle(); n != 1 {
		t.Fatalf("reaped %d, want 1 (the busy one stays)", n)
	}
	if got := ev.wait(t); got != key(0).String()+" idle" {
		t.Fatalf("eviction %q", got)
	}
	waitFor(t, "reaped process gone", func() bool { return syscall.Kill(pid, 0) == syscall.ESRCH })
	p.Release(b, true)
	if co := acquire(t, p, key(0)); co.Lease.Shape != lease.Cold {
		t.Fatalf("turn after reap: %s, want cold", co.Lease.Shape)
	} else {
		p.Release(co, true)
	}
}

func TestIdleReaperRunsOnItsOwn(t *testing.T) {
	p, _, ev := newPool(t, Config{IdleTimeout: 20 * time.Millisecond, ReapInterval: 5 * time.Millisecond})
	co := acquire(t, p, key(0))
	p.Release(co, true)
	if got := ev.wait(t); got != key(0).String()+" idle" {
		t.Fatalf("eviction %q", got)
	}
}

func TestSameKeyTurnsRunInArrivalOrder(t *testing.T) {
	p, _, _ := newPool(t, Config{})
	first := acquire(t, p, key(0))
	const n = 6
	var mu sync.Mutex
	var order []int
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			co, err := p.Acquire(context.Background(), key(0), AcquireOptions{})
			if err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			order = append(order, i)
			mu.Unlock()
			p.Release(co, true)
		}(i)
		// Arrival order is the order the waiters queue up.
		waitFor(t, "waiter queued", func() bool { return p.keyWaiters(key(0)) == i+1 })
	}
	p.Release(first, true)
	wg.Wait()
	for i, got := range order {
		if got != i {
			t.Fatalf("turns ran in order %v, want 0..%d", order, n-1)
		}
	}
}

func TestKilledAgentGivesColdNextTurn(t *testing.T) {
	p, _, ev := newPool(t, Config{})
	co := acquire(t, p, key(0))
	first := co.Session.Native()
	pid := co.Session.Pid()
	p.Release(co, true)
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if got := ev.wait(t); got != key(0).String()+" crash" {
		t.Fatalf("eviction %q, want crash", got)
	}
	co = acquire(t, p, key(0))
	defer p.Release(co, true)
	if co.Lease.Shape != lease.Cold || co.Session.Native() == first {
		t.Fatalf("after a crash: shape %s native %s (old %s)", co.Lease.Shape, co.Session.Native(), first)
	}
}

func TestCrashMidTurnIsDroppedOnRelease(t *testing.T) {
	p, _, ev := newPool(t, Config{})
	co := acquire(t, p, key(0))
	syscall.Kill(co.Session.Pid(), syscall.SIGKILL)
	<-co.Session.Done()
	p.Release(co, true)
	if got := ev.wait(t); got != key(0).String()+" crash" {
		t.Fatalf("eviction %q, want crash", got)
	}
	if p.Live() != 0 {
		t.Fatalf("live = %d after the only process crashed", p.Live())
	}
}

func TestExclusiveDropsProcessNowOrAfterTheTurn(t *testing.T) {
	p, _, ev := newPool(t, Config{})
	resets := 0
	// reset stands for the daemon's store wipe: it runs while the caller
	// holds the key, so never while a turn does.
	fresh := func(k session.Key) bool {
		t.Helper()
		release, stopped, err := p.Exclusive(context.Background(), k, nil)
		if err != nil {
			t.Fatalf("Exclusive %s: %v", k, err)
		}
		resets++
		release()
		release() // idempotent
		return stopped
	}
	co := acquire(t, p, key(0))
	p.Release(co, true)
	if !fresh(key(0)) {
		t.Fatal("Exclusive found no process")
	}
	if got := ev.wait(t); got != key(0).String()+" fresh" || resets != 1 {
		t.Fatalf("eviction %q, %d resets; want a fresh eviction and the reset done", got, resets)
	}
	if p.Live() != 0 {
		t.Fatalf("%d processes live after Exclusive returned", p.Live())
	}
	co = acquire(t, p, key(0))
	if co.Lease.Shape != lease.Cold {
		t.Fatalf("turn after Exclusive: %s, want cold", co.Lease.Shape)
	}
	// Behind a busy key the request waits, is told who holds the key, and
	// goes ahead of a turn that queued before it.
	holders := make(chan string, 1)
	done := make(chan bool, 1)
	order := make(chan string, 2)
	go func() {
		co, err := p.Acquire(context.Background(), key(0), AcquireOptions{Owner: "later-turn"})
		if err != nil {
			t.Error(err)
			return
		}
		order <- "turn"
		p.Release(co, true)
	}()
	waitFor(t, "a turn queued for key 0", func() bool { return p.keyWaiters(key(0)) == 1 })
	go func() {
		release, stopped, err := p.Exclusive(context.Background(), key(0), func(h string) { holders <- h })
		if err != nil {
			t.Error(err)
			return
		}
		order <- "exclusive"
		resets++
		release()
		done <- stopped
	}()
	if h := <-holders; h != "" {
		t.Fatalf("holder %q, want the anonymous acquire", h)
	}
	prompt(t, co) // still usable until the turn ends
	if resets != 1 {
		t.Fatal("the reset ran while a turn held the key")
	}
	p.Release(co, true)
	if !<-done {
		t.Fatal("Exclusive on a busy key found no process")
	}
	if got := ev.wait(t); got != key(0).String()+" fresh" || resets != 2 {
		t.Fatalf("eviction %q, %d resets; want the process dropped and the reset done as the turn let go", got, resets)
	}
	if first, second := <-order, <-order; first != "exclusive" || second != "turn" {
		t.Fatalf("ran %s then %s; the exclusive request must go first", first, second)
	}
	if fresh(key(9)) || resets != 3 {
		t.Fatalf("Exclusive on an unknown key: reported a process, or did not reset (%d)", resets)
	}
}

// An exclusive request made while a turn is still spawning its process
// waits for that turn to end, then drops the new process.
func TestExclusiveDuringSpawnRunsWhenTheTurnLetsGo(t *testing.T) {
	sp := &gatedSpawner{spawner: &spawner{t: t}, entered: make(chan struct{}, 1), release: make(chan struct{}), got: make(chan *proc, 1)}
	ev := newEvictLog()
	p := New[*proc](Config{OnEvict: ev.record}, sp)
	t.Cleanup(func() {
		p.Close()
		sp.wg.Wait()
	})
	acq := make(chan *Checkout[*proc], 1)
	go func() {
		co, err := p.Acquire(context.Background(), key(0), AcquireOptions{Owner: "spawning"})
		if err != nil {
			t.Errorf("Acquire: %v", err)
		}
		acq <- co
	}()
	<-sp.entered
	var resets atomic.Int32
	holder := make(chan string, 1)
	excl := make(chan bool, 1)
	go func() {
		release, stopped, err := p.Exclusive(context.Background(), key(0), func(h string) { holder <- h })
		if err != nil {
			t.Error(err)
		}
		resets.Add(1)
		release()
		excl <- stopped
	}()
	if h := <-holder; h != "spawning" {
		t.Fatalf("holder %q, want the spawning turn", h)
	}
	close(sp.release)
	co := <-acq
	<-sp.got
	if resets.Load() != 0 {
		t.Fatal("the reset ran before the turn ended")
	}
	p.Release(co, true)
	<-excl
	if got := ev.wait(t); got != key(0).String()+" fresh" || resets.Load() != 1 {
		t.Fatalf("eviction %q, %d resets; want the new process dropped and the reset done", got, resets.Load())
	}
}

// The lifecycle refuses a transition it does not have.
func TestIllegalTransitionPanics(t *testing.T) {
	p := New[*proc](Config{}, failing{})
	defer p.Close()
	defer func() {
		if r := recover(); r == nil || !strings.Contains(fmt.Sprint(r), "illegal transition gone -> busy") {
			t.Fatalf("recovered %v, want an illegal transition panic", r)
		}
	}()
	p.mu.Lock()
	defer p.mu.Unlock()
	p.setLocked(&entry[*proc]{key: key(0)}, busy)
}

func TestCloseStopsEveryGroupAndGoroutine(t *testing.T) {
	base := runtime.NumGoroutine()
	sp := &spawner{t: t}
	ev := newEvictLog()
	p := New[*proc](Config{OnEvict: ev.record}, sp)
	var pgids []int
	for i := 0; i < 3; i++ {
		co := acquire(t, p, key(i))
		pgid, err := syscall.Getpgid(co.Session.Pid())
		if err != nil {
			t.Fatal(err)
		}
		pgids = append(pgids, pgid)
		p.Release(co, true)
	}
	p.Close()
	p.Close() // idempotent
	sp.wg.Wait()
	for _, g := range pgids {
		if err := syscall.Kill(-g, 0); err != syscall.ESRCH {
			t.Fatalf("process group %d still exists after Close: kill -0 = %v", g, err)
		}
	}
	if _, err := p.Acquire(context.Background(), key(0), AcquireOptions{}); !errors.Is(err, ErrClosed) {
		t.Fatalf("Acquire after Close: %v", err)
	}
	for i := 0; i < 3; i++ {
		if got := ev.wait(t); got[len(got)-8:] != "shutdown" {
			t.Fatalf("eviction %q, want shutdown", got)
		}
	}
	waitFor(t, "goroutines back to the baseline", func() bool { return runtime.NumGoroutine() <= base })
}

func TestSpawnFailureFreesTheSlot(t *testing.T) {
	p := New[*proc](Config{MaxLive: 1}, failing{})
	defer p.Close()
	_, err := p.Acquire(context.Background(), session.Key{Channel: "ch-backend", Binding: "b-claude"}, AcquireOptions{})
	if err == nil || err.Error() != `pool: spawn binding "b-claude" for channel "ch-backend": no such agent` {
		t.Fatalf("err = %v", err)
	}
	if p.Live() != 0 || p.Busy() != 0 {
		t.Fatalf("live %d busy %d after a failed spawn", p.Live(), p.Busy())
	}
}

type failing struct{}

func (failing) Spawn(context.Context, session.Key, func()) (*proc, lease.Shape, error) {
	return nil, lease.Cold, errors.New("no such agent")
}

// A process dropped at release while another turn waits for the same key
// frees its slot for the turn at the head of the slot queue at once, not
// after that turn's queue timeout.
func TestDroppedProcessWakesTheSlotQueue(t *testing.T) {
	p, _, _ := newPool(t, Config{MaxLive: 1, QueueTimeout: 30 * time.Second, QueueLen: 4})
	a := acquire(t, p, key(0))
	type got struct {
		co  *Checkout[*proc]
		err error
	}
	b, c := make(chan got, 1), make(chan got, 1)
	go func() {
		co, err := p.Acquire(context.Background(), key(1), AcquireOptions{})
		b <- got{co, err}
	}()
	waitFor(t, "a turn on key 1 queued for the slot", func() bool { return p.Queued() == 1 })
	go func() {
		co, err := p.Acquire(context.Background(), key(0), AcquireOptions{})
		c <- got{co, err}
	}()
	waitFor(t, "a second turn waiting for key 0", func() bool {
		p.mu.Lock()
		defer p.mu.Unlock()
		e := p.entries[key(0)]
		return e != nil && len(e.waiters) == 1
	})

	p.Release(a, false) // the process goes; key 0 passes to its waiter
	rb := <-b
	if rb.err != nil {
		t.Fatalf("queued turn on key 1: %v; the slot freed by the dropped process was not announced", rb.err)
	}
	p.Release(rb.co, false)
	rc := <-c
	if rc.err != nil {
		t.Fatalf("second turn on key 0: %v", rc.err)
	}
	p.Release(rc.co, true)
}

// gatedSpawner holds each spawn until release is closed.
type gatedSpawner struct {
	*spawner
	entered chan struct{}
	release chan struct{}
	got     chan *proc
}

func (g *gatedSpawner) Spawn(ctx context.Context, k session.Key, exited func()) (*proc, lease.Shape, error) {
	g.entered <- struct{}{}
	<-g.release
	pr, shape, err := g.spawner.Spawn(ctx, k, exited)
	g.got <- pr
	return pr, shape, err
}

// Close waits for a spawn in flight, stops the process it produced and
// reports it as a shutdown eviction.
func TestCloseWaitsForSpawnInFlight(t *testing.T) {
	sp := &gatedSpawner{spawner: &spawner{t: t}, entered: make(chan struct{}, 1), release: make(chan struct{}), got: make(chan *proc, 1)}
	ev := newEvictLog()
	p := New[*proc](Config{MaxLive: 2, OnEvict: ev.record}, sp)
	t.Cleanup(sp.wg.Wait)
	acq := make(chan error, 1)
	go func() {
		_, err := p.Acquire(context.Background(), key(0), AcquireOptions{})
		acq <- err
	}()
	<-sp.entered
	closed := make(chan struct{})
	go func() {
		p.Close()
		close(closed)
	}()
	waitFor(t, "Close to begin", func() bool {
		p.mu.Lock()
		defer p.mu.Unlock()
		return p.closed
	})
	select {
	case <-closed:
		t.Fatal("Close returned while a spawn was in flight")
	default:
	}
	close(sp.release)
	<-closed
	pr := <-sp.got
	if pr == nil {
		t.Fatal("the released spawn failed")
	}
	select {
	case <-pr.Done():
	default:
		t.Fatalf("Close returned with the spawned agent (pid %d) still running", pr.Pid())
	}
	if err := <-acq; !errors.Is(err, ErrClosed) {
		t.Errorf("Acquire during Close: %v, want ErrClosed", err)
	}
	if got := ev.wait(t); got != key(0).String()+" shutdown" {
		t.Errorf("eviction %q, want the spawned process as a shutdown", got)
	}
}

// waits records the Wait reports of one turn.
type waits struct {
	mu  sync.Mutex
	got []Wait
}

func (w *waits) on(x Wait) { w.mu.Lock(); w.got = append(w.got, x); w.mu.Unlock() }
func (w *waits) list() []Wait {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]Wait(nil), w.got...)
}

// A waiting turn hears why it waits and each move up the line; the wait it
// reports as Waited leaves out the spawn.
func TestWaitReports(t *testing.T) {
	p, _, _ := newPool(t, Config{MaxLive: 1})
	a := acquire(t, p, key(0))
	var sameKey, slot1, slot2 waits
	type got struct {
		co  *Checkout[*proc]
		err error
	}
	run := func(k session.Key, w *waits) chan got {
		c := make(chan got, 1)
		go func() {
			co, err := p.Acquire(context.Background(), k, AcquireOptions{OnWait: w.on})
			c <- got{co, err}
		}()
		return c
	}
	c1 := run(key(1), &slot1)
	waitFor(t, "key 1 queued for a slot", func() bool { return p.Queued() == 1 })
	c2 := run(key(2), &slot2)
	waitFor(t, "key 2 queued for a slot", func() bool { return p.Queued() == 2 })
	c0 := run(key(0), &sameKey)
	waitFor(t, "a second turn on key 0", func() bool { return p.keyWaiters(key(0)) == 1 })

	p.Release(a, false) // key 0's next turn gets the key, key 1 the slot
	r1 := <-c1
	if r1.err != nil {
		t.Fatal(r1.err)
	}
	waitFor(t, "key 2 moved up", func() bool { return len(slot2.list()) == 2 })
	if got := fmt.Sprint(slot1.list()); got != "[{true 1}]" {
		t.Errorf("key 1 heard %s", got)
	}
	if got := fmt.Sprint(slot2.list()); got != "[{true 2} {true 1}]" {
		t.Errorf("key 2 heard %s, want position 2 then 1", got)
	}
	if got := sameKey.list(); len(got) < 1 || got[0] != (Wait{Slot: false, Position: 1}) {
		t.Errorf("key 0's second turn heard %v, want first a wait for its key", got)
	}
	if r1.co.Waited <= 0 {
		t.Errorf("Waited = %v for a turn that queued", r1.co.Waited)
	}
	p.Release(r1.co, false)
	r2 := <-c2
	p.Release(r2.co, false)
	r0 := <-c0
	p.Release(r0.co, false)
}

// pending is one Acquire running in a goroutine: waits hears its Wait
// reports, got its checkout.
type pending struct {
	k     session.Key
	waits chan Wait
	got   chan *Checkout[*proc]
}

func start(t *testing.T, p *Pool[*proc], k session.Key) *pending {
	t.Helper()
	w := &pending{k: k, waits: make(chan Wait, 16), got: make(chan *Checkout[*proc], 1)}
	go func() {
		co, err := p.Acquire(context.Background(), k, AcquireOptions{OnWait: func(x Wait) { w.waits <- x }})
		if err != nil {
			t.Errorf("Acquire %s: %v", k, err)
		}
		w.got <- co
	}()
	return w
}

// heard waits until the turn reports want.
func (w *pending) heard(t *testing.T, want Wait) {
	t.Helper()
	deadline := time.After(20 * time.Second)
	for {
		select {
		case x := <-w.waits:
			if x == want {
				return
			}
		case <-deadline:
			t.Fatalf("turn on %s never reported %+v", w.k, want)
		}
	}
}

func (w *pending) checkout(t *testing.T) *Checkout[*proc] {
	t.Helper()
	select {
	case co := <-w.got:
		if co == nil {
			t.Fatalf("turn on %s failed", w.k)
		}
		return co
	case <-time.After(20 * time.Second):
		t.Fatalf("turn on %s never got its process", w.k)
		return nil
	}
}

// waiting fails the test if the turn already has its process.
func (w *pending) waiting(t *testing.T) {
	t.Helper()
	select {
	case co := <-w.got:
		t.Fatalf("turn on %s got a %s process while it should still wait", w.k, co.Lease.Shape)
	default:
	}
}

// queueBehind queues key k's next turn behind the one co holds, then ends co's
// turn: the key passes straight to the queued turn, so k's process never
// idles and only the fairness bound can take it.
func queueBehind(t *testing.T, p *Pool[*proc], co *Checkout[*proc]) *pending {
	t.Helper()
	w := start(t, p, co.Key)
	w.heard(t, Wait{Position: 1})
	p.Release(co, true)
	return w
}

// With a turn of another key waiting for the only slot, a key that keeps
// its process busy serves YieldAfter turns, then its next turn gives the
// slot to the waiter (reason yield) and queues behind it, even though the
// queue is full.
func TestSlotHolderYieldsAfterTheBound(t *testing.T) {
	p, sp, ev := newPool(t, Config{MaxLive: 1, YieldAfter: 2, QueueLen: 1})
	co := acquire(t, p, key(0)) // nobody waits yet: not counted
	other := start(t, p, key(1))
	other.heard(t, Wait{Slot: true, Position: 1})
	for i := 1; i <= 2; i++ {
		co = queueBehind(t, p, co).checkout(t)
		if co.Lease.Shape != lease.Warm {
			t.Fatalf("turn %d with key 1 waiting: %s, want warm (the bound is 2)", i, co.Lease.Shape)
		}
		other.waiting(t)
	}
	third := queueBehind(t, p, co)
	third.heard(t, Wait{Slot: true, Position: 2}) // displaced, so past the queue's length of 1
	if got := ev.wait(t); got != key(0).String()+" yield" {
		t.Fatalf("eviction %q, want %s yield", got, key(0))
	}
	oc := other.checkout(t)
	if oc.Lease.Shape != lease.Cold {
		t.Fatalf("waiting key's turn: %s, want cold", oc.Lease.Shape)
	}
	third.heard(t, Wait{Slot: true, Position: 1})
	third.waiting(t)
	p.Release(oc, true) // key 1 goes idle: key 0's turn takes the slot back
	if got := ev.wait(t); got != key(1).String()+" capacity" {
		t.Fatalf("eviction %q, want %s capacity", got, key(1))
	}
	tc := third.checkout(t)
	if tc.Lease.Shape != lease.Cold {
		t.Fatalf("key 0's turn after yielding: %s, want a new process", tc.Lease.Shape)
	}
	p.Release(tc, true)
	if _, _, spawned := sp.counts(); spawned != 3 {
		t.Fatalf("spawned %d processes, want 3 (key 0, key 1, key 0 again)", spawned)
	}
}

// The turns queued on a key that yields still run one at a time in arrival
// order: the displaced turn first, then the ones behind it.
func TestYieldKeepsTheKeysTurnsInOrder(t *testing.T) {
	p, _, ev := newPool(t, Config{MaxLive: 1, YieldAfter: 1})
	co := acquire(t, p, key(0))
	other := start(t, p, key(1))
	other.heard(t, Wait{Slot: true, Position: 1})
	co = queueBehind(t, p, co).checkout(t) // the one turn the bound allows
	const n = 4
	turns := make([]*pending, n)
	for i := range turns {
		turns[i] = start(t, p, key(0))
		turns[i].heard(t, Wait{Position: i + 1})
	}
	p.Release(co, true)
	turns[0].heard(t, Wait{Slot: true, Position: 2})
	if got := ev.wait(t); got != key(0).String()+" yield" {
		t.Fatalf("eviction %q, want %s yield", got, key(0))
	}
	p.Release(other.checkout(t), true)
	for i, w := range turns {
		co := w.checkout(t)
		for _, later := range turns[i+1:] {
			later.waiting(t)
		}
		if want := lease.Warm; i > 0 && co.Lease.Shape != want {
			t.Fatalf("turn %d on key 0: %s, want %s (nobody waits for a slot now)", i, co.Lease.Shape, want)
		}
		p.Release(co, true)
	}
}

// The slot a key yields goes to the turn that has waited longest, and the
// displaced turn waits behind every turn that was already in line.
func TestYieldedSlotGoesToTheLongestWaiter(t *testing.T) {
	p, _, _ := newPool(t, Config{MaxLive: 1, YieldAfter: 1})
	co := acquire(t, p, key(0))
	var line []*pending
	for i := 1; i <= 3; i++ {
		w := start(t, p, key(i))
		w.heard(t, Wait{Slot: true, Position: i})
		line = append(line, w)
	}
	co = queueBehind(t, p, co).checkout(t)
	displaced := queueBehind(t, p, co)
	displaced.heard(t, Wait{Slot: true, Position: 4})
	for i, w := range append(line, displaced) {
		co := w.checkout(t)
		for _, later := range line[min(i+1, len(line)):] {
			later.waiting(t)
		}
		if w != displaced {
			displaced.waiting(t)
		}
		p.Release(co, true)
	}
}

// With nobody waiting for a slot a key keeps its warm process however many
// turns it runs, its own queued turns included: fairness evicts nothing.
func TestNoYieldWithoutSlotWaiters(t *testing.T) {
	p, sp, _ := newPool(t, Config{MaxLive: 2, YieldAfter: 1})
	a := acquire(t, p, key(0))
	b := acquire(t, p, key(1)) // every slot taken, no turn waiting for one
	for i := 0; i < 5; i++ {
		a = queueBehind(t, p, a).checkout(t)
		if a.Lease.Shape != lease.Warm {
			t.Fatalf("turn %d on key 0: %s, want warm", i, a.Lease.Shape)
		}
	}
	p.Release(a, true)
	p.Release(b, true)
	for i := 0; i < 3; i++ {
		co := acquire(t, p, key(0))
		if co.Lease.Shape != lease.Warm {
			t.Fatalf("turn %d on idle key 0: %s, want warm", i, co.Lease.Shape)
		}
		p.Release(co, true)
	}
	if _, _, spawned := sp.counts(); spawned != 2 || p.Live() != 2 {
		t.Fatalf("spawned %d, live %d; want the two first processes only", spawned, p.Live())
	}
}

// OnStart hears once per Acquire that the turn waits no more: after its
// wait for the key, before a cold spawn, and on a warm checkout too.
func TestOnStartAfterTheWait(t *testing.T) {
	p, _, _ := newPool(t, Config{MaxLive: 1})
	var (
		mu     sync.Mutex
		events []string
	)
	note := func(s string) { mu.Lock(); events = append(events, s); mu.Unlock() }
	opts := AcquireOptions{OnWait: func(Wait) { note("wait") }, OnStart: func() { note("start") }}
	co, err := p.Acquire(context.Background(), key(0), opts)
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan *Checkout[*proc], 1)
	go func() {
		co, err := p.Acquire(context.Background(), key(0), opts)
		if err != nil {
			t.Error(err)
		}
		got <- co
	}()
	waitFor(t, "the second turn to wait for the key", func() bool { mu.Lock(); defer mu.Unlock(); return len(events) == 2 })
	p.Release(co, true)
	co = <-got
	if co == nil {
		t.FailNow()
	}
	defer p.Release(co, true)
	mu.Lock()
	defer mu.Unlock()
	if want := []string{"start", "wait", "start"}; !slices.Equal(events, want) || co.Lease.Shape != lease.Warm {
		t.Fatalf("events %v, shape %s; want %v, warm", events, co.Lease.Shape, want)
	}
}

// A key's next turn reserved before the turn holding the key releases it
// gets the key, and its warm process, ahead of a turn waiting for the only
// slot, which would otherwise evict the idle process; a reservation given
// up passes the key on; a free key reserved is held for its owner.
func TestReserveHandsTheKeyOver(t *testing.T) {
	p, _, ev := newPool(t, Config{MaxLive: 1, QueueTimeout: 30 * time.Second})
	a := acquire(t, p, key(0))
	slot := make(chan error, 1)
	go func() {
		co, err := p.Acquire(context.Background(), key(1), AcquireOptions{})
		if err == nil {
			p.Release(co, true)
		}
		slot <- err
	}()
	waitFor(t, "a turn on key 1 queued for the slot", func() bool { return p.Queued() == 1 })
	p.Reserve(key(0), "next")
	p.Release(a, true)
	co, err := p.Acquire(context.Background(), key(0), AcquireOptions{Owner: "next"})
	if err != nil || co.Lease.Shape != lease.Warm {
		t.Fatalf("the reserved turn: %v, shape %v; want the warm process", err, co)
	}
	if p.Free(key(0)) {
		t.Fatal("key 0 free while its reserved turn runs")
	}
	p.Reserve(key(0), "gives-up")
	p.Release(co, true)
	if p.Free(key(0)) {
		t.Fatal("a reserved key is free")
	}
	p.Unreserve(key(0), "gives-up") // the key passes on: the slot waiter evicts its idle process
	if got := ev.wait(t); got != key(0).String()+" capacity" {
		t.Fatalf("evicted %q, want key 0 for the slot", got)
	}
	if err := <-slot; err != nil {
		t.Fatalf("the slot waiter: %v", err)
	}
	p.Reserve(key(2), "owner") // free: held for its owner at once
	other := make(chan error, 1)
	go func() {
		co, err := p.Acquire(context.Background(), key(2), AcquireOptions{Owner: "other"})
		if err == nil {
			p.Release(co, true)
		}
		other <- err
	}()
	waitFor(t, "another turn waiting for the reserved key", func() bool { return p.keyWaiters(key(2)) == 1 })
	p.Unreserve(key(2), "owner")
	if err := <-other; err != nil {
		t.Fatalf("the turn after the given-up reservation: %v", err)
	}
}
