package daemon_test

import (
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/residentd/residentd/apitype"
	"github.com/residentd/residentd/internal/config"
	"github.com/residentd/residentd/internal/session"
)

// TestRestoreOrder: a new process for a key with a saved session tries
// session/resume, then session/load, then starts cold, each step only when
// the agent offers it and the one before failed; the sessions listing and
// the metrics say which way restored it.
func TestRestoreOrder(t *testing.T) {
	for _, tc := range []struct {
		name   string
		flags  []string // the restarted agent's
		method string   // the binding's restore_method
		shape  string
		how    string   // restored_by
		asked  []string // restore methods the agent saw, in order
	}{
		{"resume", nil, "", "restored", "resume", []string{"session/resume"}},
		{"no resume: load", []string{"--no-resume"}, "", "restored", "load", []string{"session/load"}},
		{"resume fails: load", []string{"--fault", "resume-fail"}, "", "restored", "load", []string{"session/resume", "session/load"}},
		{"both fail: cold", []string{"--fault", "restore-fail"}, "", "cold", "", []string{"session/resume", "session/load"}},
		{"neither offered: cold", []string{"--no-resume", "--no-load"}, "", "cold", "", nil},
		{"restore_method load", nil, config.RestoreLoad, "restored", "load", []string{"session/load"}},
		{"restore_method resume, not offered: cold", []string{"--no-resume"}, config.RestoreResume, "cold", "", nil},
		{"restore_method resume fails: no load", []string{"--fault", "resume-fail"}, config.RestoreResume, "cold", "", []string{"session/resume"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var rec string
			h := newHarness(t, func(c *config.Config) {
				rec = filepath.Join(c.StateDir, "record.jsonl")
				c.Bindings[0].Args = append(c.Bindings[0].Args, "--record", rec)
				c.Bindings[0].RestoreMethod = tc.method
			})
			first := h.mention("ch", "b-builtin", "q1", "@agent one")
			reply(t, first)
			h.close()
			h.cfg.Bindings[0].Args = append(h.cfg.Bindings[0].Args, tc.flags...)
			h.open()
			r := h.mention("ch", "b-builtin", "q2", "@agent two")
			got := reply(t, r)
			if r.done.Shape != tc.shape || (tc.shape == "restored") != (r.done.Native == first.done.Native) {
				t.Fatalf("shape %s native %s (was %s), want %s", r.done.Shape, r.done.Native, first.done.Native, tc.shape)
			}
			if tc.shape == "restored" && got["turn"] != "2" {
				t.Fatalf("restored reply %v: the agent did not go on with its session", got)
			}
			var asked []string
			for _, m := range records(t, rec) {
				if s, _ := m["method"].(string); s == "session/resume" || s == "session/load" {
					asked = append(asked, s)
				}
			}
			if strings.Join(asked, ",") != strings.Join(tc.asked, ",") {
				t.Fatalf("the agent was asked %q, want %q", asked, tc.asked)
			}
			ss := h.d.Sessions()
			if len(ss) != 1 || ss[0].RestoredBy != tc.how {
				t.Fatalf("sessions %+v, want restored_by %q", ss, tc.how)
			}
			if tc.how != "" {
				if n := testutil.ToFloat64(h.m.SessionRestores.WithLabelValues(tc.how, "ok")); n != 1 {
					t.Fatalf("restores{%s,ok} = %v, want 1", tc.how, n)
				}
			}
		})
	}
}

// TestRestoreFailuresStopRestores: after restore_failures failed restores
// in a row the binding stops trying (status, sessions listing, metric), and
// its next processes start cold without asking.
func TestRestoreFailuresStopRestores(t *testing.T) {
	var rec string
	h := newHarness(t, func(c *config.Config) {
		c.RestoreFailures = 2
		c.MaxLive = 1 // each channel's turn evicts the other's process
		rec = filepath.Join(c.StateDir, "record.jsonl")
		c.Bindings[0].Args = append(c.Bindings[0].Args, "--record", rec, "--no-resume", "--fault", "load-fail")
	})
	a0 := h.mention("ch-a", "b-builtin", "a0", "@agent zero")
	reply(t, a0)
	reply(t, h.mention("ch-b", "b-builtin", "b0", "@agent zero"))
	for i, want := range []int{1, 2, 2, 2} {
		ch := []string{"ch-a", "ch-b"}[i%2]
		r := h.mention(ch, "b-builtin", fmt.Sprint("m", i), "@agent again")
		reply(t, r)
		if loads := methods(records(t, rec))["session/load"]; r.done.Shape != "cold" || loads != want {
			t.Fatalf("turn %d on %s: shape %s, %d loads asked; want cold and %d", i, ch, r.done.Shape, loads, want)
		}
	}
	st := h.d.Status()
	if len(st.RestoreStopped) != 1 || st.RestoreStopped[0].Binding != "b-builtin" || st.RestoreStopped[0].Failures != 2 ||
		!strings.Contains(st.RestoreStopped[0].LastError, "induced load failure") {
		t.Fatalf("status restore_stopped %+v", st.RestoreStopped)
	}
	if ss := h.d.Sessions(); len(ss) == 0 || !ss[0].RestoreStopped {
		t.Fatalf("sessions %+v: want restore_stopped", ss)
	}
	if v := testutil.ToFloat64(h.m.RestoreStopped.WithLabelValues("b-builtin")); v != 1 {
		t.Fatalf("residentd_restore_stopped = %v, want 1", v)
	}
	// The agent answered the loads with an error, not that it does not
	// know the sessions: each key's first session is kept aside for a
	// restore after a restart, and the listing says why none was tried.
	if a, ok, _ := h.st.Aside(session.Key{Channel: "ch-a", Binding: "b-builtin"}); !ok || a.Native != a0.done.Native {
		t.Fatalf("ch-a's set-aside session %+v %v, want its first %s", a, ok, a0.done.Native)
	}
	if r := h.sessionOf("ch-b").Restore; r == nil || len(r.Steps) != 0 || r.SetAside == "" || !strings.Contains(r.Message, "restores of this binding stopped") {
		t.Fatalf("listing restore %+v after restores stopped", r)
	}
}

// TestRestoreThatKillsTheAgentCounts: a saved session whose restore makes
// the agent exit fails those turns, counts as a failed restore, and after
// restore_failures of them the key's next process starts cold: the key is
// not broken for good.
func TestRestoreThatKillsTheAgentCounts(t *testing.T) {
	h := newHarness(t, func(c *config.Config) { c.RestoreFailures = 2 })
	first := h.mention("ch", "b-builtin", "q0", "@agent zero")
	reply(t, first)
	h.close()
	h.cfg.Bindings[0].Args = append(h.cfg.Bindings[0].Args, "--fault", "exit-restore")
	h.backoffBase, h.backoffCap = time.Nanosecond, time.Nanosecond // no crash-loop wait in this test
	h.open()
	for i := range 2 {
		r := h.mention("ch", "b-builtin", fmt.Sprint("q", i+1), "@agent again")
		if r.err == nil || !strings.Contains(r.err.Error(), "agent exited during session/resume") {
			t.Fatalf("turn %d: %v, want the restore's exit", i+1, r.err)
		}
	}
	if st := h.d.Status(); len(st.RestoreStopped) != 1 {
		t.Fatalf("restore_stopped %+v after two restores that killed the agent", st.RestoreStopped)
	}
	r := h.mention("ch", "b-builtin", "q3", "@agent now?")
	if reply(t, r); r.done.Shape != "cold" {
		t.Fatalf("after the restores stopped: shape %s, want cold", r.done.Shape)
	}
}

// restorings are the restoring events of a turn, in order.
func restorings(r result) []apitype.Event {
	var out []apitype.Event
	for _, ev := range r.updates {
		if ev.Event == apitype.EventRestoring {
			out = append(out, ev)
		}
	}
	return out
}

// sessionOf is the listing's row of channel ch.
func (h *harness) sessionOf(ch string) apitype.Session {
	h.t.Helper()
	for _, s := range h.d.Sessions() {
		if s.Channel == ch {
			return s
		}
	}
	h.t.Fatalf("no session of %s in %+v", ch, h.d.Sessions())
	return apitype.Session{}
}

// A restore slower than restore_timeout is not given up while the agent
// reports progress on the session: each thought of a slow resume, each
// message of a slow load's replay starts the wait again. The agent takes
// --steps × --step, more than restore_timeout, by construction.
func TestRestoreWaitsWhileItProgresses(t *testing.T) {
	for _, tc := range []struct {
		name, how string
		flags     []string
	}{
		{"slow resume", "resume", []string{"--fault", "resume-slow"}},
		{"slow load", "load", []string{"--no-resume", "--fault", "load-slow"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var rec string
			h := newHarness(t, recordTo(&rec), func(c *config.Config) { c.RestoreTimeout = config.Duration(time.Second) })
			first := h.mention("ch", "b-builtin", "q1", "@agent one")
			reply(t, first)
			h.close()
			h.cfg.Bindings[0].Args = append(h.cfg.Bindings[0].Args, append(tc.flags, "--steps", "25", "--step", "100ms")...)
			h.open()
			r := h.mention("ch", "b-builtin", "q2", "@agent two")
			if got := reply(t, r); r.done.Shape != "restored" || r.done.Native != first.done.Native || got["turn"] != "2" {
				t.Fatalf("turn after a slow restore: shape %s native %s (was %s), reply %v", r.done.Shape, r.done.Native, first.done.Native, got)
			}
			evs := restorings(r)
			if len(evs) != 1 || evs[0].Method != tc.how || evs[0].Result != "" {
				t.Fatalf("restoring events %+v, want one %s that was not given up", evs, tc.how)
			}
			s := h.sessionOf("ch")
			if s.RestoredBy != tc.how || s.Restore == nil || len(s.Restore.Steps) != 1 || s.Restore.Steps[0].Result != apitype.RestoreOK || s.Restore.Steps[0].Seconds < 1 {
				t.Fatalf("listing %+v restore %+v, want one %s step, ok, longer than restore_timeout", s, s.Restore, tc.how)
			}
		})
	}
}

// A way that timed out leaves its process: the session it may still be
// opening is closed there, the process stopped, and the next way runs on
// another one (a spare when there is one) once it is gone. The listing and
// the run's events say which ways ran where and how they ended.
func TestTimedOutWayRunsNextOnAnotherProcess(t *testing.T) {
	for _, spares := range []int{0, 2} {
		t.Run(fmt.Sprintf("spares %d", spares), func(t *testing.T) {
			var rec string
			tweaks := []func(*config.Config){recordTo(&rec), func(c *config.Config) { c.RestoreTimeout = config.Duration(300 * time.Millisecond) }}
			if spares > 0 {
				tweaks = append(tweaks, withSpares(spares))
			}
			h := newHarness(t, tweaks...)
			b := len(h.cfg.Bindings) - 1 // b-builtin: withSpares puts b-idle first
			first := h.mention("ch", "b-builtin", "q1", "@agent one")
			reply(t, first)
			h.close()
			for len(h.spares) > 0 {
				<-h.spares // the stopped daemon's
			}
			h.cfg.Bindings[b].Args = append(h.cfg.Bindings[b].Args, "--fault", "resume-hang")
			h.open()
			var ready []int
			if spares > 0 {
				reply(t, h.mention("ch-warm", "b-builtin", "w1", "@agent warm up"))
				for range spares {
					ready = append(ready, h.nextSpare().pid)
				}
			}
			r := h.mention("ch", "b-builtin", "q2", "@agent two")
			if got := reply(t, r); r.done.Shape != "restored" || r.done.Native != first.done.Native || got["turn"] != "2" {
				t.Fatalf("turn after a resume that never answers: shape %s native %s, reply %v", r.done.Shape, r.done.Native, got)
			}
			evs := restorings(r)
			if len(evs) != 3 || evs[0].Method != "resume" || evs[1].Result != apitype.RestoreTimeout || evs[1].Pid != evs[0].Pid ||
				evs[2].Method != "load" || evs[2].Pid == evs[0].Pid || evs[2].Pid != r.start.Pid {
				t.Fatalf("restoring events %+v, want resume, its timeout, load on the turn's own other process %d", evs, r.start.Pid)
			}
			p1, p2 := evs[0].Pid, evs[2].Pid
			if spares > 0 && (p1 != ready[0] || p2 != ready[1]) {
				t.Fatalf("resume on %d, load on %d; want the spares %v, oldest first", p1, p2, ready)
			}
			// What each process was asked of the session, in order.
			var asked []string
			for _, m := range records(t, rec) {
				if m["session"] == first.done.Native && m["method"] != "session/prompt" {
					asked = append(asked, fmt.Sprintf("%s@%v", m["method"], m["pid"]))
				}
			}
			want := []string{fmt.Sprintf("session/resume@%d", p1), fmt.Sprintf("session/close@%d", p1), fmt.Sprintf("session/load@%d", p2)}
			if !slices.Equal(asked[len(asked)-3:], want) {
				t.Fatalf("the agents were asked %q of the session, want it to end %q", asked, want)
			}
			s := h.sessionOf("ch")
			if st := s.Restore.Steps; s.Pid != p2 || len(st) != 2 || st[0].Result != apitype.RestoreTimeout || st[0].Pid != p1 || st[1].Result != apitype.RestoreOK || st[1].Pid != p2 ||
				s.Restore.SetAside != "" || !strings.Contains(st[0].Message, "no sign of progress") {
				t.Fatalf("listing %+v, restore %+v", s, s.Restore)
			}
		})
	}
}

// A restore given up for time loses nothing: the key's saved session is
// set aside (not replaced by the new session the turn goes on), and the
// key's next restore reopens it first, giving it the turns the stand-in
// answered meanwhile and its own watermark back; the stand-in is then no
// longer kept.
func TestGivenUpRestoreKeepsTheSessionAside(t *testing.T) {
	var rec string
	h := newHarness(t, recordTo(&rec), func(c *config.Config) { c.RestoreTimeout = config.Duration(300 * time.Millisecond) })
	k := session.Key{Channel: "ch", Binding: "b-builtin"}
	h.say("ch", "l", 2)
	first := h.mention("ch", "b-builtin", "q1", "@agent one")
	reply(t, first)
	reply(t, h.mention("ch", "b-builtin", "q2", "@agent two"))
	saved := first.done.Native
	args := h.cfg.Bindings[0].Args
	h.close()
	h.cfg.Bindings[0].Args = append(append([]string(nil), args...), "--fault", "restore-hang")
	h.open()

	// Both ways hang: each given up on a process of its own, the turn goes
	// cold on a third.
	h.say("ch", "x", 1)
	cold := h.mention("ch", "b-builtin", "q3", "@agent three")
	reply(t, cold)
	evs := restorings(cold)
	if cold.done.Shape != "cold" || cold.done.Native == saved || len(evs) != 5 ||
		evs[1].Result != apitype.RestoreTimeout || evs[3].Method != "load" || evs[3].Result != apitype.RestoreTimeout ||
		evs[4].Method != "new" || evs[4].SetAside != saved || cold.start.Pid == evs[0].Pid || cold.start.Pid == evs[2].Pid {
		t.Fatalf("given-up restore: shape %s native %s, restoring %+v", cold.done.Shape, cold.done.Native, evs)
	}
	s := h.sessionOf("ch")
	if s.RestoredBy != "" || s.Restore == nil || s.Restore.SetAside != saved || len(s.Restore.Steps) != 2 {
		t.Fatalf("listing %+v restore %+v, want the saved session set aside", s, s.Restore)
	}
	if n, _ := h.st.NativeID(k); n != cold.done.Native {
		t.Fatalf("the key's native id is %s, want the stand-in %s meanwhile", n, cold.done.Native)
	}
	if a, ok, err := h.st.Aside(k); !ok || err != nil || a.Native != saved || a.Since != 4 {
		t.Fatalf("set aside %+v %v %v, want %s since the 4 turns it holds", a, ok, err, saved)
	}
	standin := h.mention("ch", "b-builtin", "q4", "@agent four")
	if reply(t, standin); standin.done.Shape != "warm" {
		t.Fatalf("the stand-in's next turn: %s", standin.done.Shape)
	}

	// The agent answers again: the set-aside session comes back, with the
	// two exchanges it missed, and sees from its own watermark.
	h.close()
	h.cfg.Bindings[0].Args = args
	h.open()
	h.say("ch", "y", 1)
	back := h.mention("ch", "b-builtin", "q5", "@agent five")
	got := reply(t, back)
	if back.done.Shape != "restored" || back.done.Native != saved || got["turn"] != "3" || got["users"] != "2" || got["assistants"] != "2" {
		t.Fatalf("the set-aside session's return: shape %s native %s reply %v; want %s going on at turn 3 with the 2 exchanges it missed", back.done.Shape, back.done.Native, got, saved)
	}
	// It saw l1, l2 (its first snapshot); x1 and y1 are news to it, though
	// the stand-in saw x1.
	if ctx := back.done.Context; ctx == nil || !slices.Equal(ctx.Shown, []string{"x1", "y1"}) {
		t.Fatalf("the set-aside session's block showed %+v, want x1 and y1", back.done.Context)
	}
	s = h.sessionOf("ch")
	if s.RestoredBy != "resume" || s.Restore == nil || s.Restore.CaughtUp != 4 || s.Restore.SetAside != "" {
		t.Fatalf("listing %+v restore %+v, want resumed, 4 turns caught up", s, s.Restore)
	}
	if n, _ := h.st.NativeID(k); n != saved {
		t.Fatalf("the key's native id is %s, want %s again", n, saved)
	}
	if a, ok, _ := h.st.Aside(k); ok {
		t.Fatalf("still set aside: %+v", a)
	}
	if got := reply(t, h.mention("ch", "b-builtin", "q6", "@agent six")); got["turn"] != "4" {
		t.Fatalf("its next turn: %v, want turn 4", got)
	}
}

// A saved session the agent says it does not know is not kept: the turn
// goes cold on the same process (an answer, not a timeout), and the key's
// next restore reopens the new session.
func TestUnknownSessionIsNotKept(t *testing.T) {
	h := newHarness(t)
	k := session.Key{Channel: "ch", Binding: "b-builtin"}
	first := h.mention("ch", "b-builtin", "q1", "@agent one")
	reply(t, first)
	h.close()
	// An agent that keeps its sessions elsewhere: it knows none of before.
	h.cfg.Bindings[0].Args = append(h.cfg.Bindings[0].Args, "--state", t.TempDir())
	h.open()
	r := h.mention("ch", "b-builtin", "q2", "@agent two")
	reply(t, r)
	evs := restorings(r)
	if r.done.Shape != "cold" || len(evs) != 5 || evs[1].Result != apitype.RestoreUnknown || evs[3].Result != apitype.RestoreUnknown ||
		evs[2].Pid != evs[0].Pid || evs[4].Method != "new" || evs[4].SetAside != "" {
		t.Fatalf("shape %s, restoring %+v; want resume and load unknown on one process, nothing set aside", r.done.Shape, evs)
	}
	if s := h.sessionOf("ch"); s.Restore == nil || !slices.Equal(s.Restore.Forgotten, []string{first.done.Native}) || s.Restore.SetAside != "" {
		t.Fatalf("listing restore %+v, want %s forgotten", s.Restore, first.done.Native)
	}
	if _, ok, _ := h.st.Aside(k); ok {
		t.Fatal("a session the agent does not know was set aside")
	}
	h.restart()
	next := h.mention("ch", "b-builtin", "q3", "@agent three")
	if reply(t, next); next.done.Shape != "restored" || next.done.Native != r.done.Native {
		t.Fatalf("after a restart: shape %s native %s, want the new session %s restored", next.done.Shape, next.done.Native, r.done.Native)
	}
}

// A set-aside session is given up for good once restore_failures restores
// in a row gave it up: it is forgotten, and the listing says so.
func TestSetAsideSessionGivenUpAfterRestoreFailures(t *testing.T) {
	h := newHarness(t, func(c *config.Config) {
		c.RestoreTimeout = config.Duration(300 * time.Millisecond)
		c.RestoreFailures = 2
	})
	k := session.Key{Channel: "ch", Binding: "b-builtin"}
	first := h.mention("ch", "b-builtin", "q1", "@agent one")
	reply(t, first)
	h.close()
	h.cfg.Bindings[0].Args = append(h.cfg.Bindings[0].Args, "--fault", "restore-hang")
	h.open()
	reply(t, h.mention("ch", "b-builtin", "q2", "@agent two"))
	if a, ok, _ := h.st.Aside(k); !ok || a.Tries != 1 {
		t.Fatalf("after one given-up restore: %+v %v", a, ok)
	}
	h.restart()
	r := h.mention("ch", "b-builtin", "q3", "@agent three")
	reply(t, r)
	if evs := restorings(r); len(evs) != 5 || evs[0].Native != first.done.Native || evs[4].SetAside != "" {
		t.Fatalf("restoring %+v: want the set-aside session tried, then nothing set aside", evs)
	}
	if s := h.sessionOf("ch"); s.Restore == nil || !slices.Equal(s.Restore.Forgotten, []string{first.done.Native}) {
		t.Fatalf("listing restore %+v, want %s forgotten", s.Restore, first.done.Native)
	}
	if a, ok, _ := h.st.Aside(k); ok {
		t.Fatalf("still set aside after restore_failures tries: %+v", a)
	}
}
