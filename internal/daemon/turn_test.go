package daemon_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/residentd/residentd/apitype"
	"github.com/residentd/residentd/internal/channel"
	"github.com/residentd/residentd/internal/config"
	"github.com/residentd/residentd/internal/daemon"
	"github.com/residentd/residentd/internal/lease"
	"github.com/residentd/residentd/internal/session"
	"github.com/residentd/residentd/internal/store"
	"github.com/residentd/residentd/internal/testkit"
)

func TestColdThenWarmThenRestoredAfterRestart(t *testing.T) {
	h := newHarness(t)
	h.say("ch-backend", "a", 3)
	r1 := h.mention("ch-backend", "b-builtin", "q1", "@agent why is the refund spec flaky?")
	got := reply(t, r1)
	if r1.done.Shape != "cold" || got["framing"] != "yes" || got["users"] != "1" || got["context"] != "3" || got["mention"] != "-" && got["mention"] != "q1" {
		t.Fatalf("first turn: shape %s reply %v", r1.done.Shape, got)
	}
	if r1.done.Context.Header != "snapshot" || r1.done.Watermark != "committed" {
		t.Fatalf("first turn context %+v watermark %s", r1.done.Context, r1.done.Watermark)
	}

	h.say("ch-backend", "b", 2)
	r2 := h.mention("ch-backend", "b-builtin", "q2", "@agent and the webhook retries?")
	got = reply(t, r2)
	// Warm: newest user turn only; no framing, no replay; only the lines
	// posted since the first turn (the first mention was its payload: it
	// is seen, not news).
	if r2.done.Shape != "warm" || got["framing"] != "no" || got["users"] != "0" || got["assistants"] != "0" {
		t.Fatalf("second turn: shape %s reply %v", r2.done.Shape, got)
	}
	if got["context"] != "2" || r2.done.Context.Header != "new" || r2.done.Context.DroppedSeen != 4 || r2.done.Context.Known != 1 {
		t.Fatalf("second turn context %+v reply %v", r2.done.Context, got)
	}
	if r1.done.Native != r2.done.Native || got["turn"] != "2" {
		t.Fatalf("warm turn went to another session: %s vs %s, turn %s", r1.done.Native, r2.done.Native, got["turn"])
	}

	h.restart()
	r3 := h.mention("ch-backend", "b-builtin", "q3", "@agent still there?")
	got = reply(t, r3)
	// The reopened session holds its framing and brief (in the framing by
	// default): the restored turn sends neither again.
	if r3.done.Shape != "restored" || r3.done.Native != r1.done.Native || got["framing"] != "no" || got["users"] != "0" || got["turn"] != "3" {
		t.Fatalf("after restart: shape %s native %s reply %v", r3.done.Shape, r3.done.Native, got)
	}
	// The restored session keeps its watermark: nothing is new (q2 was the
	// last payload), so no block at all.
	if r3.done.Context.Header != "none" || got["context"] != "0" || r3.done.Context.DroppedSeen != 7 {
		t.Fatalf("restored context %+v reply %v", r3.done.Context, got)
	}
}

func TestRestoreOffGivesColdReplayAndSnapshot(t *testing.T) {
	off := false
	h := newHarness(t, func(c *config.Config) { c.Bindings[0].Restore = &off })
	h.say("ch", "a", 14)
	reply(t, h.mention("ch", "b-builtin", "q1", "@agent one"))
	reply(t, h.mention("ch", "b-builtin", "q2", "@agent two"))
	h.restart()
	r := h.mention("ch", "b-builtin", "q3", "@agent three")
	got := reply(t, r)
	// Cold: framing + the full replay of the key's conversation (3 user turns,
	// 2 replies) and a fresh snapshot of 12, not a gap.
	if r.done.Shape != "cold" || got["framing"] != "yes" || got["users"] != "3" || got["assistants"] != "2" {
		t.Fatalf("shape %s reply %v", r.done.Shape, got)
	}
	if r.done.Context.Header != "snapshot" || r.done.Context.Lines != 12 {
		t.Fatalf("context %+v", r.done.Context)
	}
}

func TestFailedRunKeepsWatermark(t *testing.T) {
	h := newHarness(t)
	h.say("ch", "a", 2)
	reply(t, h.mention("ch", "b-builtin", "q1", "@agent hello"))
	h.say("ch", "b", 2)
	// The failing mention is not posted: its fault marker must not reach
	// the next turn's context.
	bad := h.turn(apitype.TurnRequest{Channel: "ch", Binding: "b-builtin", MessageID: "q2", Text: "@agent [[fault:fail-turn]] please"})
	if bad.err == nil || !errors.Is(bad.err, daemon.ErrAgentFailed) && !strings.Contains(bad.err.Error(), "induced failure") {
		t.Fatalf("failing turn: err %v", bad.err)
	}
	if n := testutil.ToFloat64(h.m.WatermarkDiscards); n != 1 {
		t.Fatalf("watermark discards = %v, want 1", n)
	}
	r := h.mention("ch", "b-builtin", "q3", "@agent again")
	got := reply(t, r)
	// b1 and b2 are shown again (the failed run showed them to nobody);
	// q1, the first turn's payload, is not.
	if r.done.Shape != "warm" || got["context"] != "2" {
		t.Fatalf("after failure: shape %s context %+v reply %v", r.done.Shape, r.done.Context, got)
	}
}

func TestUnknownBindingAndBadRequest(t *testing.T) {
	h := newHarness(t)
	r := h.turn(apitype.TurnRequest{Channel: "ch", Binding: "b-nope", Text: "hi"})
	if !errors.Is(r.err, daemon.ErrUnknownBinding) || !strings.Contains(r.err.Error(), "b-builtin") {
		t.Fatalf("unknown binding: %v", r.err)
	}
	for _, req := range []apitype.TurnRequest{
		{Binding: "b-builtin", Text: "x"},
		{Channel: "ch", Text: "x"},
		{Channel: "ch", Binding: "b-builtin"},
	} {
		if r := h.turn(req); !errors.Is(r.err, daemon.ErrBadRequest) {
			t.Errorf("%+v: err %v, want daemon.ErrBadRequest", req, r.err)
		}
	}
}

// A capacity eviction keeps the saved native session: with restore on the
// next turn reloads it and keeps its watermark; with restore off it is cold
// and gets a snapshot of 12, not a gap.
func TestEvictionRestoreOnAndOff(t *testing.T) {
	for _, restore := range []bool{true, false} {
		t.Run(map[bool]string{true: "restore on", false: "restore off"}[restore], func(t *testing.T) {
			h := newHarness(t, func(c *config.Config) {
				c.MaxLive = 1
				c.Bindings[0].Restore = &restore
			})
			h.say("ch-a", "a", 15)
			first := h.mention("ch-a", "b-builtin", "qa1", "@agent one")
			reply(t, first)
			reply(t, h.mention("ch-b", "b-builtin", "qb1", "@agent other channel"))
			if ev := h.evictions(); len(ev) != 1 || ev[0] != "ch-a/b-builtin capacity" {
				t.Fatalf("evictions %v", ev)
			}
			h.say("ch-a", "c", 2)
			r := h.mention("ch-a", "b-builtin", "qa2", "@agent two")
			got := reply(t, r)
			if restore {
				if r.done.Shape != "restored" || r.done.Native != first.done.Native || r.done.Context.Header != "new" || got["context"] != "2" {
					t.Fatalf("restored: shape %s native %s/%s context %+v reply %v", r.done.Shape, r.done.Native, first.done.Native, r.done.Context, got)
				}
				return
			}
			// The replay holds qa1 (compact: no old block); the snapshot
			// shows 12 of the other 17 and counts 5.
			if r.done.Shape != "cold" || r.done.Native == first.done.Native || r.done.Context.Header != "snapshot" || r.done.Context.Lines != 12 || r.done.Context.DroppedBound != 5 || r.done.Context.Known != 2 || got["users"] != "2" {
				t.Fatalf("cold: shape %s context %+v reply %v", r.done.Shape, r.done.Context, got)
			}
		})
	}
}

// A binding that starts fresh every turn has no memory: it gets a snapshot
// every time and never a watermark.
func TestFreshStartBindingNeverGetsWatermark(t *testing.T) {
	h := newHarness(t, func(c *config.Config) {
		c.Bindings[0].Supervised = false
		c.Bindings[0].Resident = false
	})
	h.say("ch", "a", 3)
	for i, id := range []string{"q1", "q2", "q3"} {
		r := h.mention("ch", "b-builtin", id, "@agent again")
		got := reply(t, r)
		if r.done.Shape != "cold" || r.done.Context.Header != "snapshot" || r.done.Watermark != "none" {
			t.Fatalf("turn %d: shape %s context %+v watermark %s reply %v", i+1, r.done.Shape, r.done.Context, r.done.Watermark, got)
		}
		if _, ok, err := h.st.Watermark(channel.WatermarkKey{Key: session.Key{Channel: "ch", Binding: "b-builtin"}}); ok || err != nil {
			t.Fatalf("turn %d: a fresh-start binding got a watermark (err %v)", i+1, err)
		}
	}
	if n := len(h.d.PoolSessions()); n != 0 {
		t.Fatalf("%d processes kept for a non-resident binding", n)
	}
}

func TestStartFreshForgetsSession(t *testing.T) {
	h := newHarness(t)
	h.say("ch", "a", 2)
	first := h.mention("ch", "b-builtin", "q1", "@agent one")
	reply(t, first)
	if had, err := h.d.Fresh(session.Key{Channel: "ch", Binding: "b-builtin"}); err != nil || !had {
		t.Fatalf("Fresh = %v, %v", had, err)
	}
	r := h.mention("ch", "b-builtin", "q2", "@agent two")
	got := reply(t, r)
	if r.done.Shape != "cold" || r.done.Native == first.done.Native || got["users"] != "1" || r.done.Context.Header != "snapshot" {
		t.Fatalf("after fresh: shape %s reply %v context %+v", r.done.Shape, got, r.done.Context)
	}
}

// "Start fresh" while a turn runs cancels that turn and resets the key once
// it has let go: nothing of the old session (conversation, watermark,
// native id) survives, and the next turn starts from nothing.
func TestStartFreshDuringATurn(t *testing.T) {
	h := newHarness(t)
	k := session.Key{Channel: "ch", Binding: "b-builtin"}
	h.say("ch", "a", 2)
	reply(t, h.mention("ch", "b-builtin", "q1", "@agent one"))
	h.post(channel.Message{ID: "q2", Channel: "ch", Author: "carla", Body: "@agent two"})
	type fresh struct {
		had bool
		err error
	}
	freshed := make(chan fresh, 1)
	var native string
	_, err := h.d.Turn(context.Background(), apitype.TurnRequest{Channel: "ch", Binding: "b-builtin", MessageID: "q2", Text: "@agent two [[fault:hang-turn]]"}, func(ev apitype.Event) {
		if ev.Event == "started" {
			native = ev.Native
			go func() { // the turn holds the key now
				had, err := h.d.Fresh(k)
				freshed <- fresh{had, err}
			}()
		}
	})
	if !errors.Is(err, daemon.ErrFresh) || daemon.Outcome(err) != lease.OutcomeCancelled {
		t.Fatalf("turn interrupted by Fresh: %v (outcome %s), want cancelled because of the fresh start", err, daemon.Outcome(err))
	}
	if f := <-freshed; f.err != nil || !f.had {
		t.Fatalf("Fresh during a turn = %v, %v", f.had, f.err)
	}
	if conv, err := h.st.Conversation(k); err != nil || len(conv) != 0 {
		t.Fatalf("conversation after Fresh: %d turns (%v), want none", len(conv), err)
	}
	if _, ok := h.watermark("ch", "b-builtin"); ok {
		t.Fatal("a watermark survived the reset")
	}
	if n := len(h.d.PoolSessions()); n != 0 {
		t.Fatalf("%d processes after Fresh returned", n)
	}
	r := h.mention("ch", "b-builtin", "q3", "@agent three")
	got := reply(t, r)
	if r.done.Shape != "cold" || r.done.Native == native || got["users"] != "1" || r.done.Context.Header != "snapshot" {
		t.Fatalf("turn after a fresh start mid-turn: shape %s native %s (was %s) reply %v context %+v", r.done.Shape, r.done.Native, native, got, r.done.Context)
	}
}

// records reads the built-in agent's --record file: one entry per
// session/new, session/load and session/prompt it received.
func records(t *testing.T, path string) []map[string]any {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		var rec map[string]any
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatal(err)
		}
		out = append(out, rec)
	}
	return out
}

func methods(recs []map[string]any) map[string]int {
	n := map[string]int{}
	for _, r := range recs {
		n[r["method"].(string)]++
	}
	return n
}

// Restore with an agent that can only load calls session/load exactly once
// per new process and keeps the history the agent replays during the load
// out of the caller's stream.
func TestRestoreLoadsOnceAndHidesReplay(t *testing.T) {
	var rec string
	h := newHarness(t, func(c *config.Config) {
		rec = filepath.Join(c.StateDir, "record.jsonl")
		c.Bindings[0].Args = append(c.Bindings[0].Args, "--record", rec, "--no-resume")
	})
	first := h.mention("ch", "b-builtin", "q1", "@agent one")
	reply(t, first)
	reply(t, h.mention("ch", "b-builtin", "q2", "@agent two"))
	h.restart()
	r := h.mention("ch", "b-builtin", "q3", "@agent three")
	reply(t, r)
	reply(t, h.mention("ch", "b-builtin", "q4", "@agent four"))

	if r.done.Shape != "restored" || r.done.Native != first.done.Native {
		t.Fatalf("after restart: shape %s native %s (was %s)", r.done.Shape, r.done.Native, first.done.Native)
	}
	if got := methods(records(t, rec)); got["session/load"] != 1 || got["session/new"] != 1 || got["session/prompt"] != 4 {
		t.Fatalf("agent received %v; want one session/new, one session/load, four prompts", got)
	}
	// The load replays two earlier turns as user/agent chunks: none of them
	// may reach the caller, whose stream holds only this turn's reply.
	for _, u := range r.updates {
		if u.Update != nil && u.Update.Kind != "agent_message_chunk" && u.Update.Kind != "usage_update" {
			t.Fatalf("restored turn streamed a %q update: %+v", u.Update.Kind, u.Update)
		}
		if u.Update != nil && strings.Contains(u.Update.Text, "turn=1 ") {
			t.Fatalf("restored turn streamed the replayed history: %q", u.Update.Text)
		}
	}
	if !strings.Contains(r.done.Text, "turn=3 ") {
		t.Fatalf("restored reply %q, want the agent's third turn", r.done.Text)
	}
}

// A failed session/load falls back to a new session: a cold turn with the
// replay and a snapshot, not a gap.
func TestFailedLoadFallsBackToCold(t *testing.T) {
	h := newHarness(t)
	h.say("ch", "a", 3)
	first := h.mention("ch", "b-builtin", "q1", "@agent one")
	reply(t, first)
	h.close()
	// The next process refuses every session/load and offers no resume.
	h.cfg.Bindings[0].Args = append(h.cfg.Bindings[0].Args, "--fault", "load-fail", "--no-resume")
	h.open()
	r := h.mention("ch", "b-builtin", "q2", "@agent two")
	got := reply(t, r)
	if r.done.Shape != "cold" || r.done.Native == first.done.Native || got["users"] != "2" || got["assistants"] != "1" {
		t.Fatalf("after a failed load: shape %s native %s reply %v", r.done.Shape, r.done.Native, got)
	}
	if r.done.Context.Header != "snapshot" {
		t.Fatalf("after a failed load the new session got %q context, want a snapshot", r.done.Context.Header)
	}
	if n := testutil.ToFloat64(h.m.SessionRestores.WithLabelValues("load", "failed")); n != 1 {
		t.Fatalf("failed restores = %v, want 1", n)
	}
}

// TestEvictingColdTurnAddsNoCommit: a cold turn that evicts the only live
// process, with no spare, makes two commits: its run accepted and started
// (durable before Submit returns), then its exchange with its run's end,
// which carries the new agent's record; the evicted agent's record is
// dropped in one of them or a later one, never in a commit of its own
// (issue 24). A crash before the second leaves the new agent unrecorded:
// the next daemon's startup sweep finds it by its mark.
func TestEvictingColdTurnAddsNoCommit(t *testing.T) {
	h := newHarness(t, func(c *config.Config) { c.MaxLive = 1 })
	r1 := h.mention("ch-a", "b-builtin", "q1", "@agent first")
	reply(t, r1)
	h.post(channel.Message{ID: "q2", Channel: "ch-b", Author: "carla", AuthorKind: channel.KindUser, Body: "@agent second"})
	before := h.st.Commits()
	r2 := h.turn(apitype.TurnRequest{Channel: "ch-b", Binding: "b-builtin", MessageID: "q2", Text: "@agent second"})
	reply(t, r2)
	if r2.done.Shape != "cold" || len(h.evictions()) != 1 {
		t.Fatalf("second turn %s, evictions %v; want a cold turn that evicted one", r2.done.Shape, h.evictions())
	}
	// The evicted agent's exit is handled off the turn's path: wait for it.
	testkit.WaitFor(t, 10*time.Second, func() bool {
		ag, err := h.st.Agents()
		return err == nil && !slices.ContainsFunc(ag, func(a store.AgentRecord) bool { return a.Pid == r1.start.Pid })
	}, testkit.Waiting("the evicted agent %d to be forgotten", r1.start.Pid))
	n := h.st.Commits() - before
	if n > 2 {
		t.Fatalf("the cold turn that evicted made %d commits, want at most 2", n)
	}
	t.Logf("the cold turn that evicted made %d commits", n)
	// And the record is gone from the file once the store closes.
	h.close()
	st, err := store.Open(filepath.Join(h.dir, "residentd.db"), store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	ag, err := st.Agents()
	if err != nil || len(ag) != 0 {
		t.Fatalf("agent records after close: %+v %v, want none", ag, err)
	}
}
