package daemon_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"

	"github.com/residentd/residentd/apitype"
	"github.com/residentd/residentd/internal/acp"
	"github.com/residentd/residentd/internal/channel"
	"github.com/residentd/residentd/internal/child"
	"github.com/residentd/residentd/internal/config"
	"github.com/residentd/residentd/internal/daemon"
	"github.com/residentd/residentd/internal/lease"
	"github.com/residentd/residentd/internal/metrics"
	"github.com/residentd/residentd/internal/session"
	"github.com/residentd/residentd/internal/testkit"
)

// markEnv tags every process a fault test starts (the agent and anything it
// spawns inherits it), so leftovers can be found in /proc.
const markEnv = "RESIDENTD_FAULT_MARK"

// faultBinding is the built-in agent as binding id, tagged with mark.
func faultBinding(t *testing.T, id, dir, mark string, extra ...string) config.Binding {
	t.Helper()
	b := testBinding(t, id, dir, extra...)
	b.Env = map[string]string{"RESIDENTD_TEST_AGENT": "1", markEnv: mark}
	return b
}

// marked lists the pids of processes whose environment carries mark.
func marked(mark string) []int {
	want := []byte(markEnv + "=" + mark + "\x00")
	entries, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		env, err := os.ReadFile(filepath.Join("/proc", e.Name(), "environ"))
		if err != nil {
			continue
		}
		if strings.Contains(string(env), string(want)) {
			out = append(out, pid)
		}
	}
	return out
}

// procState is the state letter of pid ("Z" for a zombie), "" when gone.
func procState(pid int) string {
	st, err := child.Read(pid)
	if err != nil {
		return ""
	}
	return string(st.State)
}

// zombieChildren lists this process's children that nobody reaped.
func zombieChildren() []int {
	all, _ := child.All()
	var out []int
	for _, st := range all {
		if st.Zombie() && st.Ppid == os.Getpid() {
			out = append(out, st.Pid)
		}
	}
	return out
}

// waitFor polls cond (an external condition: a process disappearing) for up
// to 10s and fails with what() when it never holds.
func waitFor(t *testing.T, cond func() bool, what func() string) {
	t.Helper()
	testkit.WaitFor(t, 10*time.Second, cond, what)
}

// assertGone waits until pid's process group has no member and pid is
// neither alive nor a zombie.
func assertGone(t *testing.T, pid int) {
	t.Helper()
	waitFor(t, func() bool {
		return errors.Is(syscall.Kill(-pid, 0), syscall.ESRCH) && procState(pid) == ""
	}, func() string {
		return fmt.Sprintf("agent pid %d (state %q) or its process group survived: kill -0 = %v", pid, procState(pid), syscall.Kill(-pid, 0))
	})
}

// assertNoStrays waits until every process tagged with mark is one the pool
// still holds, and no child of the daemon is an unreaped zombie.
func assertNoStrays(t *testing.T, d *daemon.Daemon, mark string) {
	t.Helper()
	var stray, zombies []int
	waitFor(t, func() bool {
		live := map[int]bool{}
		for _, s := range d.PoolSessions() {
			live[s.Pid] = true
		}
		stray = stray[:0]
		for _, pid := range marked(mark) {
			if !live[pid] {
				stray = append(stray, pid)
			}
		}
		zombies = zombieChildren()
		return len(stray) == 0 && len(zombies) == 0
	}, func() string {
		return fmt.Sprintf("orphans %v and zombies %v outlived the fault", stray, zombies)
	})
}

func (h *harness) watermark(ch, binding string) (channel.Watermark, bool) {
	h.t.Helper()
	wk := channel.WatermarkKey{Key: session.Key{Channel: ch, Binding: binding}}
	wm, ok, err := h.st.Watermark(wk)
	if err != nil {
		h.t.Fatal(err)
	}
	return wm, ok
}

func (h *harness) setArgs(binding string, extra ...string) {
	h.t.Helper()
	for i := range h.cfg.Bindings {
		if h.cfg.Bindings[i].ID == binding {
			h.cfg.Bindings[i].Args = testBinding(h.t, binding, h.dir, extra...).Args
			return
		}
	}
	h.t.Fatalf("no binding %q", binding)
}

func turnCount(h *harness, outcome lease.Outcome) float64 {
	var n float64
	for _, shape := range metrics.Shapes {
		n += testutil.ToFloat64(h.m.Turns.WithLabelValues(shape, string(outcome)))
	}
	return n
}

// TestAgentFaults drives every failing agent behaviour through a real turn:
// the caller gets an error of the right class naming what failed, the
// channel watermark stays where the last good turn left it, no process is
// left behind, and the same key answers the next turn.
func TestAgentFaults(t *testing.T) {
	cases := []struct {
		name    string
		start   []string // agent flags for the faulted spawn (the process is killed first)
		text    string   // or a one-turn fault marker
		wantErr error
		wantMsg []string
		outcome lease.Outcome
		staged  bool // the turn reached compose, so a watermark was staged and discarded
		dies    bool // the faulted process is gone afterwards
	}{
		{name: "exit during initialize", start: []string{"--fault", "exit-initialize"}, wantErr: acp.ErrExited,
			wantMsg: []string{`spawn binding "b-fault"`, "initialize", "exit-initialize"}, outcome: "crash", dies: true},
		{name: "exit during session/new", start: []string{"--no-load", "--no-resume", "--fault", "exit-new"}, wantErr: acp.ErrExited,
			wantMsg: []string{`spawn binding "b-fault"`, "new session", "exit-new"}, outcome: "crash", dies: true},
		{name: "exit mid-turn", text: "[[fault:exit-turn]]", wantErr: acp.ErrExited,
			wantMsg: []string{`binding "b-fault"`, "prompt session", "exit-turn"}, outcome: "crash", staged: true, dies: true},
		{name: "partial JSON line then exit", text: "[[fault:partial-json]]", wantErr: acp.ErrExited,
			wantMsg: []string{`binding "b-fault"`, "partial-json"}, outcome: "crash", staged: true, dies: true},
		{name: "hang answers cancel", text: "[[fault:hang-turn]]", wantErr: context.DeadlineExceeded,
			wantMsg: []string{"turn_timeout (1s)", `binding "b-fault"`, `agent stopped with "cancelled"`}, outcome: "timeout", staged: true},
		{name: "hang ignores cancel", text: "[[fault:hang-ignore-cancel]]", wantErr: context.DeadlineExceeded,
			wantMsg: []string{"turn_timeout (1s)", `binding "b-fault"`, "did not answer session/cancel", "was killed"}, outcome: "timeout", staged: true, dies: true},
		{name: "JSON-RPC error", text: "[[fault:fail-turn]]", wantErr: acp.ErrProtocol,
			wantMsg: []string{`binding "b-fault"`, "induced failure"}, outcome: "agent_error", staged: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			mark := fmt.Sprintf("%d-%s", os.Getpid(), strings.ReplaceAll(tc.name, " ", "-"))
			h := newHarness(t, func(c *config.Config) {
				b := faultBinding(t, "b-fault", c.StateDir, mark)
				b.TurnTimeout = config.Duration(time.Second)
				c.Bindings = append(c.Bindings, b)
				c.AgentGrace = config.Duration(300 * time.Millisecond)
				c.AgentCancelGrace = config.Duration(300 * time.Millisecond)
			})
			h.say("ch", "a", 2)
			r1 := h.mention("ch", "b-fault", "q1", "@agent hello")
			reply(t, r1)
			wm1, ok := h.watermark("ch", "b-fault")
			if !ok || r1.done.Watermark != "committed" {
				t.Fatalf("first turn committed no watermark: %+v", r1.done)
			}
			pid := r1.start.Pid
			if tc.start != nil {
				// Make the next turn spawn a new process, with the fault.
				if err := syscall.Kill(-pid, syscall.SIGKILL); err != nil {
					t.Fatal(err)
				}
				waitFor(t, func() bool { return len(h.d.PoolSessions()) == 0 }, func() string { return "pool kept the killed process" })
				h.setArgs("b-fault", tc.start...)
			}
			h.say("ch", "b", 2)
			commits, discards := testutil.ToFloat64(h.m.WatermarkCommits), testutil.ToFloat64(h.m.WatermarkDiscards)
			before := turnCount(h, tc.outcome)

			// The marker is not posted: it must not reach later context blocks.
			bad := h.turn(apitype.TurnRequest{Channel: "ch", Binding: "b-fault", MessageID: "q2", Text: "@agent " + tc.text + " please"})
			if !errors.Is(bad.err, tc.wantErr) {
				t.Fatalf("err = %v, want %v", bad.err, tc.wantErr)
			}
			for _, s := range tc.wantMsg {
				if !strings.Contains(bad.err.Error(), s) {
					t.Errorf("error %q does not say %q", bad.err, s)
				}
			}
			if got := daemon.Outcome(bad.err); got != tc.outcome {
				t.Errorf("outcome %q, want %q", got, tc.outcome)
			}
			if got := turnCount(h, tc.outcome); got != before+1 {
				t.Errorf("turns_total{outcome=%q} = %v, want %v", tc.outcome, got, before+1)
			}
			if bad.done.Event != "" {
				t.Errorf("failed turn emitted done: %+v", bad.done)
			}
			if wm, _ := h.watermark("ch", "b-fault"); wm.Seq != wm1.Seq || !slices.Equal(channel.MarkIDs(wm.Marks), channel.MarkIDs(wm1.Marks)) || wm.Native != wm1.Native {
				t.Errorf("watermark moved on a failed turn: %+v -> %+v", wm1, wm)
			}
			wantDiscards := discards
			if tc.staged {
				wantDiscards++
			}
			if c, d := testutil.ToFloat64(h.m.WatermarkCommits), testutil.ToFloat64(h.m.WatermarkDiscards); c != commits || d != wantDiscards {
				t.Errorf("watermark commits %v->%v, discards %v->%v (want %v)", commits, c, discards, d, wantDiscards)
			}

			switch {
			case tc.start != nil:
				// The faulted process never became a session; it must be gone.
			case tc.dies:
				if bad.start.Pid != pid {
					t.Fatalf("faulted turn ran on pid %d, want the warm %d", bad.start.Pid, pid)
				}
				assertGone(t, pid)
			default:
				if syscall.Kill(pid, 0) != nil {
					t.Fatalf("agent %d died on a fault it survives", pid)
				}
			}
			assertNoStrays(t, h.d, mark)

			h.setArgs("b-fault")
			r3 := h.mention("ch", "b-fault", "q3", "@agent again")
			got := reply(t, r3)
			wantShape := "restored"
			if !tc.dies {
				wantShape = "warm"
			}
			// The failed run showed b1, b2 to nobody: they come back; q1,
			// the good turn's payload, does not.
			if r3.done.Shape != wantShape || r3.done.Native != r1.done.Native || got["context"] != "2" || r3.done.Context.Header != "new" {
				t.Fatalf("next turn: shape %s (want %s) native %s (want %s) context %+v reply %v",
					r3.done.Shape, wantShape, r3.done.Native, r1.done.Native, r3.done.Context, got)
			}
			if strings.Contains(r3.done.Text, "fault") {
				t.Fatalf("fault marker leaked into the next turn: %q", r3.done.Text)
			}
			if wm, _ := h.watermark("ch", "b-fault"); wm.Seq <= wm1.Seq {
				t.Fatalf("watermark did not advance after the good turn: %+v", wm)
			}
		})
	}
}

// TestToleratedAgentFaults: noise an agent may produce (garbage on stdout, a
// stderr flood, an update for another session, a slow start) does not fail
// the turn or leak into the reply.
func TestToleratedAgentFaults(t *testing.T) {
	mark := fmt.Sprintf("%d-tolerated", os.Getpid())
	h := newHarness(t, func(c *config.Config) {
		c.Bindings = append(c.Bindings, faultBinding(t, "b-fault", c.StateDir, mark))
		c.Bindings = append(c.Bindings, faultBinding(t, "b-slow", c.StateDir, mark, "--fault", "slow-start", "--slow", "300ms"))
	})
	var pid int
	for i, fault := range []string{"garbage-stdout", "flood-stderr", "unknown-session-update"} {
		r := h.turn(apitype.TurnRequest{Channel: "ch", Binding: "b-fault", MessageID: fmt.Sprint("q", i), Text: "@agent [[fault:" + fault + "]]"})
		got := reply(t, r)
		if got["turn"] != strconv.Itoa(i+1) || strings.Contains(r.done.Text, "for nobody") {
			t.Fatalf("%s: reply %q", fault, r.done.Text)
		}
		for _, u := range r.updates {
			if u.Update != nil && strings.Contains(u.Update.Text, "for nobody") {
				t.Fatalf("%s: an update for another session reached the turn: %+v", fault, u.Update)
			}
		}
		if i > 0 && (r.start.Pid != pid || r.done.Shape != "warm") {
			t.Fatalf("%s: process changed (%d -> %d, %s)", fault, pid, r.start.Pid, r.done.Shape)
		}
		pid = r.start.Pid
	}
	r := h.mention("ch", "b-slow", "s1", "@agent slow")
	if got := reply(t, r); r.done.Shape != "cold" || got["turn"] != "1" {
		t.Fatalf("slow start: %+v", r.done)
	}
	// The queue wait is the wait for the key and a slot only: the slow start
	// is in the spawn histogram, not in the queue wait.
	if wait, spawn := histSum(t, h.m.QueueWait), histSum(t, h.m.AgentSpawn); spawn < 0.3 || wait >= spawn {
		t.Fatalf("queue wait %.3fs, spawn %.3fs: want the 300 ms start in the spawn only", wait, spawn)
	}
}

// histSum is the sum of everything h observed.
func histSum(t *testing.T, h prometheus.Histogram) float64 {
	t.Helper()
	return histOf(t, h).GetSampleSum()
}

// histCount is how many observations h has.
func histCount(t *testing.T, h prometheus.Histogram) uint64 {
	t.Helper()
	return histOf(t, h).GetSampleCount()
}

func histOf(t *testing.T, h prometheus.Histogram) *dto.Histogram {
	t.Helper()
	var m dto.Metric
	if err := h.Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetHistogram()
}

// TestStubbornAgentsAreStopped: an agent that ignores SIGTERM, and one whose
// grandchild holds stdout open, are both gone (group and all) after "start
// fresh" and after the daemon closes, and the key serves again in between.
func TestStubbornAgentsAreStopped(t *testing.T) {
	for _, fault := range []string{"ignore-sigterm", "grandchild"} {
		t.Run(fault, func(t *testing.T) {
			mark := fmt.Sprintf("%d-%s", os.Getpid(), fault)
			h := newHarness(t, func(c *config.Config) {
				c.Bindings = append(c.Bindings, faultBinding(t, "b-fault", c.StateDir, mark, "--fault", fault))
				c.AgentGrace = config.Duration(300 * time.Millisecond)
			})
			r := h.mention("ch", "b-fault", "q1", "@agent one")
			reply(t, r)
			if fault == "grandchild" {
				waitFor(t, func() bool { return len(marked(mark)) >= 2 }, func() string { return "no grandchild appeared" })
			}
			if had, err := h.d.Fresh(session.Key{Channel: "ch", Binding: "b-fault"}); err != nil || !had {
				t.Fatalf("fresh: %v %v", had, err)
			}
			assertGone(t, r.start.Pid)
			waitFor(t, func() bool { return len(marked(mark)) == 0 }, func() string { return fmt.Sprintf("strays %v", marked(mark)) })

			r2 := h.mention("ch", "b-fault", "q2", "@agent two")
			if reply(t, r2); r2.done.Shape != "cold" || r2.start.Pid == r.start.Pid {
				t.Fatalf("after fresh: %+v", r2.done)
			}
			if err := h.d.Close(time.Second); err != nil {
				t.Fatal(err)
			}
			assertGone(t, r2.start.Pid)
			waitFor(t, func() bool { return len(marked(mark)) == 0 }, func() string { return fmt.Sprintf("strays after close %v", marked(mark)) })
			assertNoStrays(t, h.d, mark)
		})
	}
}

// TestMissingAgentCommand: a binding whose command does not exist or is not
// executable fails its turn with ErrStart naming the path, and the pool
// slot it tried comes back (max_live 1: the good binding still answers).
func TestMissingAgentCommand(t *testing.T) {
	notExec := filepath.Join(t.TempDir(), "agent.sh")
	if err := os.WriteFile(notExec, []byte("#!/bin/sh\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	h := newHarness(t, func(c *config.Config) {
		c.MaxLive = 1
		c.Bindings = append(c.Bindings,
			config.Binding{ID: "b-missing", Handle: "@m", Command: "/nonexistent/residentd-agent-xyz"},
			config.Binding{ID: "b-noexec", Handle: "@n", Command: notExec})
	})
	for _, b := range []string{"b-missing", "b-noexec"} {
		cmd, _ := h.cfg.Binding(b)
		r := h.turn(apitype.TurnRequest{Channel: "ch", Binding: b, Text: "@m hi"})
		if !errors.Is(r.err, acp.ErrStart) || !strings.Contains(r.err.Error(), cmd.Command) || !strings.Contains(r.err.Error(), b) {
			t.Fatalf("%s: err = %v, want ErrStart naming %s", b, r.err, cmd.Command)
		}
		if r.start.Event != "" {
			t.Fatalf("%s: a failed start emitted %+v", b, r.start)
		}
		reply(t, h.mention("ch", "b-builtin", "ok-"+b, "@agent still there?"))
	}
	if n := turnCount(h, "agent_error"); n != 2 {
		t.Fatalf("turns_total{outcome=agent_error} = %v, want 2", n)
	}
	if h.d.Live() != 1 {
		t.Fatalf("live = %d, want the good binding's 1", h.d.Live())
	}
}

// fakeClock is a settable clock for the crash-loop backoff.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *fakeClock) Add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// TestCrashLoopBackoff: a binding that keeps failing is retried once at
// once, then refused with daemon.ErrBackoff for 1s, 2s, 4s (the cap), 4s; the
// refusal spawns nothing and names the last failure; another binding on the
// same single slot keeps answering; a good turn resets the count.
func TestCrashLoopBackoff(t *testing.T) {
	mark := fmt.Sprintf("%d-loop", os.Getpid())
	h := newHarness(t, func(c *config.Config) {
		c.MaxLive = 1
		c.Bindings = append(c.Bindings, faultBinding(t, "b-loop", c.StateDir, mark, "--fault", "exit-initialize"))
	})
	clk := &fakeClock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	// Nothing runs yet: reopen with the backoff, then set the daemon's clock.
	h.close()
	h.backoffBase, h.backoffCap = time.Second, 4*time.Second
	h.open()
	h.d.SetClock(clk.Now)

	loop := func(id string) error {
		return h.turn(apitype.TurnRequest{Channel: "ch-" + id, Binding: "b-loop", Text: "@agent " + id}).err
	}
	good := 0
	other := func() {
		good++
		reply(t, h.mention("ch", "b-builtin", fmt.Sprint("g", good), "@agent are you starved?"))
	}
	wantCrash := func(id string) {
		t.Helper()
		if err := loop(id); !errors.Is(err, acp.ErrExited) {
			t.Fatalf("%s: err = %v, want the agent's exit", id, err)
		}
	}
	wantBackoff := func(id string, failures int, wait string) {
		t.Helper()
		spawned := testutil.ToFloat64(h.m.AgentExits.WithLabelValues("error"))
		err := loop(id)
		if !errors.Is(err, daemon.ErrBackoff) {
			t.Fatalf("%s: err = %v, want daemon.ErrBackoff", id, err)
		}
		for _, s := range []string{`binding "b-loop"`, fmt.Sprintf("failed %d times in a row", failures), "exit-initialize", "next start allowed in " + wait} {
			if !strings.Contains(err.Error(), s) {
				t.Errorf("%s: backoff error %q does not say %q", id, err, s)
			}
		}
		if daemon.Outcome(err) != lease.OutcomeRejected {
			t.Errorf("%s: outcome %q, want rejected", id, daemon.Outcome(err))
		}
		if n := testutil.ToFloat64(h.m.Turns.WithLabelValues("cold", "rejected")); n != 0 {
			t.Errorf("%s: %v refused turns counted under shape cold; they never got a process", id, n)
		}
		if testutil.ToFloat64(h.m.AgentExits.WithLabelValues("error")) != spawned || len(marked(mark)) != 0 {
			t.Errorf("%s: a refused spawn started a process", id)
		}
	}

	wantCrash("1")
	wantCrash("2") // the first failure is retried at once
	wantBackoff("3", 2, "1s")
	other()
	clk.Add(time.Second)
	wantCrash("4")
	wantBackoff("5", 3, "2s")
	clk.Add(time.Second)
	wantBackoff("6", 3, "1s")
	other()
	clk.Add(time.Second)
	wantCrash("7")
	wantBackoff("8", 4, "4s")
	clk.Add(4 * time.Second)
	wantCrash("9")
	wantBackoff("10", 5, "4s") // capped
	other()

	// The agent is fixed; once the backoff passes a good turn resets it.
	h.setArgs("b-loop")
	clk.Add(4 * time.Second)
	reply(t, h.turn(apitype.TurnRequest{Channel: "ch-ok", Binding: "b-loop", Text: "@agent fixed"}))
	h.d.Fresh(session.Key{Channel: "ch-ok", Binding: "b-loop"})
	h.setArgs("b-loop", "--fault", "exit-initialize")
	wantCrash("11")
	wantCrash("12")
	wantBackoff("13", 2, "1s")
	assertNoStrays(t, h.d, mark)
}

// TestCrashBackoffPerKey: a key whose process keeps crashing mid-turn backs
// off alone; turns on another channel of the same binding go on.
func TestCrashBackoffPerKey(t *testing.T) {
	h := newHarness(t)
	h.close()
	h.backoffBase, h.backoffCap = time.Minute, time.Minute
	h.open()
	crash := func(id string) error {
		return h.mention("ch-crash", "b-builtin", id, "@agent [[fault:exit-turn]] "+id).err
	}
	for _, id := range []string{"c1", "c2"} {
		if err := crash(id); !errors.Is(err, acp.ErrExited) {
			t.Fatalf("%s: err = %v, want the agent's exit", id, err)
		}
	}
	err := crash("c3")
	if !errors.Is(err, daemon.ErrBackoff) || !strings.Contains(err.Error(), `key "ch-crash/b-builtin"`) {
		t.Fatalf("third crash turn: %v, want the key's backoff", err)
	}
	for i := range 3 {
		reply(t, h.mention("ch-fine", "b-builtin", fmt.Sprint("f", i), "@agent are you fine?"))
	}
}

// TestBackgroundWorkIsNotIdle: a process whose agent reported background
// work (a running subagent) is not reaped idle while it runs; its output
// when it ends is an agent run; then the process is idle again and reaped.
func TestBackgroundWorkIsNotIdle(t *testing.T) {
	h := newHarness(t, func(c *config.Config) { c.IdleTimeout = config.Duration(50 * time.Millisecond) })
	h.close()
	h.agentQuiet = 100 * time.Millisecond
	h.open()
	r := h.mention("ch-bg", "b-builtin", "m1", "@agent [[background:1500ms]] work on it")
	reply(t, r)
	pid := r.start.Pid
	// Well past the idle timeout, while the work runs: still there, working.
	time.Sleep(500 * time.Millisecond) // the idle time itself, not a synchronisation
	if n := h.d.ReapIdle(); n != 0 {
		t.Fatalf("the reaper stopped %d processes during background work", n)
	}
	ss := h.d.Sessions()
	if len(ss) != 1 || ss[0].Pid != pid || !ss[0].Working {
		t.Fatalf("sessions during background work: %+v", ss)
	}
	// The work ends: its output is an agent run, then the process is reaped.
	feed := h.d.RunFeed()
	var agentRun string
	testkit.WaitFor(t, 20*time.Second, func() bool {
		for _, l := range feed.Read(0).Lines {
			var ev apitype.FeedEvent
			if json.Unmarshal(l, &ev) == nil && ev.Event == apitype.FeedRunEnded && ev.Kind == apitype.RunKindAgent {
				agentRun = ev.RunID
				return true
			}
		}
		return false
	}, testkit.Waiting("the agent run of the background work"))
	ar, err := h.d.Run(agentRun)
	if err != nil {
		t.Fatal(err)
	}
	res, _, _ := ar.Result()
	if res.Text != "background work done" {
		t.Fatalf("agent run text %q", res.Text)
	}
	waitFor(t, func() bool { h.d.ReapIdle(); return len(h.d.Sessions()) == 0 }, func() string {
		return fmt.Sprintf("the process was not reaped once its work ended: %+v", h.d.Sessions())
	})
}
