package daemon_test

import (
	"context"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/residentd/residentd/apitype"
	"github.com/residentd/residentd/internal/channel"
	"github.com/residentd/residentd/internal/config"
	"github.com/residentd/residentd/internal/session"
)

// threadScope makes the first binding keep a session per thread, recording
// what its agent gets; fork adds --fork (it advertises session/fork).
func threadScope(rec *string, fork bool) func(*config.Config) {
	return func(c *config.Config) {
		recordTo(rec)(c)
		c.Bindings[0].Scope = config.ScopeThread
		if fork {
			c.Bindings[0].Args = append(c.Bindings[0].Args, "--fork")
		}
	}
}

// threadMention posts a mention inside the thread of root and asks the
// built-in binding to answer it.
func (h *harness) threadMention(ch, root, id, text string) result {
	h.t.Helper()
	h.post(channel.Message{ID: id, Channel: ch, ThreadRoot: root, Author: "carla", Body: text})
	return h.turn(apitype.TurnRequest{Channel: ch, Binding: "b-builtin", MessageID: id, ThreadRoot: &root, Text: text})
}

// forks lists the session/fork lines the agent recorded.
func forks(t *testing.T, path string) []map[string]any {
	var out []map[string]any
	for _, r := range records(t, path) {
		if r["method"] == "session/fork" {
			out = append(out, r)
		}
	}
	return out
}

func (h *harness) keyWatermark(k session.Key, thread string) channel.Watermark {
	h.t.Helper()
	w, _, err := h.st.Watermark(channel.WatermarkKey{Key: k, Thread: thread})
	if err != nil {
		h.t.Fatal(err)
	}
	return w
}

// TestThreadScope: with scope thread, a mention in a thread runs on a key
// of its own. Its first session is a fork of the channel's when the agent
// advertises session/fork (the agent's history goes on from the channel's,
// the thread's block leaves out the root the channel session saw), and a
// new session with the thread's snapshot otherwise. The channel's session
// goes on warm, with its watermarks as they were; each key has its own row
// in the sessions listing.
func TestThreadScope(t *testing.T) {
	for _, fork := range []bool{true, false} {
		t.Run(fmt.Sprintf("fork=%v", fork), func(t *testing.T) {
			var rec string
			h := newHarness(t, threadScope(&rec, fork))
			chKey := session.Key{Channel: "ch", Binding: "b-builtin"}
			thKey := session.Key{Channel: "ch", Binding: "b-builtin", Thread: "c2"}
			h.say("ch", "c", 3)
			q1 := h.mention("ch", "b-builtin", "q1", "@agent one")
			reply(t, q1)
			h.say("ch", "d", 1)
			q2 := h.mention("ch", "b-builtin", "q2", "@agent two")
			if got := reply(t, q2); q2.done.Shape != "warm" || got["turn"] != "2" {
				t.Fatalf("the channel's second turn: shape %s reply %v", q2.done.Shape, got)
			}
			chNative := q2.done.Native
			chMain := h.keyWatermark(chKey, "")

			h.post(channel.Message{ID: "t1", Channel: "ch", ThreadRoot: "c2", Author: "aiko", Body: "the locale again?"},
				channel.Message{ID: "t2", Channel: "ch", ThreadRoot: "c2", Author: "ben", Body: "no, the cache key"})
			q3 := h.threadMention("ch", "c2", "q3", "@agent which one is it?")
			got := reply(t, q3)
			thNative := q3.done.Native
			if thNative == chNative {
				t.Fatalf("the thread's session is the channel's native %s", chNative)
			}
			fk := forks(t, rec)
			if fork {
				// The fork starts from the channel's two turns; it saw the
				// root in the channel, so the thread's block is its replies.
				if q3.done.Shape != "restored" || got["turn"] != "3" || got["framing"] != "no" {
					t.Fatalf("forked thread turn: shape %s reply %v, want restored turn=3 framing=no", q3.done.Shape, got)
				}
				if len(fk) != 1 || fk[0]["source"] != chNative || fk[0]["session"] != thNative || fk[0]["turns"] != float64(2) {
					t.Fatalf("fork records %v, want one of %s (2 turns) into %s", fk, chNative, thNative)
				}
				if !reflect.DeepEqual(q3.done.Context.Shown, []string{"t1", "t2"}) {
					t.Fatalf("forked thread block showed %v, want the replies t1 t2 (the channel session saw the root)", q3.done.Context.Shown)
				}
			} else {
				if q3.done.Shape != "cold" || got["turn"] != "1" || got["framing"] != "yes" {
					t.Fatalf("thread turn without fork: shape %s reply %v, want cold turn=1 framing=yes", q3.done.Shape, got)
				}
				if len(fk) != 0 {
					t.Fatalf("an agent without fork was asked to fork: %v", fk)
				}
				if !reflect.DeepEqual(q3.done.Context.Shown, []string{"c2", "t1", "t2"}) || q3.done.Context.Header != "snapshot" {
					t.Fatalf("thread block %+v, want the snapshot c2 t1 t2", q3.done.Context)
				}
			}
			if n, err := h.st.NativeID(thKey); err != nil || n != thNative {
				t.Fatalf("thread key's saved session %q (%v), want %s", n, err, thNative)
			}
			if n, err := h.st.NativeID(chKey); err != nil || n != chNative {
				t.Fatalf("channel key's saved session %q (%v), want %s", n, err, chNative)
			}
			if w := h.keyWatermark(thKey, ""); fork && (w.Native != thNative || w.Seq < chMain.Seq) {
				t.Fatalf("the fork's main watermark %+v, want the channel's %+v for %s", w, chMain, thNative)
			}
			if w := h.keyWatermark(chKey, ""); !reflect.DeepEqual(w, chMain) {
				t.Fatalf("the thread's turn moved the channel's watermark: %+v, was %+v", w, chMain)
			}
			if w := h.keyWatermark(chKey, "c2"); w.Native != "" {
				t.Fatalf("the thread's turn filed a watermark under the channel's key: %+v", w)
			}

			rows := h.d.Sessions()
			slices.SortFunc(rows, func(a, b apitype.Session) int { return strings.Compare(a.ThreadRoot, b.ThreadRoot) })
			wantBy := map[bool]string{true: "fork", false: ""}[fork]
			if len(rows) != 2 || rows[0].ThreadRoot != "" || rows[0].Native != chNative || rows[1].ThreadRoot != "c2" || rows[1].Native != thNative || rows[1].RestoredBy != wantBy {
				t.Fatalf("sessions %+v, want the channel's and the thread's (restored_by %q)", rows, wantBy)
			}

			// The channel goes on warm in its own session.
			h.say("ch", "e", 1)
			q4 := h.mention("ch", "b-builtin", "q4", "@agent three")
			if got := reply(t, q4); q4.done.Shape != "warm" || q4.done.Native != chNative || got["turn"] != "3" || !reflect.DeepEqual(q4.done.Context.Shown, []string{"e1"}) {
				t.Fatalf("the channel's next turn: shape %s native %s reply %v shown %v, want warm on %s, turn=3, e1", q4.done.Shape, q4.done.Native, got, q4.done.Context.Shown, chNative)
			}
			// And the thread in its own.
			h.post(channel.Message{ID: "t3", Channel: "ch", ThreadRoot: "c2", Author: "aiko", Body: "and the ja pages"})
			q5 := h.threadMention("ch", "c2", "q5", "@agent and now?")
			want := map[bool]string{true: "4", false: "2"}[fork]
			if got := reply(t, q5); q5.done.Shape != "warm" || q5.done.Native != thNative || got["turn"] != want || !reflect.DeepEqual(q5.done.Context.Shown, []string{"t3"}) {
				t.Fatalf("the thread's next turn: shape %s native %s reply %v shown %v, want warm on %s, turn=%s, t3", q5.done.Shape, q5.done.Native, got, q5.done.Context.Shown, thNative, want)
			}
			// A mention outside any thread of a thread-scoped binding is the
			// channel's, and a binding of scope channel never forks.
			if len(forks(t, rec)) != len(fk) {
				t.Fatalf("a later turn forked again: %v", forks(t, rec))
			}
		})
	}
}

// TestThreadScopeChannelBinding: with the default scope a thread's mention
// runs on the channel's key and session, as before.
func TestThreadScopeChannelBinding(t *testing.T) {
	var rec string
	h := newHarness(t, recordTo(&rec), func(c *config.Config) { c.Bindings[0].Args = append(c.Bindings[0].Args, "--fork") })
	h.say("ch", "c", 2)
	q1 := h.mention("ch", "b-builtin", "q1", "@agent one")
	reply(t, q1)
	q2 := h.threadMention("ch", "c1", "q2", "@agent in the thread")
	if got := reply(t, q2); q2.done.Shape != "warm" || q2.done.Native != q1.done.Native || got["turn"] != "2" {
		t.Fatalf("thread mention with scope channel: shape %s native %s reply %v, want the channel's warm session", q2.done.Shape, q2.done.Native, got)
	}
	if rows := h.d.Sessions(); len(rows) != 1 || rows[0].ThreadRoot != "" {
		t.Fatalf("sessions %+v, want the channel's only", rows)
	}
	if fk := forks(t, rec); len(fk) != 0 {
		t.Fatalf("scope channel forked: %v", fk)
	}
}

// TestThreadKeyLifecycle: a thread key is a key like any other. It is
// evicted by capacity and reaped idle, its next process restores the
// thread's own session (never a second fork), as does a restarted daemon,
// and start fresh of it drops the thread's session alone: the next mention
// in the thread forks the channel's session again.
func TestThreadKeyLifecycle(t *testing.T) {
	var rec string
	var skew atomic.Int64
	now := func() time.Time { return time.Now().Add(time.Duration(skew.Load())) }
	h := newHarnessAt(t, now, threadScope(&rec, true), func(c *config.Config) { c.MaxLive = 2 })
	chKey := session.Key{Channel: "ch", Binding: "b-builtin"}
	thKey := session.Key{Channel: "ch", Binding: "b-builtin", Thread: "c1"}
	h.say("ch", "c", 2)
	reply(t, h.mention("ch", "b-builtin", "q1", "@agent one"))
	q2 := h.threadMention("ch", "c1", "q2", "@agent in the thread")
	if got := reply(t, q2); got["turn"] != "2" || q2.done.Shape != "restored" {
		t.Fatalf("first thread turn: shape %s reply %v, want a fork (turn=2)", q2.done.Shape, got)
	}
	thNative := q2.done.Native
	q3 := h.mention("ch", "b-builtin", "q3", "@agent two") // the thread's key is now the least recently used
	chNative := q3.done.Native
	reply(t, h.mention("ch-other", "b-builtin", "o1", "@agent elsewhere"))
	if ev := h.evictions(); !slices.Contains(ev, thKey.String()+" capacity") {
		t.Fatalf("evictions %v, want the thread's key by capacity", ev)
	}

	q4 := h.threadMention("ch", "c1", "q4", "@agent back in the thread")
	if got := reply(t, q4); q4.done.Shape != "restored" || q4.done.Native != thNative || got["turn"] != "3" {
		t.Fatalf("after eviction: shape %s native %s reply %v, want %s restored at turn=3", q4.done.Shape, q4.done.Native, got, thNative)
	}
	if rows := h.d.Sessions(); !slices.ContainsFunc(rows, func(s apitype.Session) bool { return s.ThreadRoot == "c1" && s.RestoredBy == "resume" }) {
		t.Fatalf("sessions %+v, want the thread's restored by resume", rows)
	}

	h.restart()
	q5 := h.threadMention("ch", "c1", "q5", "@agent after the restart")
	if got := reply(t, q5); q5.done.Shape != "restored" || q5.done.Native != thNative || got["turn"] != "4" {
		t.Fatalf("after restart: shape %s native %s reply %v, want %s restored at turn=4", q5.done.Shape, q5.done.Native, got, thNative)
	}
	if fk := forks(t, rec); len(fk) != 1 {
		t.Fatalf("forks %v, want only the thread's first", fk)
	}

	skew.Store(int64(time.Hour))
	h.d.ReapIdle()
	if ev := h.evictions(); !slices.Contains(ev, thKey.String()+" idle") {
		t.Fatalf("evictions %v, want the thread's key reaped idle", ev)
	}
	skew.Store(0)

	if _, err := h.d.Fresh(thKey); err != nil {
		t.Fatal(err)
	}
	if n, _ := h.st.NativeID(thKey); n != "" {
		t.Fatalf("start fresh of the thread kept its session %q", n)
	}
	if n, _ := h.st.NativeID(chKey); n != chNative {
		t.Fatalf("start fresh of the thread changed the channel's session: %q, want %s", n, chNative)
	}
	q6 := h.threadMention("ch", "c1", "q6", "@agent start over")
	got := reply(t, q6)
	fk := forks(t, rec)
	if q6.done.Native == thNative || q6.done.Shape != "restored" || got["turn"] != "3" || len(fk) != 2 || fk[1]["source"] != chNative {
		t.Fatalf("after start fresh: shape %s native %s reply %v forks %v, want a new fork of %s (turn=3)", q6.done.Shape, q6.done.Native, got, fk, chNative)
	}
	q7 := h.mention("ch", "b-builtin", "q7", "@agent channel again")
	if got := reply(t, q7); q7.done.Native != chNative || got["turn"] != "3" {
		t.Fatalf("the channel after the thread's start fresh: native %s reply %v, want %s at turn=3", q7.done.Native, got, chNative)
	}
}

// TestThreadForkWhileChannelBusy: the fork is made on the thread key's own
// process from the channel's saved session, so a channel turn that runs
// meanwhile neither blocks it nor takes part in it: the thread answers
// while the channel's turn still runs, and the channel's process goes on
// with its own session afterwards.
func TestThreadForkWhileChannelBusy(t *testing.T) {
	var rec string
	h := newHarness(t, threadScope(&rec, true))
	h.say("ch", "c", 2)
	q1 := h.mention("ch", "b-builtin", "q1", "@agent one")
	reply(t, q1)
	chNative := q1.done.Native

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	busy := make(chan result, 1)
	// Not pushed: its body would show in the channel's next block, and
	// the agent would hang on that turn too.
	go func() {
		busy <- h.turnCtx(ctx, apitype.TurnRequest{Channel: "ch", Binding: "b-builtin", MessageID: "q2", Text: "@agent [[fault:hang-turn]] take your time"})
	}()
	waitFor(t, func() bool {
		return slices.ContainsFunc(h.d.Sessions(), func(s apitype.Session) bool { return s.ThreadRoot == "" && s.State == "busy" })
	}, func() string { return fmt.Sprintf("the channel's turn never ran: %+v", h.d.Sessions()) })

	q3 := h.threadMention("ch", "c1", "q3", "@agent meanwhile, in the thread")
	if got := reply(t, q3); q3.done.Shape != "restored" || got["turn"] != "2" || q3.done.Native == chNative {
		t.Fatalf("thread turn while the channel's runs: shape %s native %s reply %v, want a fork of %s at turn=2", q3.done.Shape, q3.done.Native, got, chNative)
	}
	if fk := forks(t, rec); len(fk) != 1 || fk[0]["source"] != chNative {
		t.Fatalf("forks %v, want one of %s", fk, chNative)
	}
	select {
	case r := <-busy:
		t.Fatalf("the channel's hung turn ended while the thread answered: %+v %v", r.done, r.err)
	default:
	}
	cancel()
	if r := <-busy; r.err == nil {
		t.Fatalf("the cancelled channel turn succeeded: %+v", r.done)
	}
	q4 := h.mention("ch", "b-builtin", "q4", "@agent two")
	if got := reply(t, q4); q4.done.Shape != "warm" || q4.done.Native != chNative || got["turn"] != "2" {
		t.Fatalf("the channel after its cancelled turn: shape %s native %s reply %v, want warm on %s at turn=2 (the cancelled turn is not one)", q4.done.Shape, q4.done.Native, got, chNative)
	}
}
