package daemon_test

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/residentd/residentd/internal/config"
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
	reply(t, h.mention("ch-a", "b-builtin", "a0", "@agent zero"))
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
