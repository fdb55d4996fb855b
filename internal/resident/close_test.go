package resident

import (
	"context"
	"errors"
	"os"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/residentd/residentd/internal/child"
	"github.com/residentd/residentd/internal/config"
	"github.com/residentd/residentd/internal/pool"
	"github.com/residentd/residentd/internal/session"
	"github.com/residentd/residentd/internal/store"
	"github.com/residentd/residentd/internal/testkit"
)

// withSpare gives the first binding one spare, started with the keeper.
func withSpare(c *config.Config) {
	one := 1
	c.Bindings[0].Spare, c.Bindings[0].SpareAtStart = &one, true
}

func recorded(t *testing.T, st *store.Store, pid int) bool {
	t.Helper()
	recs, err := st.Agents()
	if err != nil {
		t.Fatal(err)
	}
	return slices.ContainsFunc(recs, func(r store.AgentRecord) bool { return r.Pid == pid })
}

// Close joins the keeper's work: it returns once the spare it stops has
// exited and its exit hook has run (the agent's record forgotten), twice
// at once as well; then nothing starts, neither a goroutine nor an agent.
func TestCloseJoinsTheKeepersWork(t *testing.T) {
	ready := make(chan int, 1)
	k, st := newKeeperWith(t, Options{OnSpare: func(_ string, pid int) { ready <- pid }}, withSpare)
	k.RunSpares(func() int { return 0 })
	var pid int
	select {
	case pid = <-ready:
	case <-time.After(30 * time.Second):
		t.Fatal("no spare became ready")
	}
	if pid == 0 {
		t.Fatal("the spare failed to start")
	}
	if !recorded(t, st, pid) {
		t.Fatalf("spare pid %d not recorded for the startup sweep", pid)
	}

	var wg sync.WaitGroup
	for range 2 {
		wg.Go(k.Close)
	}
	wg.Wait()
	if recorded(t, st, pid) {
		t.Errorf("spare pid %d still recorded after Close: its exit hook had not run", pid)
	}
	if s := k.Spares(); len(s) != 0 {
		t.Errorf("spares after Close: %+v", s)
	}
	if k.goBg(func(context.Context) { t.Error("a goroutine ran after Close") }) {
		t.Error("goBg accepted work after Close")
	}
	_, _, err := k.Spawn(context.Background(), session.Key{Channel: "ch", Binding: "b-builtin"}, func() {})
	if !errors.Is(err, pool.ErrClosed) {
		t.Fatalf("spawn after Close: %v, want pool.ErrClosed", err)
	}
	if recs, _ := st.Agents(); len(recs) != 0 {
		t.Errorf("agents recorded after a spawn on a closed keeper: %+v", recs)
	}
	k.Close()
}

// A spare still starting when the keeper closes is not waited for to
// the end of its start: the keeper's context ends its initialize, and
// Close returns with the process gone.
func TestCloseEndsASpareStarting(t *testing.T) {
	if _, err := child.All(); err != nil {
		t.Skipf("no process table here: %v", err)
	}
	k, _ := newKeeperWith(t, Options{}, func(c *config.Config) {
		withSpare(c)
		c.Bindings[0].Args = append(c.Bindings[0].Args, "--fault", "slow-start", "--slow", "1h")
	})
	k.RunSpares(func() int { return 0 })
	self := os.Getpid()
	var pid int
	testkit.WaitFor(t, 30*time.Second, func() bool {
		all, _ := child.All()
		for _, s := range all {
			if s.Ppid == self && !s.Zombie() {
				pid = s.Pid
				return true
			}
		}
		return false
	}, func() string { return "the spare's process never started" })

	closed := make(chan struct{})
	go func() {
		k.Close()
		close(closed)
	}()
	select {
	case <-closed:
	case <-time.After(20 * time.Second): // under the 30s start timeout
		t.Fatal("Close waited for the spare's initialize")
	}
	if s, err := child.Read(pid); err == nil && s.Ppid == self {
		t.Errorf("spare pid %d still alive after Close: %+v", pid, s)
	}
}

// Close cancels the keeper's context and returns only once every piece of
// its work has ended: a goroutine (goBg) and a timer's work (afterFunc)
// that began before it; none begins after it, and a second Close returns.
func TestCloseWaitsForItsWork(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		k := &Keeper{}
		k.ctx, k.cancel = context.WithCancel(context.Background())
		k.sp.init(&config.Config{})

		release := make(chan struct{})
		free := sync.OnceFunc(func() { close(release) })
		defer free() // a failure below leaves no goroutine blocked in the bubble
		cancelled := false
		if !k.goBg(func(ctx context.Context) { <-ctx.Done(); cancelled = true; <-release }) {
			t.Fatal("goBg refused work before Close")
		}
		timerRan := make(chan struct{})
		k.afterFunc(0, func() { close(timerRan); <-release })
		<-timerRan

		returned := false
		go func() { k.Close(); returned = true }()
		synctest.Wait()
		if !cancelled {
			t.Fatal("Close did not cancel the keeper's context")
		}
		if returned {
			t.Fatal("Close returned while the keeper's work ran")
		}
		free()
		synctest.Wait()
		if !returned {
			t.Fatal("Close did not return once the work ended")
		}

		late := false
		k.afterFunc(0, func() { late = true })
		if k.goBg(func(context.Context) { late = true }) {
			t.Error("goBg accepted work after Close")
		}
		synctest.Wait()
		if late {
			t.Error("work ran after Close")
		}
		k.Close()
	})
}
