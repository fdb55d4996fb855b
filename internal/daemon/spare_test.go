package daemon_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/residentd/residentd/apitype"
	"github.com/residentd/residentd/internal/channel"
	"github.com/residentd/residentd/internal/config"
	"github.com/residentd/residentd/internal/daemon"
	"github.com/residentd/residentd/internal/daemontest"
	"github.com/residentd/residentd/internal/store"
	"github.com/residentd/residentd/internal/testkit"
)

// withSpares gives the first binding n spares, and adds b-idle (spare 1)
// ahead of it, a binding no turn ever names.
func withSpares(n int) func(*config.Config) {
	return func(c *config.Config) {
		c.Bindings[0].Spare = &n
		idle := c.Bindings[0]
		one := 1
		idle.ID, idle.Handle, idle.Spare = "b-idle", "@idle", &one
		c.Bindings = append([]config.Binding{idle}, c.Bindings...)
	}
}

// nextSpare waits for the next spare to become ready.
func (h *harness) nextSpare() readySpare {
	h.t.Helper()
	select {
	case s := <-h.spares:
		return s
	case <-time.After(30 * time.Second):
		h.t.Fatal("no spare became ready within 30s")
		return readySpare{}
	}
}

func sparePids(ss []apitype.Spare, binding string) []int {
	var out []int
	for _, s := range ss {
		if s.Binding == binding {
			out = append(out, s.Pid)
		}
	}
	return out
}

// A cold turn and a restored turn each take the binding's spare (the pid
// of their started event is the spare's, listed before), and a new spare
// takes its place; a binding that has had no turn gets none.
func TestColdAndRestoredTurnsTakeASpare(t *testing.T) {
	h := newHarness(t, withSpares(1))

	first := h.mention("ch-a", "b-builtin", "m1", "@agent first")
	if first.err != nil || first.start.Shape != "cold" {
		t.Fatalf("first turn: %v, shape %q", first.err, first.start.Shape)
	}
	sp := h.nextSpare()
	if sp.binding != "b-builtin" || sp.pid == first.start.Pid {
		t.Fatalf("spare %+v after the first turn (pid %d)", sp, first.start.Pid)
	}
	listed := h.d.Spares()
	if got := sparePids(listed, "b-builtin"); !slices.Equal(got, []int{sp.pid}) {
		t.Fatalf("spares listed %+v, want b-builtin's pid %d", listed, sp.pid)
	}
	// b-idle comes first in the configuration: its turn in the fill came
	// and went before b-builtin's spare started, and it had no turn.
	if got := sparePids(listed, "b-idle"); len(got) != 0 {
		t.Fatalf("b-idle had no turn but has spares %v", got)
	}

	cold := h.mention("ch-b", "b-builtin", "m2", "@agent second channel")
	if cold.err != nil || cold.start.Shape != "cold" || cold.start.Pid != sp.pid {
		t.Fatalf("cold turn: %v, shape %q pid %d; want cold on the spare's pid %d", cold.err, cold.start.Shape, cold.start.Pid, sp.pid)
	}
	if f := reply(t, cold); f["framing"] != "yes" || f["turn"] != "1" {
		t.Fatalf("cold turn on the spare: %q", cold.done.Text)
	}
	next := h.nextSpare()
	if next.pid == sp.pid || next.binding != "b-builtin" {
		t.Fatalf("replacement spare %+v, the taken one was %d", next, sp.pid)
	}
	var keyed bool
	for _, s := range h.d.Sessions() {
		if s.Channel == "ch-b" && s.Pid == sp.pid {
			keyed = true
		}
	}
	if !keyed || slices.Contains(sparePids(h.d.Spares(), "b-builtin"), sp.pid) {
		t.Fatalf("after the turn the spare's pid %d should be ch-b's process and no longer a spare: sessions %+v spares %+v", sp.pid, h.d.Sessions(), h.d.Spares())
	}
	if n := testutil.ToFloat64(h.m.SpareEvents.WithLabelValues("b-builtin", "taken")); n != 1 {
		t.Fatalf("spares taken: %v, want 1", n)
	}
	// The spare opened its session ahead, and the cold turn started on it
	// without a session/new of its own; the replacement opened one too.
	for ev, want := range map[string]float64{"session_opened": 2, "session_used": 1, "session_dropped": 0} {
		if n := testutil.ToFloat64(h.m.SpareEvents.WithLabelValues("b-builtin", ev)); n != want {
			t.Fatalf("spare %s: %v, want %v", ev, n, want)
		}
	}
	if n := histCount(t, h.m.SessionReady.WithLabelValues("new").(prometheus.Histogram)); n != 1 {
		t.Fatalf("turns that waited for session/new: %d, want 1 (the first, before any spare)", n)
	}
	if n := testutil.ToFloat64(h.m.SpareProcesses.WithLabelValues("b-builtin")); n != 1 {
		t.Fatalf("spare gauge: %v, want 1", n)
	}

	// After a restart the binding has had no turn: no spare until one.
	h.restart()
	warmup := h.mention("ch-c", "b-builtin", "m3", "@agent a third channel")
	if warmup.err != nil || warmup.start.Shape != "cold" {
		t.Fatalf("turn after restart: %v, shape %q", warmup.err, warmup.start.Shape)
	}
	sp = h.nextSpare()
	restored := h.mention("ch-a", "b-builtin", "m4", "@agent back to the first")
	if restored.err != nil || restored.start.Shape != "restored" || restored.start.Pid != sp.pid {
		t.Fatalf("restored turn: %v, shape %q pid %d; want restored on the spare's pid %d", restored.err, restored.start.Shape, restored.start.Pid, sp.pid)
	}
	if f := reply(t, restored); f["turn"] != "2" {
		t.Fatalf("restored turn on the spare: %q; want the session's second turn", restored.done.Text)
	}
	// The restore reopened ch-a's own session: the one the spare opened
	// ahead was dropped (and closed: the built-in agent has session/close).
	if n := testutil.ToFloat64(h.m.SpareEvents.WithLabelValues("b-builtin", "session_dropped")); n != 1 {
		t.Fatalf("spare sessions dropped: %v, want 1", n)
	}
	if next := h.nextSpare(); next.pid == sp.pid {
		t.Fatalf("replacement spare has the taken one's pid %d", sp.pid)
	}
}

// A cold turn that evicts and takes a spare makes two commits of its own
// (the run accepted and started, then the turn): the spare's agent record
// rode a write before, or rides the turn's, and the evicted agent's record
// is forgotten in one of them or a later write. The replacement spare's
// record waits for the next write too: no commit of its own.
func TestEvictingColdTurnOnASpareMakesTwoCommits(t *testing.T) {
	h := newHarness(t, withSpares(1), func(c *config.Config) { c.MaxLive = 1 })
	r1 := h.mention("ch-a", "b-builtin", "q1", "@agent first")
	reply(t, r1)
	sp := h.nextSpare()
	h.post(channel.Message{ID: "q2", Channel: "ch-b", Author: "carla", AuthorKind: channel.KindUser, Body: "@agent second"})
	before := h.st.Commits()
	r2 := h.turn(apitype.TurnRequest{Channel: "ch-b", Binding: "b-builtin", MessageID: "q2", Text: "@agent second"})
	reply(t, r2)
	if r2.done.Shape != "cold" || r2.start.Pid != sp.pid || len(h.evictions()) != 1 {
		t.Fatalf("second turn %s on pid %d (spare %d), evictions %v; want a cold turn on the spare that evicted one", r2.done.Shape, r2.start.Pid, sp.pid, h.evictions())
	}
	h.nextSpare() // its record is pending before it is ready
	testkit.WaitFor(t, 10*time.Second, func() bool {
		ag, err := h.st.Agents()
		return err == nil && !slices.ContainsFunc(ag, func(a store.AgentRecord) bool { return a.Pid == r1.start.Pid })
	}, testkit.Waiting("the evicted agent %d to be forgotten", r1.start.Pid))
	if n := h.st.Commits() - before; n != 2 {
		t.Fatalf("the cold turn that evicted, with the replacement spare's record: %d commits, want 2", n)
	}
}

// Spares stay within max_processes with the key-bound processes, and stop
// once their binding has had no turn for idle_timeout.
func TestSparesCappedAndStoppedWhenIdle(t *testing.T) {
	var mu sync.Mutex
	now := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	h := newHarnessAt(t, clock, withSpares(2), func(c *config.Config) {
		c.MaxLive, c.MaxProcesses, c.IdleTimeout = 1, 2, config.Duration(time.Second)
	})
	reply(t, h.mention("ch-a", "b-builtin", "q1", "@agent first"))
	sp := h.nextSpare()
	r := h.mention("ch-b", "b-builtin", "q2", "@agent second")
	if reply(t, r); r.start.Pid != sp.pid {
		t.Fatalf("second turn on pid %d, not the spare %d", r.start.Pid, sp.pid)
	}
	h.nextSpare()
	// One key-bound process and one spare fill max_processes 2: spare 2
	// never got its second.
	if n, ss := testutil.ToFloat64(h.m.SpareEvents.WithLabelValues("b-builtin", "started")), h.d.Spares(); n != 2 || len(ss) != 1 {
		t.Fatalf("spares started %v, listed %+v; want 2 started, 1 left within max_processes", n, ss)
	}

	mu.Lock()
	now = now.Add(2 * time.Second)
	mu.Unlock()
	testkit.WaitFor(t, 10*time.Second, func() bool { return len(h.d.Spares()) == 0 && len(h.d.Sessions()) == 0 },
		testkit.Waiting("the idle spare and process to stop"))
	if n := testutil.ToFloat64(h.m.SpareEvents.WithLabelValues("b-builtin", "stopped")); n != 1 {
		t.Fatalf("spares stopped: %v, want 1", n)
	}
	if n := testutil.ToFloat64(h.m.SpareProcesses.WithLabelValues("b-builtin")); n != 0 {
		t.Fatalf("spare gauge %v after the idle stop", n)
	}
}

// A spare that dies before a turn takes it is dropped, counted, and
// replaced, and its death counts in the binding's crash loop. A spare that
// fails to start does not count there (it backs off the binding's spares
// alone: a slow start on a busy machine is no crash loop): the next turn
// is not refused but tries its own start, and once that fails too the
// backoff holds the turns back.
func TestSpareDeathsAndFailuresCount(t *testing.T) {
	flag := filepath.Join(t.TempDir(), "broken")
	h := newHarness(t, withSpares(1), func(c *config.Config) {
		// The agent starts while the flag file is absent.
		b := &c.Bindings[1]
		b.Args = append([]string{"-c", `test -e "$SPARE_FLAG" && exit 3; exec "$0" "$@"`, b.Command}, b.Args...)
		b.Command = "/bin/sh"
		b.Env["SPARE_FLAG"] = flag
	})
	h.close()
	h.backoffBase, h.backoffCap = time.Hour, time.Hour
	h.open()
	reply(t, h.mention("ch-a", "b-builtin", "q1", "@agent first"))
	sp := h.nextSpare()
	if err := syscall.Kill(sp.pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	next := h.nextSpare()
	if next.pid == 0 || next.pid == sp.pid || slices.Contains(sparePids(h.d.Spares(), "b-builtin"), sp.pid) {
		t.Fatalf("after the spare %d died: new spare %d, listed %+v", sp.pid, next.pid, h.d.Spares())
	}
	if n := testutil.ToFloat64(h.m.SpareEvents.WithLabelValues("b-builtin", "exited")); n != 1 {
		t.Fatalf("spares exited: %v, want 1", n)
	}

	// A turn takes the new spare and succeeds, which ends the crash loop.
	if r := h.mention("ch-b", "b-builtin", "q2", "@agent second"); r.err != nil || r.start.Pid != next.pid {
		t.Fatalf("turn on the new spare %d: pid %d, %v", next.pid, r.start.Pid, r.err)
	}
	next = h.nextSpare()
	// Now the agent cannot start: the spare dies (a crash loop of 1) and
	// its replacement fails to start (not counted).
	if err := os.WriteFile(flag, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(next.pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if sp := h.nextSpare(); sp.pid != 0 {
		t.Fatalf("spare %+v of an agent that cannot start", sp)
	}
	// The next turn is not held back: its own start fails (2: the agent
	// exits before it reads initialize, or as it is written to: a crash
	// either way), and the backoff then holds the turns back.
	if r := h.mention("ch-c", "b-builtin", "q3", "@agent again"); daemon.Code(r.err) != apitype.CodeAgentCrashed {
		t.Fatalf("turn after a spare failed to start: %v, want its own start's crash, not a backoff", r.err)
	}
	r := h.mention("ch-d", "b-builtin", "q4", "@agent and again")
	if !errors.Is(r.err, daemon.ErrBackoff) || !strings.Contains(r.err.Error(), "failed 2 times in a row") {
		t.Fatalf("turn after the spare's death and a failed start: %v, want the binding's backoff after 2 failures", r.err)
	}
	if n := testutil.ToFloat64(h.m.SpareEvents.WithLabelValues("b-builtin", "failed")); n != 1 {
		t.Fatalf("spare starts failed: %v, want 1 (the backoff holds the next)", n)
	}
}

// A reload that changes how a binding's processes start replaces its
// spare; one that lowers spare to 0 stops it.
func TestReloadReplacesOrStopsSpares(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "config.json")
	b, err := daemontest.Builtin("b-builtin", dir)
	if err != nil {
		t.Fatal(err)
	}
	one := 1
	b.Spare = &one
	cfg := config.Config{Bindings: []config.Binding{b}}
	write := func() { t.Helper(); writeConfigFile(t, file, cfg) }
	write()
	load := daemontest.FileLoader(file, dir)
	c, err := load()
	if err != nil {
		t.Fatal(err)
	}
	ready := make(chan int, 16)
	h := daemontest.New(t, c, daemontest.Options{Reload: load, ConfigFile: file, OnSpare: func(_ string, pid int) { ready <- pid }})
	next := func() int {
		t.Helper()
		select {
		case pid := <-ready:
			return pid
		case <-time.After(30 * time.Second):
			t.Fatal("no spare within 30s")
			return 0
		}
	}
	if r := h.Turn(context.Background(), apitype.TurnRequest{Channel: "ch", Binding: "b-builtin", Text: "@agent hi"}); r.Err != nil {
		t.Fatal(r.Err)
	}
	first := next()

	cfg.Bindings[0].Env["RELOADED"] = "1" // replace_process
	write()
	if _, err := h.Reload(); err != nil {
		t.Fatal(err)
	}
	if got := sparePids(h.Spares(), "b-builtin"); slices.Contains(got, first) {
		t.Fatalf("spares after the reload %v still hold %d, started by the old settings", got, first)
	}
	if second := next(); second == 0 || second == first {
		t.Fatalf("replacement spare %d (the old one %d)", second, first)
	}

	zero := 0
	cfg.Bindings[0].Spare = &zero
	write()
	if _, err := h.Reload(); err != nil {
		t.Fatal(err)
	}
	if got := h.Spares(); len(got) != 0 {
		t.Fatalf("spares after spare 0: %+v", got)
	}
}

// A restore that ends cold on a spare (the agent can reopen neither way)
// starts on the session the spare opened ahead: no session/new on the
// turn's path, and the dropped-session count stays 0.
func TestRestoreEndingColdUsesTheSparesSession(t *testing.T) {
	h := newHarness(t, func(c *config.Config) {
		one := 1
		c.Bindings[0].Spare, c.Bindings[0].SpareAtStart = &one, true
	})
	first := h.mention("ch", "b-builtin", "q1", "@agent one")
	reply(t, first)
	h.close()
	for len(h.spares) > 0 {
		<-h.spares // the closed daemon's
	}
	h.cfg.Bindings[0].Args = append(h.cfg.Bindings[0].Args, "--fault", "restore-fail")
	h.open()
	sp := h.nextSpare()
	r := h.mention("ch", "b-builtin", "q2", "@agent two")
	reply(t, r)
	if r.done.Shape != "cold" || r.start.Pid != sp.pid || r.done.Native == first.done.Native {
		t.Fatalf("turn after a failed restore: %s on pid %d (spare %d), native %s (was %s); want cold on the spare, a new session", r.done.Shape, r.start.Pid, sp.pid, r.done.Native, first.done.Native)
	}
	for ev, want := range map[string]float64{"session_opened": 1, "session_used": 1, "session_dropped": 0} {
		if n := testutil.ToFloat64(h.m.SpareEvents.WithLabelValues("b-builtin", ev)); ev == "session_opened" && n < want || ev != "session_opened" && n != want {
			t.Fatalf("spare %s: %v, want %v", ev, n, want)
		}
	}
	if n := histCount(t, h.m.SessionReady.WithLabelValues("new").(prometheus.Histogram)); n != 0 {
		t.Fatalf("turns that waited for session/new: %d, want 0", n)
	}
}

// spare_session false: the spare waits at initialize, and the cold turn
// that takes it sends its own session/new.
func TestSpareWithoutASessionAhead(t *testing.T) {
	h := newHarness(t, func(c *config.Config) {
		one, no := 1, false
		c.Bindings[0].Spare, c.Bindings[0].SpareAtStart, c.Bindings[0].SpareSession = &one, true, &no
	})
	sp := h.nextSpare()
	r := h.mention("ch", "b-builtin", "q1", "@agent one")
	reply(t, r)
	if r.done.Shape != "cold" || r.start.Pid != sp.pid {
		t.Fatalf("turn: %s on pid %d, want cold on the spare %d", r.done.Shape, r.start.Pid, sp.pid)
	}
	if n := testutil.ToFloat64(h.m.SpareEvents.WithLabelValues("b-builtin", "session_opened")); n != 0 {
		t.Fatalf("sessions opened ahead: %v, want 0", n)
	}
	if n := histCount(t, h.m.SessionReady.WithLabelValues("new").(prometheus.Histogram)); n != 1 {
		t.Fatalf("turns that waited for session/new: %d, want 1", n)
	}
}
