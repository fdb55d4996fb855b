package sim

import (
	"bytes"
	"encoding/json"
	"math"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/residentd/residentd/internal/residency"
	"github.com/residentd/residentd/internal/session"
)

// TestGenerateTeamShape: the same seed gives the same days; every
// mention falls in working hours, none at lunch; every channel speaks,
// the busiest most; the trace format reads back what it wrote.
func TestGenerateTeamShape(t *testing.T) {
	p := DefaultTeamParams()
	ms, err := GenerateTeam(p, 1)
	if err != nil {
		t.Fatal(err)
	}
	again, _ := GenerateTeam(p, 1)
	other, _ := GenerateTeam(p, 2)
	if !reflect.DeepEqual(ms, again) || reflect.DeepEqual(ms, other) {
		t.Fatal("a seed does not give its own days")
	}
	per := map[string]int{}
	for i, m := range ms {
		h := m.At.Hour()
		if h < 8 || h >= 19 || h == 12 || m.At.Before(p.First) || !m.At.Before(p.First.AddDate(0, 0, p.Days)) {
			t.Fatalf("mention at %s: outside the working days", m.At)
		}
		if i > 0 && m.At.Before(ms[i-1].At) {
			t.Fatal("mentions out of order")
		}
		per[m.Channel]++
	}
	if len(per) != len(p.MeanGaps) || per["ch-1"] <= per["ch-8"] {
		t.Fatalf("mentions per channel %v: want all %d channels, ch-1 (12 min) busier than ch-8 (300 min)", per, len(p.MeanGaps))
	}
	var buf bytes.Buffer
	if err := WriteTrace(&buf, ms); err != nil {
		t.Fatal(err)
	}
	back, err := ReadTrace(&buf, "other")
	if err != nil || len(back) != len(ms) {
		t.Fatalf("trace read back: %d mentions, %v; want %d", len(back), err, len(ms))
	}
	for i := range ms {
		if !back[i].At.Equal(ms[i].At) || back[i].Channel != ms[i].Channel || back[i].Binding != ms[i].Binding {
			t.Fatalf("trace line %d: %+v, want %+v", i, back[i], ms[i])
		}
	}
	if _, err := ReadTrace(strings.NewReader("2026-12-01T08:00:00Z\n"), "b"); err == nil {
		t.Fatal("a line without a channel was read")
	}
}

// shortTeam is a short team day: one day, four channels, work until noon.
func shortTeam() TeamOptions {
	p := DefaultTeamParams()
	p.Days, p.DayEnd, p.LunchStart, p.LunchEnd = 1, 12*time.Hour, 12*time.Hour, 12*time.Hour
	p.MeanGaps = []time.Duration{10 * time.Minute, 20 * time.Minute, 60 * time.Minute, 120 * time.Minute, 30 * time.Minute, 90 * time.Minute}
	m := DefaultTeamModel()
	m.Slots = 3
	return TeamOptions{Params: p, Model: m, Seeds: []uint64{1, 2}}
}

// TestTeamRunInvariants plays a short team day through the pool under
// every policy in every cell: every mention is a turn that ends once, each
// turn one of cold, restored or warm; the oracle costs no more than any
// policy that cannot see ahead; the JSON carries the fields BENCHMARKS.md
// names.
func TestTeamRunInvariants(t *testing.T) {
	o := shortTeam()
	r, err := RunTeam(o)
	if err != nil {
		t.Fatal(err)
	}
	want := 0.0
	for _, s := range o.Seeds {
		ms, _ := GenerateTeam(o.Params, s)
		want += float64(len(ms)) / float64(len(o.Seeds))
	}
	if r.Runs != 2 || r.Mentions != want || len(r.Cells) != 4 || len(r.TTLChoice) != 6 || len(r.KeepAlive) != 8 {
		t.Fatalf("report: %d runs, %g mentions (want %g), %d cells, %d TTL rows, %d keep-alive rows", r.Runs, r.Mentions, want, len(r.Cells), len(r.TTLChoice), len(r.KeepAlive))
	}
	for _, c := range append(append(append([]TeamCellReport{}, r.Cells...), r.TTLChoice...), r.KeepAlive...) {
		checkCell(t, c, want)
	}
	for _, c := range r.Cells {
		if len(c.Policies) != len(TeamPolicies()) {
			t.Fatalf("%s: %d policies", c.label(), len(c.Policies))
		}
		oracle := c.Policies[len(c.Policies)-1]
		for _, p := range c.Policies[:len(c.Policies)-1] {
			if oracle.Name != "oracle" || oracle.CostPerMention > p.CostPerMention+1e-12 {
				t.Errorf("%s: %s costs $%.5f a mention, below the oracle's $%.5f", c.label(), p.Name, p.CostPerMention, oracle.CostPerMention)
			}
		}
	}
	checkJSON(t, r)
	var md bytes.Buffer
	if err := r.WriteMarkdown(&md); err != nil || !strings.Contains(md.String(), "| saving |") {
		t.Fatalf("table: %v\n%s", err, md.String())
	}
}

func checkCell(t *testing.T, c TeamCellReport, mentions float64) {
	t.Helper()
	for _, p := range c.Policies {
		f := p.TeamFigures
		if f.Mentions != mentions || f.Turns != mentions || f.Ended != mentions || f.Cold+f.Restores+f.Warm != f.Turns {
			t.Errorf("%s, %s: %g mentions, %g turns, %g ended, %g cold + %g restored + %g warm; want %g each",
				c.label(), p.Name, f.Mentions, f.Turns, f.Ended, f.Cold, f.Restores, f.Warm, mentions)
		}
		if f.Cost <= 0 || f.CacheWriteTokens <= 0 || f.ProcessHours <= 0 || f.PeakMemoryMiB <= 0 || f.P95StartedS < f.MeanStartedS/20 {
			t.Errorf("%s, %s: figures %+v", c.label(), p.Name, f)
		}
		if !c.KeepAlive && f.KeepAlives != 0 {
			t.Errorf("%s, %s: %g keep-alives with keep-alives off", c.label(), p.Name, f.KeepAlives)
		}
	}
}

// checkJSON: --json's object has the fields BENCHMARKS.md names.
func checkJSON(t *testing.T, r *TeamReport) {
	t.Helper()
	var buf bytes.Buffer
	if err := r.WriteJSON(&buf); err != nil {
		t.Fatal(err)
	}
	var got struct {
		Cells []struct {
			TTL               *string `json:"ttl"`
			RestoreKeepsCache *bool   `json:"restore_keeps_cache"`
			Policies          []struct {
				Name           *string  `json:"name"`
				CostPerMention *float64 `json:"cost_per_mention"`
				Restores       *float64 `json:"restores"`
				P95StartedS    *float64 `json:"p95_started_s"`
				ProcessHours   *float64 `json:"process_hours"`
			} `json:"policies"`
		} `json:"cells"`
	}
	if err := json.Unmarshal(buf.Bytes(), &got); err != nil {
		t.Fatal(err)
	}
	ttls := map[string]bool{}
	for _, c := range got.Cells {
		if c.TTL == nil || c.RestoreKeepsCache == nil || len(c.Policies) == 0 {
			t.Fatalf("cell without ttl, restore_keeps_cache or policies: %s", buf.String())
		}
		ttls[*c.TTL] = true
		for _, p := range c.Policies {
			if p.Name == nil || p.CostPerMention == nil || p.Restores == nil || p.P95StartedS == nil || p.ProcessHours == nil {
				t.Fatalf("policy without a named field: %s", buf.String())
			}
		}
	}
	if !ttls["5m"] || !ttls["1h"] || len(ttls) != 2 {
		t.Fatalf("cells' TTLs %v, want 5m and 1h", ttls)
	}
}

// TestTeamRejectsNoDays: neither seeds nor a trace is a mistake.
func TestTeamRejectsNoDays(t *testing.T) {
	o := shortTeam()
	o.Seeds = nil
	if _, err := RunTeam(o); err == nil {
		t.Fatal("no seeds and no trace: no error")
	}
	if _, err := PlayTeam(nil, o.Model, Cell{TTL: time.Hour}, TeamPolicies()[0]); err == nil {
		t.Fatal("no mentions: no error")
	}
}

// expiredFirst is the simple cache-aware calibration rule: expired caches go
// first (least recently used first), then the least recently used; a key
// goes once its cache has expired.
type expiredFirst struct{ weigh bool }

func (p expiredFirst) Name() string { return "expired-first" }

// Victim: with weigh, of each class the key least likely back before its
// cache expires (from its mean return gap, exponential) times its
// context: the second calibration rule.
func (p expiredFirst) Victim(now time.Time, idle []residency.Key) residency.Choice {
	c := residency.Choice{Index: -1, Reason: "calibration rule"}
	best, bestExpired := 0.0, false
	for i, k := range idle {
		expired := !now.Before(k.CacheExpires())
		v := float64(k.LastUsed.UnixNano())
		if p.weigh {
			mean := time.Hour
			if len(k.Gaps) > 0 {
				mean = 0
				for _, g := range k.Gaps {
					mean += g / time.Duration(len(k.Gaps))
				}
			}
			left := max(k.CacheExpires().Sub(now), 0)
			v = (1 - math.Exp(-left.Seconds()/mean.Seconds())) * float64(k.ContextTokens)
		}
		if !k.Working && (c.Index < 0 || expired && !bestExpired || expired == bestExpired && v < best) {
			c.Index, best, bestExpired = i, v, expired
		}
	}
	return c
}

func (p expiredFirst) Expire(now time.Time, k residency.Key) (bool, string) {
	return !k.Working && !now.Before(k.CacheExpires()), "calibration rule"
}

// TestSavingAgainstSimpleRules: on the default team days, cache TTL 1 h
// and a restore that loses the cache, the saving policy costs no more
// than the two calibration rules, and the oracle no more than
// any; -v prints each one's saving against today's policy.
func TestSavingAgainstSimpleRules(t *testing.T) {
	pols := pick(TeamPolicies(), TeamBaseline, "saving", "oracle")
	for _, w := range []bool{false, true} {
		name := "expired-first"
		if w {
			name += ", weighed"
		}
		pols = append(pols, PolicySpec{Name: name,
			Make: func(func(session.Key, time.Time) (time.Time, bool)) residency.Policy { return expiredFirst{weigh: w} }})
	}
	seeds := []uint64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}
	days, err := TeamOptions{Params: DefaultTeamParams(), Seeds: seeds}.days()
	if err != nil {
		t.Fatal(err)
	}
	c, err := playCell(days, DefaultTeamModel(), Cell{TTL: residency.TTL1h}, pols)
	if err != nil {
		t.Fatal(err)
	}
	cost := map[string]float64{}
	for _, p := range c.Policies {
		cost[p.Name] = p.CostPerMention
		t.Logf("%-22s $%.4f a mention, %.1f %% below %s, %.1f restores", p.Name, p.CostPerMention, 100*(1-p.CostPerMention/c.Policies[0].CostPerMention), TeamBaseline, p.Restores)
	}
	for name, x := range cost {
		if x < cost["oracle"] || name != "oracle" && name != "saving" && name != TeamBaseline && x < cost["saving"] {
			t.Errorf("%s costs $%.5f a mention: below the oracle ($%.5f) or saving ($%.5f)", name, x, cost["oracle"], cost["saving"])
		}
	}
}
