package metrics

import (
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/residentd/residentd/internal/lease"
)

type fakeGauges struct{ live, busy, queued atomic.Int64 }

func (f *fakeGauges) Live() int   { return int(f.live.Load()) }
func (f *fakeGauges) Busy() int   { return int(f.busy.Load()) }
func (f *fakeGauges) Queued() int { return int(f.queued.Load()) }

func TestLintClean(t *testing.T) {
	m := New("test", &fakeGauges{})
	m.InitBindings([]string{"b-claude"})
	problems, err := testutil.GatherAndLint(m.Registry)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("lint %s: %s", p.Metric, p.Text)
	}
}

func TestSeriesExistAtZero(t *testing.T) {
	m := New("test", nil)
	m.InitBindings([]string{"b-claude", "b-codex"})

	for _, s := range Shapes {
		for _, o := range Outcomes {
			if v := testutil.ToFloat64(m.Turns.WithLabelValues(s, o)); v != 0 {
				t.Errorf("turns{%s,%s} = %v, want 0", s, o, v)
			}
		}
	}
	// Count series per family without touching any vector, so a missing
	// initialisation cannot be papered over by WithLabelValues creating it.
	want := map[string]int{
		"residentd_turns_total":                   len(Shapes) * len(Outcomes),
		"residentd_turn_duration_seconds":         len(Shapes),
		"residentd_turn_first_update_seconds":     len(Shapes),
		"residentd_queue_wait_seconds":            1,
		"residentd_evictions_total":               len(EvictReasons),
		"residentd_agents_live":                   1,
		"residentd_agents_busy":                   1,
		"residentd_turns_queued":                  1,
		"residentd_store_commits_total":           1,
		"residentd_store_writes_total":            1,
		"residentd_store_no_space_total":          1,
		"residentd_store_disk_full":               1,
		"residentd_agent_spawn_seconds":           1,
		"residentd_session_ready_seconds":         len(ReadyMethods),
		"residentd_agent_exits_total":             len(ExitKinds),
		"residentd_session_restores_total":        len(RestoreMethods) * len(RestoreResults),
		"residentd_restore_stopped":               2,
		"residentd_usage_turns_total":             2 * len(lease.Shapes) * len(UsageKinds),
		"residentd_usage_cost_total":              2 * len(lease.Shapes),
		"residentd_turn_idle_gap_seconds":         2,
		"residentd_usage_cost_by_gap_total":       2 * len(GapBuckets),
		"residentd_watermark_commits_total":       1,
		"residentd_watermark_discards_total":      1,
		"residentd_channel_lines_total":           len(LineFates),
		"residentd_channel_characters_sent_total": 1,
		"residentd_channel_lines_truncated_total": 1,
		"residentd_agent_tokens_total":            2 * len(lease.Shapes) * len(TokenKinds),
		"residentd_brief_tokens_sent_total":       len(BriefPlacements),
		"residentd_framing_changes_total":         2,
		"residentd_messages_ingested_total":       len(IngestResults),
		"residentd_build_info":                    1,
		"residentd_session_options_set_total":     2,
		"residentd_agent_compactions_total":       2,
		"residentd_budget_crossings_total":        len(BudgetScopes) * len(BudgetLevels),
		"residentd_budget_refusals_total":         len(BudgetScopes),
		"residentd_config_reloads_total":          len(ReloadResults),
		"residentd_config_reload_bindings_total":  len(ReloadActions),
		"residentd_config_last_reload_successful": 1,
	}
	mfs, err := m.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]int{}
	for _, mf := range mfs {
		got[mf.GetName()] = len(mf.GetMetric())
		for _, mt := range mf.GetMetric() {
			if c := mt.GetCounter(); c != nil && c.GetValue() != 0 && strings.HasPrefix(mf.GetName(), "residentd_") {
				t.Errorf("%s: counter at %v before any event", mf.GetName(), c.GetValue())
			}
		}
	}
	for name, n := range want {
		if got[name] != n {
			t.Errorf("%s: %d series, want %d", name, got[name], n)
		}
	}
	if _, ok := got["go_goroutines"]; !ok {
		t.Error("go collector not registered")
	}
	if _, ok := got["process_start_time_seconds"]; !ok {
		t.Error("process collector not registered")
	}
}

func TestBuildInfo(t *testing.T) {
	m := New("1.2.3", nil)
	mfs, err := m.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "residentd_build_info" {
			continue
		}
		labels := map[string]string{}
		for _, l := range mf.GetMetric()[0].GetLabel() {
			labels[l.GetName()] = l.GetValue()
		}
		if labels["version"] != "1.2.3" || !strings.HasPrefix(labels["goversion"], "go") {
			t.Errorf("build_info labels = %v", labels)
		}
		if v := mf.GetMetric()[0].GetGauge().GetValue(); v != 1 {
			t.Errorf("build_info = %v, want 1", v)
		}
		return
	}
	t.Fatal("residentd_build_info not gathered")
}

func TestGaugesReadAtScrape(t *testing.T) {
	g := &fakeGauges{}
	m := New("test", g)
	expect := func(live, busy, queued string) {
		t.Helper()
		want := `
# HELP residentd_agents_busy Agent processes currently running a turn.
# TYPE residentd_agents_busy gauge
residentd_agents_busy ` + busy + `
# HELP residentd_agents_live Agent processes currently alive in the pool.
# TYPE residentd_agents_live gauge
residentd_agents_live ` + live + `
# HELP residentd_turns_queued Turns waiting in the pool queue for a process.
# TYPE residentd_turns_queued gauge
residentd_turns_queued ` + queued + `
`
		if err := testutil.GatherAndCompare(m.Registry, strings.NewReader(want),
			"residentd_agents_live", "residentd_agents_busy", "residentd_turns_queued"); err != nil {
			t.Error(err)
		}
	}
	expect("0", "0", "0")
	g.live.Store(4)
	g.busy.Store(2)
	g.queued.Store(7)
	expect("4", "2", "7")
}

type fakeBudgets []BudgetState

func (f fakeBudgets) BudgetStates() []BudgetState { return f }

// Budget gauges are read at scrape time, one series per configured budget.
func TestBudgetGaugesReadAtScrape(t *testing.T) {
	m := New("test", nil)
	m.SetBudgets(fakeBudgets{{Scope: "binding", ID: "b-claude", Spent: 4.5, Limit: 20}, {Scope: "channel", ID: "ch-backend", Spent: 0.25, Limit: 2}})
	want := `
# HELP residentd_budget_limit The daily limit of each configured budget, in the budgets' currency.
# TYPE residentd_budget_limit gauge
residentd_budget_limit{id="b-claude",scope="binding"} 20
residentd_budget_limit{id="ch-backend",scope="channel"} 2
# HELP residentd_budget_spent What the current budget day has cost so far, per configured daily budget (scope binding or channel), in the budgets' currency.
# TYPE residentd_budget_spent gauge
residentd_budget_spent{id="b-claude",scope="binding"} 4.5
residentd_budget_spent{id="ch-backend",scope="channel"} 0.25
`
	if err := testutil.GatherAndCompare(m.Registry, strings.NewReader(want), "residentd_budget_spent", "residentd_budget_limit"); err != nil {
		t.Error(err)
	}
}

func TestHelpers(t *testing.T) {
	m := New("test", nil)
	m.InitBindings([]string{"b-claude"})

	m.ObserveTurn("warm", "ok", 2*time.Second)
	m.ObserveTurn("warm", "ok", time.Second)
	m.ObserveTurn("cold", "rejected", 0)
	m.ObserveFirstUpdate("warm", time.Second)
	m.ObserveQueueWait(time.Second)
	m.Evicted("idle")
	m.AgentExited("signal")
	m.ObserveSpawn(time.Second)
	m.ObserveSessionReady("load", time.Second)
	m.Restore("resume", true)
	m.Restore("resume", false)
	m.Restore("load", false)
	m.Watermark(true)
	m.Watermark(false)
	m.Watermark(false)
	m.ChannelRender(3, 4, 1, 2, 5, 120, 1)
	m.ChannelRender(-1, 0, 0, 0, 0, 0, 0) // negative is ignored, not a panic
	m.TurnUsage(TurnCost{Binding: "b-claude", Shape: "warm", Known: true, Input: 100, Output: 20, CacheRead: 900})
	m.FramingChanged("b-claude")
	m.BriefTokens("turn", 466)
	m.Ingested(5, 3, 2, 1)
	m.Deleted()

	checks := []struct {
		name string
		got  float64
		want float64
	}{
		{"turns warm ok", testutil.ToFloat64(m.Turns.WithLabelValues("warm", "ok")), 2},
		{"turns cold rejected", testutil.ToFloat64(m.Turns.WithLabelValues("cold", "rejected")), 1},
		{"evictions idle", testutil.ToFloat64(m.Evictions.WithLabelValues("idle")), 1},
		{"evictions crash", testutil.ToFloat64(m.Evictions.WithLabelValues("crash")), 0},
		{"exits signal", testutil.ToFloat64(m.AgentExits.WithLabelValues("signal")), 1},
		{"restores resume ok", testutil.ToFloat64(m.SessionRestores.WithLabelValues("resume", "ok")), 1},
		{"restores resume failed", testutil.ToFloat64(m.SessionRestores.WithLabelValues("resume", "failed")), 1},
		{"restores load failed", testutil.ToFloat64(m.SessionRestores.WithLabelValues("load", "failed")), 1},
		{"wm commits", testutil.ToFloat64(m.WatermarkCommits), 1},
		{"wm discards", testutil.ToFloat64(m.WatermarkDiscards), 2},
		{"lines sent", testutil.ToFloat64(m.ChannelLines.WithLabelValues("sent")), 3},
		{"lines seen", testutil.ToFloat64(m.ChannelLines.WithLabelValues("seen")), 4},
		{"lines bound", testutil.ToFloat64(m.ChannelLines.WithLabelValues("bound")), 1},
		{"lines own", testutil.ToFloat64(m.ChannelLines.WithLabelValues("own")), 2},
		{"lines known", testutil.ToFloat64(m.ChannelLines.WithLabelValues("known")), 5},
		{"chars", testutil.ToFloat64(m.ChannelChars), 120},
		{"truncated", testutil.ToFloat64(m.ChannelTruncated), 1},
		{"tokens warm input", testutil.ToFloat64(m.AgentTokens.WithLabelValues("b-claude", "warm", "input")), 100},
		{"tokens warm output", testutil.ToFloat64(m.AgentTokens.WithLabelValues("b-claude", "warm", "output")), 20},
		{"tokens warm cache_read", testutil.ToFloat64(m.AgentTokens.WithLabelValues("b-claude", "warm", "cache_read")), 900},
		{"tokens warm cache_write", testutil.ToFloat64(m.AgentTokens.WithLabelValues("b-claude", "warm", "cache_write")), 0},
		{"framing b-claude", testutil.ToFloat64(m.FramingChanges.WithLabelValues("b-claude")), 1},
		{"brief turn", testutil.ToFloat64(m.BriefTokensSent.WithLabelValues("turn")), 466},
		{"brief framing", testutil.ToFloat64(m.BriefTokensSent.WithLabelValues("framing")), 0},
		{"ingested added", testutil.ToFloat64(m.MessagesIngested.WithLabelValues("added")), 5},
		{"ingested duplicate", testutil.ToFloat64(m.MessagesIngested.WithLabelValues("duplicate")), 2},
		{"ingested rejected", testutil.ToFloat64(m.MessagesIngested.WithLabelValues("rejected")), 1},
		{"ingested edited", testutil.ToFloat64(m.MessagesIngested.WithLabelValues("edited")), 3},
		{"ingested deleted", testutil.ToFloat64(m.MessagesIngested.WithLabelValues("deleted")), 1},
	}
	for _, c := range checks {
		if c.got != c.want {
			t.Errorf("%s = %v, want %v", c.name, c.got, c.want)
		}
	}

	// Histogram counts: the rejected turn is not a duration sample.
	mfs, err := m.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	counts := map[string]uint64{}
	for _, mf := range mfs {
		for _, mt := range mf.GetMetric() {
			if h := mt.GetHistogram(); h != nil {
				key := mf.GetName()
				for _, l := range mt.GetLabel() {
					key += "/" + l.GetValue()
				}
				counts[key] = h.GetSampleCount()
			}
		}
	}
	for key, n := range map[string]uint64{
		"residentd_turn_duration_seconds/warm":     2,
		"residentd_turn_duration_seconds/cold":     0,
		"residentd_turn_first_update_seconds/warm": 1,
		"residentd_queue_wait_seconds":             1,
		"residentd_agent_spawn_seconds":            1,
		"residentd_session_ready_seconds/load":     1,
		"residentd_session_ready_seconds/new":      0,
	} {
		if counts[key] != n {
			t.Errorf("%s sample count = %d, want %d", key, counts[key], n)
		}
	}
}

func TestScrapeOverHTTP(t *testing.T) {
	g := &fakeGauges{}
	g.live.Store(3)
	m := New("test", g)
	srv := newServer(t, m)

	body := get(t, srv+"/metrics")
	for _, line := range []string{
		`residentd_turns_total{outcome="ok",shape="warm"} 0`,
		`residentd_evictions_total{reason="crash"} 0`,
		`residentd_agents_live 3`,
		`residentd_build_info{goversion=`,
	} {
		if !strings.Contains(body, line) {
			t.Errorf("scrape lacks %q", line)
		}
	}

	m.ObserveTurn("warm", "ok", time.Second)
	if body := get(t, srv+"/metrics"); !strings.Contains(body, `residentd_turns_total{outcome="ok",shape="warm"} 1`) {
		t.Error("scrape does not reflect an observed turn")
	}
}

func get(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s", url, resp.Status)
	}
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestGapBucket(t *testing.T) {
	for _, tc := range []struct {
		gap  time.Duration
		has  bool
		want string
	}{
		{0, false, "first"},
		{time.Minute, true, "under_5m"},
		{5 * time.Minute, true, "5m_to_60m"},
		{time.Hour, true, "5m_to_60m"},
		{time.Hour + time.Second, true, "over_60m"},
	} {
		if got := GapBucket(tc.gap, tc.has); got != tc.want {
			t.Errorf("GapBucket(%v, %v) = %q, want %q", tc.gap, tc.has, got, tc.want)
		}
	}
}
