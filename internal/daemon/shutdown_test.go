package daemon_test

import (
	"errors"
	"testing"
	"time"

	"github.com/residentd/residentd/apitype"
	"github.com/residentd/residentd/internal/config"
	"github.com/residentd/residentd/internal/daemon"
	"github.com/residentd/residentd/internal/permission"
	"github.com/residentd/residentd/internal/run"
)

// The shutdown grace is a promise: a run that ends within it finishes with
// its normal result, one that does not is cancelled and reported
// shutting_down, and a run still queued ends at once.
func TestShutdownGrace(t *testing.T) {
	h := newHarness(t, func(c *config.Config) {
		ask := testBinding(t, "b-ask", c.StateDir)
		ask.Permission = permission.Ask
		c.Bindings = append(c.Bindings, ask)
	})
	// A run that waits for a person: it ends when the answer comes.
	asking, err := h.d.Submit(apitype.TurnRequest{Channel: "ch-a", Binding: "b-ask", Text: "@agent [[permission:edit]] fix it"})
	if err != nil {
		t.Fatal(err)
	}
	reqID := waitPending(t, asking)
	// A run that never ends by itself, and one queued behind it.
	hung, err := h.d.Submit(apitype.TurnRequest{Channel: "ch-h", Binding: "b-builtin", Text: "@agent [[fault:hang-turn]]"})
	if err != nil {
		t.Fatal(err)
	}
	waitState(t, hung, apitype.RunRunning)
	queued, err := h.d.Submit(apitype.TurnRequest{Channel: "ch-h", Binding: "b-builtin", Text: "@agent next"})
	if err != nil {
		t.Fatal(err)
	}
	waitEvent(t, queued, apitype.EventQueued)

	closed := make(chan error, 1)
	go func() { closed <- h.d.Close(5 * time.Second) }()
	// The queued run ends without waiting for the grace.
	if ev, _ := waitEnded(t, queued); ev.Code != apitype.CodeShuttingDown {
		t.Fatalf("queued run at shutdown: %+v, want shutting_down", ev)
	}
	if _, err := h.d.Submit(apitype.TurnRequest{Channel: "ch-x", Binding: "b-builtin", Text: "@agent late"}); !errors.Is(err, daemon.ErrShuttingDown) {
		t.Fatalf("submit while closing: %v, want daemon.ErrShuttingDown", err)
	}
	// The asking run is answered within the grace and finishes normally.
	if err := h.d.Answer(asking.ID, reqID, "allow"); err != nil {
		t.Fatal(err)
	}
	if ev, err := waitEnded(t, asking); ev.Event != apitype.EventDone || err != nil {
		t.Fatalf("run that ended within the grace: %+v %v, want done", ev, err)
	}
	if s := hung.Snapshot(); s.State != apitype.RunRunning {
		t.Fatalf("the hanging run is %s before the grace ran out, want running", s.State)
	}
	if err := <-closed; err != nil {
		t.Fatal(err)
	}
	if ev, _, _ := hung.Result(); ev.Code != apitype.CodeShuttingDown || hung.Snapshot().State != apitype.RunCancelled {
		t.Fatalf("run past the grace: %+v, want shutting_down", ev)
	}
	h.d = nil // closed already
}

// waitEvent waits until r has logged an event of kind and returns it.
func waitEvent(t *testing.T, r *run.Run, kind string) apitype.Event {
	t.Helper()
	return waitMatch(t, r, "a "+kind+" event", func(ev apitype.Event) bool { return ev.Event == kind })
}

// waitMatch waits until r has logged an event match accepts (what names it
// in a failure) and returns it.
func waitMatch(t *testing.T, r *run.Run, what string, match func(apitype.Event) bool) apitype.Event {
	t.Helper()
	timeout := time.After(30 * time.Second)
	var after int64
	for {
		b := r.Read(after, true)
		for _, l := range b.Lines {
			ev, err := daemon.DecodeEvent(l)
			if err != nil {
				t.Fatal(err)
			}
			if match(ev) {
				return ev
			}
		}
		if b.Ended {
			ev, err, _ := r.Result()
			t.Fatalf("run %s ended (%+v, %v) without %s", r.ID, ev, err, what)
		}
		after = b.Last
		select {
		case <-b.Changed:
		case <-timeout:
			t.Fatalf("run %s logged no %s", r.ID, what)
		}
	}
}

func waitPending(t *testing.T, r *run.Run) string {
	t.Helper()
	return waitEvent(t, r, apitype.EventPermissionRequest).Permission.ID
}

func waitState(t *testing.T, r *run.Run, state string) {
	t.Helper()
	if state == apitype.RunRunning {
		waitEvent(t, r, apitype.EventStarted)
	}
	if got := r.Snapshot().State; got != state {
		t.Fatalf("run %s is %s, want %s", r.ID, got, state)
	}
}

// waitEnded waits for r to end and returns its result.
func waitEnded(t *testing.T, r *run.Run) (apitype.Event, error) {
	t.Helper()
	timeout := time.After(30 * time.Second)
	for {
		changed := r.Wait() // before the check, so an end in between closes it
		if ev, err, ended := r.Result(); ended {
			return ev, err
		}
		select {
		case <-changed:
		case <-timeout:
			t.Fatalf("run %s did not end", r.ID)
		}
	}
}
