package metrics

import (
	"encoding/json"
	"regexp"
	"slices"
	"strings"
	"testing"

	dto "github.com/prometheus/client_model/go"

	"github.com/residentd/residentd/internal/testkit"
)

var metricName = regexp.MustCompile(`\bresidentd_[a-zA-Z0-9_]+`)

// exportedNames is every sample name the registry can produce, with the
// _bucket/_sum/_count series of histograms spelled out.
func exportedNames(t *testing.T) map[string]bool {
	t.Helper()
	m := New("test", nil)
	// Series labelled by binding exist once the daemon names its bindings.
	m.InitBindings([]string{"b-claude"})
	// Budget gauges exist for configured budgets.
	m.SetBudgets(fakeBudgets{{Scope: "binding", ID: "b-claude", Limit: 1}})
	mfs, err := m.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for _, mf := range mfs {
		n := mf.GetName()
		names[n] = true
		if mf.GetType() == dto.MetricType_HISTOGRAM {
			names[n+"_bucket"], names[n+"_sum"], names[n+"_count"] = true, true, true
		}
	}
	return names
}

func checkNames(t *testing.T, file string, exprs []string, known map[string]bool) {
	t.Helper()
	found := 0
	for _, e := range exprs {
		for _, n := range metricName.FindAllString(e, -1) {
			found++
			if !known[n] {
				t.Errorf("%s uses %s, which residentd does not export", file, n)
			}
		}
	}
	if found == 0 {
		t.Errorf("%s: no residentd metric found; is the parser broken?", file)
	}
}

// The YAML is read loosely (no YAML library in the module): metric names in
// the whole file, alert names from "- alert:" lines.
func TestAlertRulesUseExportedMetrics(t *testing.T) {
	const file = "../../deploy/prometheus/alerts.yml"
	b := testkit.ReadFile(t, file)
	checkNames(t, file, []string{string(b)}, exportedNames(t))

	var alerts []string
	for _, m := range regexp.MustCompile(`(?m)^\s*-\s*alert:\s*(\S+)`).FindAllStringSubmatch(string(b), -1) {
		alerts = append(alerts, m[1])
	}
	for _, want := range []string{"ResidentdCrashLoop", "ResidentdQueueSaturated", "ResidentdWatermarkDiscardsRising", "ResidentdDown", "ResidentdBudgetNearlySpent", "ResidentdBudgetRefusingTurns", "ResidentdStateDiskFull"} {
		if !slices.Contains(alerts, want) {
			t.Errorf("alerts.yml lacks alert %s (has %q)", want, alerts)
		}
	}
	if strings.Contains(string(b), "\t") {
		t.Error("alerts.yml contains a tab; YAML indentation must be spaces")
	}
}

func TestScrapeConfigTarget(t *testing.T) {
	b := testkit.ReadFile(t, "../../deploy/prometheus/scrape.yml")
	for _, want := range []string{"job_name: residentd", `"127.0.0.1:9464"`} {
		if !strings.Contains(string(b), want) {
			t.Errorf("scrape.yml lacks %s", want)
		}
	}
}

func TestDashboardUsesExportedMetrics(t *testing.T) {
	const file = "../../deploy/grafana/residentd.json"
	b := testkit.ReadFile(t, file)
	var dash struct {
		UID    string `json:"uid"`
		Title  string `json:"title"`
		Panels []struct {
			Title   string `json:"title"`
			Type    string `json:"type"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(b, &dash); err != nil {
		t.Fatalf("%s is not valid JSON: %v", file, err)
	}
	if dash.UID == "" || dash.Title == "" || len(dash.Panels) == 0 {
		t.Fatalf("dashboard lacks uid/title/panels")
	}
	var exprs []string
	for _, p := range dash.Panels {
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no queries", p.Title)
		}
		for _, tg := range p.Targets {
			if tg.Expr == "" {
				t.Errorf("panel %q has an empty query", p.Title)
			}
			exprs = append(exprs, tg.Expr)
		}
	}
	checkNames(t, file, exprs, exportedNames(t))

	// The panels the operator asked for, by the series they must show.
	all := strings.Join(exprs, "\n")
	for _, want := range []string{
		"residentd_turns_total", "residentd_evictions_total", "residentd_agents_live",
		"residentd_agents_busy", "residentd_turns_queued", "residentd_turn_duration_seconds_bucket",
		"residentd_agent_tokens_total", "residentd_watermark_commits_total", "residentd_watermark_discards_total",
		"residentd_usage_cost_total", "residentd_budget_spent", "residentd_budget_limit", "residentd_usage_cost_by_gap_total",
	} {
		if !strings.Contains(all, want) {
			t.Errorf("dashboard never queries %s", want)
		}
	}
}
