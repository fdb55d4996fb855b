package daemon_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/residentd/residentd/apitype"
	"github.com/residentd/residentd/internal/channel"
	"github.com/residentd/residentd/internal/config"
	"github.com/residentd/residentd/internal/daemon"
	"github.com/residentd/residentd/internal/run"
	"github.com/residentd/residentd/internal/testkit"
)

// The same mention resubmitted with its run id, while it runs and after it
// ended, is that run: one turn. The id with another mention is refused.
func TestResubmittedRunIDIsItsRun(t *testing.T) {
	h, prompts := recorded(t)
	hold := filepath.Join(h.dir, "hold")
	h.post(channel.Message{ID: "q1", Channel: "ch", Author: "carla", Body: "@agent look"})
	req := apitype.TurnRequest{Channel: "ch", Binding: "b-builtin", MessageID: "q1", RunID: "run-x", Text: "@agent look [[hold:" + hold + "]]"}
	r, err := h.d.Submit(req)
	if err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, 30*time.Second, func() bool {
		_, err := os.Stat(filepath.Join(h.dir, "record.jsonl"))
		return err == nil && len(prompts()) == 1
	}, testkit.Waiting("the turn to reach the agent"))
	again, err := h.d.Submit(req)
	if err != nil || again != r {
		t.Fatalf("resubmitted while running: %v, %v", again, err)
	}
	other := req
	other.Text = "@agent something else"
	if _, err := h.d.Submit(other); !errors.Is(err, run.ErrInUse) {
		t.Fatalf("the run id with another mention: %v", err)
	}
	if err := os.WriteFile(hold, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	<-ended(r)
	if again, err := h.d.Submit(req); err != nil || again != r || again.Snapshot().State != apitype.RunSucceeded {
		t.Fatalf("resubmitted after its end: %v, %v", again, err)
	}
	if n := len(prompts()); n != 1 {
		t.Fatalf("%d prompts for one run id", n)
	}
	// After a restart the ended run is read back from the state file.
	h.restart()
	if again, err := h.d.Submit(req); err != nil || again.ID != "run-x" || again.Snapshot().State != apitype.RunSucceeded || again.Snapshot().Attempt != 1 {
		t.Fatalf("resubmitted after a restart: %+v, %v", again, err)
	}
	if n := len(prompts()); n != 1 {
		t.Fatalf("%d prompts for one run id after the restart", n)
	}
}

// A binding with retry_interrupted off: a turn in flight at a stop ends
// interrupted after the restart, its events so far readable, not prompted
// again; a run queued behind it runs.
func TestInterruptedNotRetried(t *testing.T) {
	off := false
	h, prompts := recorded(t, func(c *config.Config) { c.Bindings[0].RetryInterrupted = &off })
	hold := filepath.Join(h.dir, "hold")
	h.post(channel.Message{ID: "q1", Channel: "ch", Author: "carla", Body: "@agent look"}, channel.Message{ID: "q2", Channel: "ch", Author: "ben", Body: "@agent and"})
	held, err := h.d.Submit(apitype.TurnRequest{Channel: "ch", Binding: "b-builtin", MessageID: "q1", RunID: "run-held", Text: "@agent look [[hold:" + hold + "]]"})
	if err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, 30*time.Second, func() bool {
		_, err := os.Stat(filepath.Join(h.dir, "record.jsonl"))
		return err == nil && len(prompts()) == 1
	}, testkit.Waiting("the turn to reach the agent"))
	next, err := h.d.Submit(apitype.TurnRequest{Channel: "ch", Binding: "b-builtin", MessageID: "q2", RunID: "run-next", Text: "@agent and"})
	if err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, 30*time.Second, func() bool { return next.Snapshot().State == apitype.RunQueued }, testkit.Waiting("the second run to queue"))
	// A clean stop whose grace the held turn outlives.
	h.d.Close(50 * time.Millisecond)
	if ev, _, _ := held.Result(); ev.Code != apitype.CodeShuttingDown {
		t.Fatalf("the held turn at the stop: %+v", ev)
	}
	h.close()
	h.open()
	r := h.ended("run-held")
	snap := r.Snapshot()
	if snap.State != apitype.RunInterrupted || snap.Attempt != 1 || snap.Result == nil || snap.Result.Code != apitype.CodeInterrupted {
		t.Fatalf("the held run after the restart: %+v", snap)
	}
	var kinds []string
	for _, l := range r.Read(0, false).Lines {
		ev, err := daemon.DecodeEvent(l)
		if err != nil {
			t.Fatal(err)
		}
		kinds = append(kinds, ev.Event)
	}
	// Its key was free: it was accepted as started, in one record, and its
	// started event (shape, pid) would have been recorded with its end.
	if strings.Join(kinds, " ") != "interrupted error" {
		t.Fatalf("the held run's events: %v", kinds)
	}
	nr := h.ended("run-next")
	if ev, err, _ := nr.Result(); err != nil || ev.Event != apitype.EventDone || nr.Snapshot().Attempt != 1 {
		t.Fatalf("the queued run after the restart: %+v %v", ev, err)
	}
	got := prompts()
	if len(got) != 2 || !strings.Contains(got[1], `"message_id":"q2"`) {
		t.Fatalf("prompts after the restart: %d\n%s", len(got), got[len(got)-1])
	}
}

// A run accepted as started (its key was free) that a clean stop ends
// before its prompt is written back as queued: after the restart it runs
// as its first attempt, even where interrupted runs are not retried.
func TestStopBeforePromptKeepsRunQueued(t *testing.T) {
	off := false
	h, prompts := recorded(t, func(c *config.Config) {
		c.Bindings[0].RetryInterrupted = &off
		c.Bindings[0].Args = append(c.Bindings[0].Args, "--fault", "slow-start", "--slow", "1s")
	})
	h.post(channel.Message{ID: "q1", Channel: "ch", Author: "carla", Body: "@agent look"})
	r, err := h.d.Submit(apitype.TurnRequest{Channel: "ch", Binding: "b-builtin", MessageID: "q1", RunID: "run-cold", Text: "@agent look"})
	if err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, 30*time.Second, func() bool { return r.Snapshot().State == apitype.RunStarting }, testkit.Waiting("the run to start its agent"))
	h.d.Close(50 * time.Millisecond)
	if ev, _, _ := r.Result(); ev.Code != apitype.CodeShuttingDown {
		t.Fatalf("the run at the stop: %+v", ev)
	}
	if _, err := os.Stat(filepath.Join(h.dir, "record.jsonl")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the agent was prompted before the stop (%v)", err)
	}
	h.close()
	h.open()
	again := h.ended("run-cold")
	snap := again.Snapshot()
	if snap.State != apitype.RunSucceeded || snap.Attempt != 1 {
		t.Fatalf("the run after the restart: %+v", snap)
	}
	for _, l := range again.Read(0, false).Lines {
		if ev, err := daemon.DecodeEvent(l); err != nil || ev.Event == apitype.EventInterrupted {
			t.Fatalf("event %+v (%v): a run never prompted was not in flight", ev, err)
		}
	}
	if n := len(prompts()); n != 1 {
		t.Fatalf("%d prompts for one run", n)
	}
}
