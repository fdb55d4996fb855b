package daemon_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/residentd/residentd/apitype"
	"github.com/residentd/residentd/internal/config"
	"github.com/residentd/residentd/internal/session"
)

// counts reads the series the scripted turns below move.
type counts struct {
	coldOK, warmOK, warmErr, capacity, commits, discards, sent, seen float64
}

func (h *harness) counts() counts {
	m := h.m
	return counts{
		coldOK:   testutil.ToFloat64(m.Turns.WithLabelValues("cold", "ok")),
		warmOK:   testutil.ToFloat64(m.Turns.WithLabelValues("warm", "ok")),
		warmErr:  testutil.ToFloat64(m.Turns.WithLabelValues("warm", "agent_error")),
		capacity: testutil.ToFloat64(m.Evictions.WithLabelValues("capacity")),
		commits:  testutil.ToFloat64(m.WatermarkCommits),
		discards: testutil.ToFloat64(m.WatermarkDiscards),
		sent:     testutil.ToFloat64(m.ChannelLines.WithLabelValues("sent")),
		seen:     testutil.ToFloat64(m.ChannelLines.WithLabelValues("seen")),
	}
}

func TestMetricsAfterScriptedTurns(t *testing.T) {
	h := newHarness(t, func(c *config.Config) { c.MaxLive = 1 })
	if got := h.counts(); got != (counts{}) {
		t.Fatalf("fresh registry: %+v", got)
	}

	// Cold: three channel lines are sent, the watermark moves.
	h.say("ch-a", "a", 3)
	r := h.mention("ch-a", "b-builtin", "q1", "@agent first")
	if reply(t, r); r.done.Shape != "cold" {
		t.Fatalf("turn 1 shape %s", r.done.Shape)
	}
	want := counts{coldOK: 1, commits: 1, sent: 3}
	if got := h.counts(); got != want {
		t.Fatalf("after the cold turn: %+v, want %+v", got, want)
	}

	// Warm: the two new lines are sent; the three shown before and the
	// first mention are counted as seen.
	h.say("ch-a", "b", 2)
	r = h.mention("ch-a", "b-builtin", "q2", "@agent second")
	if reply(t, r); r.done.Shape != "warm" {
		t.Fatalf("turn 2 shape %s", r.done.Shape)
	}
	want = counts{coldOK: 1, warmOK: 1, commits: 2, sent: 5, seen: 4}
	if got := h.counts(); got != want {
		t.Fatalf("after the warm turn: %+v, want %+v", got, want)
	}

	// Another channel needs the only slot: ch-a's process is evicted.
	r = h.mention("ch-b", "b-builtin", "q3", "@agent third")
	if reply(t, r); r.done.Shape != "cold" {
		t.Fatalf("turn 3 shape %s", r.done.Shape)
	}
	if ev := h.evictions(); len(ev) != 1 || !strings.HasSuffix(ev[0], " capacity") {
		t.Fatalf("evictions %q", ev)
	}
	want.coldOK, want.capacity = 2, 1
	if got := h.counts(); got.coldOK != 2 || got.capacity != 1 {
		t.Fatalf("after the capacity eviction: %+v", got)
	}

	// A failing turn, its mention never posted: counted as an agent error,
	// its staged watermark discarded, nothing committed.
	h.say("ch-b", "c", 1)
	before := h.counts()
	bad := h.turn(apitype.TurnRequest{Channel: "ch-b", Binding: "b-builtin", MessageID: "q4", Text: "@agent [[fault:fail-turn]] please"})
	if bad.err == nil {
		t.Fatal("the fail-turn fault did not fail the turn")
	}
	got := h.counts()
	if got.warmErr != 1 || got.discards != before.discards+1 || got.commits != before.commits || got.warmOK != before.warmOK {
		t.Fatalf("after the failing turn: %+v (before %+v)", got, before)
	}

	problems, err := testutil.GatherAndLint(h.m.Registry)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("promlint: %s: %s", p.Metric, p.Text)
	}
}

// The daemon records each agent it spawns for the startup sweep and drops
// the record once the process has exited.
func TestAgentRecordsFollowProcesses(t *testing.T) {
	h := newHarness(t, func(c *config.Config) { c.MaxLive = 1 })
	first := h.mention("ch-a", "b-builtin", "q1", "@agent one")
	reply(t, first)
	recs, err := h.st.Agents()
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 1 || recs[0].Pid != first.start.Pid || recs[0].Pgid != first.start.Pid || recs[0].StartTicks == 0 ||
		recs[0].Key.Channel != "ch-a" || recs[0].Command == "" {
		t.Fatalf("records after one spawn: %+v (pid %d)", recs, first.start.Pid)
	}

	// Evicting ch-a's process drops its record once it is reaped.
	second := h.mention("ch-b", "b-builtin", "q2", "@agent two")
	reply(t, second)
	deadline := time.Now().Add(10 * time.Second)
	for {
		recs, err = h.st.Agents()
		if err != nil {
			t.Fatal(err)
		}
		if len(recs) == 1 && recs[0].Pid == second.start.Pid {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("records after the eviction: %+v, want only pid %d", recs, second.start.Pid)
		}
		time.Sleep(20 * time.Millisecond)
	}

	// A clean shutdown leaves nothing to sweep.
	h.d.Close(5 * time.Second)
	h.d = nil
	if recs, err := h.st.Agents(); err != nil || len(recs) != 0 {
		t.Fatalf("records after shutdown: %+v, %v", recs, err)
	}
}

// The daemon plugs its pool's counts into the metrics it was given.
func TestPoolGaugesReadAtScrape(t *testing.T) {
	h := newHarness(t)
	reply(t, h.mention("ch-1", "b-builtin", "q1", "@agent hi"))
	reply(t, h.mention("ch-2", "b-builtin", "q2", "@agent hi"))
	want := `
# HELP residentd_agents_live Agent processes currently alive in the pool.
# TYPE residentd_agents_live gauge
residentd_agents_live 2
`
	if err := testutil.GatherAndCompare(h.m.Registry, strings.NewReader(want), "residentd_agents_live"); err != nil {
		t.Fatal(err)
	}
}

// The prefix-stability guard: a binding whose framing bytes change between
// cold turns is counted each time (and logged once), since it costs the
// provider's whole prompt cache. Token usage the agent reports is counted by
// shape.
func TestFramingChangeIsCountedAndTokensByShape(t *testing.T) {
	var framing string
	h := newHarness(t, func(c *config.Config) {
		framing = filepath.Join(c.StateDir, "framing.txt")
		c.Bindings[0].System = ""
		c.Bindings[0].SystemFile = framing
		if err := os.WriteFile(framing, []byte("You are @agent. Stable framing."), 0o600); err != nil {
			t.Fatal(err)
		}
	})
	k := session.Key{Channel: "ch", Binding: "b-builtin"}
	write := func(s string) {
		if err := os.WriteFile(framing, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	changes := func() float64 { return testutil.ToFloat64(h.m.FramingChanges.WithLabelValues("b-builtin")) }

	reply(t, h.mention("ch", "b-builtin", "q1", "@agent one"))
	// A warm turn sends no framing and does not read it: the file may be
	// gone (being rewritten, say) without failing the turn.
	if err := os.Remove(framing); err != nil {
		t.Fatal(err)
	}
	reply(t, h.mention("ch", "b-builtin", "q2", "@agent two"))
	write("You are @agent. Stable framing.")
	h.d.Fresh(k)
	reply(t, h.mention("ch", "b-builtin", "q3", "@agent three")) // cold, same bytes
	if n := changes(); n != 0 {
		t.Fatalf("framing changes = %v with identical framing", n)
	}
	write("You are @agent. Channel #backend · 6 online · turn at 10:02")
	h.d.Fresh(k)
	reply(t, h.mention("ch", "b-builtin", "q4", "@agent four"))
	if n := changes(); n != 1 {
		t.Fatalf("framing changes = %v after the framing changed, want 1", n)
	}

	in := func(shape string) float64 {
		return testutil.ToFloat64(h.m.AgentTokens.WithLabelValues("b-builtin", shape, "input"))
	}
	if in("cold") <= 0 || in("warm") <= 0 || in("cold") <= in("warm") {
		t.Fatalf("input tokens by shape: cold %v warm %v; want both counted, cold (3 turns, framing + replay) above warm (1 turn)", in("cold"), in("warm"))
	}
}
