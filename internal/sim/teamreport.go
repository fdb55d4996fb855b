package sim

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/residentd/residentd/internal/residency"
)

// TeamOptions are what `residentd sim --team` runs: the team's days (one
// trace, or one generated per seed), the model and the policies.
type TeamOptions struct {
	Params TeamParams
	Model  TeamModel
	// Seeds are the generated days' seeds; the figures are their means.
	// Ignored when Trace is set.
	Seeds []uint64
	// Trace, when set, is played instead of generated days.
	Trace    []Mention
	Policies []PolicySpec // nil: TeamPolicies
}

// TeamCellReport is one cell of the matrix: every policy's figures.
type TeamCellReport struct {
	TTL               string       `json:"ttl"` // "5m", "1h" or "chosen"
	RestoreKeepsCache bool         `json:"restore_keeps_cache"`
	KeepAlive         bool         `json:"keep_alive,omitempty"`
	Policies          []TeamPolicy `json:"policies"`
}

// TeamPolicy is one policy's figures in a cell, the mean over the runs.
type TeamPolicy struct {
	Name string `json:"name"`
	TeamFigures
}

// TeamReport is the outcome of RunTeam.
type TeamReport struct {
	Runs     int     `json:"runs"` // days played per figure: seeds, or 1 for a trace
	Mentions float64 `json:"mentions_per_run"`
	// Cells is the matrix: cache TTL {5m, 1h} × restore {keeps the cache,
	// loses it}, keep-alives off.
	Cells []TeamCellReport `json:"cells"`
	// TTLChoice is the TTL chosen per binding from its keys' return gaps
	// against the fixed ones, for each restore mode (the new policy and
	// the source's).
	TTLChoice []TeamCellReport `json:"ttl_choice"`
	// KeepAlive is the new policy with keep-alives where the model says
	// they pay, apart from the matrix, beside the same without.
	KeepAlive []TeamCellReport `json:"keep_alive"`
}

// days returns the days to play.
func (o TeamOptions) days() ([][]Mention, error) {
	if len(o.Trace) > 0 {
		return [][]Mention{o.Trace}, nil
	}
	if len(o.Seeds) == 0 {
		return nil, fmt.Errorf("%w: no seed and no trace", ErrParams)
	}
	out := make([][]Mention, 0, len(o.Seeds))
	for _, s := range o.Seeds {
		ms, err := GenerateTeam(o.Params, s)
		if err != nil {
			return nil, err
		}
		if len(ms) == 0 {
			return nil, fmt.Errorf("%w: seed %d gave no mention", ErrParams, s)
		}
		out = append(out, ms)
	}
	return out, nil
}

// RunTeam plays the matrix, the TTL choice and the keep-alive tables.
func RunTeam(o TeamOptions) (*TeamReport, error) {
	days, err := o.days()
	if err != nil {
		return nil, err
	}
	pols := o.Policies
	if pols == nil {
		pols = TeamPolicies()
	}
	r := &TeamReport{Runs: len(days)}
	for _, d := range days {
		r.Mentions += float64(len(d)) / float64(len(days))
	}
	play := func(cells []Cell, ps []PolicySpec) ([]TeamCellReport, error) {
		var out []TeamCellReport
		for _, c := range cells {
			cr, err := playCell(days, o.Model, c, ps)
			if err != nil {
				return nil, err
			}
			out = append(out, cr)
		}
		return out, nil
	}
	var matrix, choice, keep []Cell
	for _, ttl := range []time.Duration{residency.TTL5m, residency.TTL1h} {
		for _, keeps := range []bool{true, false} {
			matrix = append(matrix, Cell{TTL: ttl, RestoreKeepsCache: keeps})
		}
	}
	for _, keeps := range []bool{true, false} {
		for _, ttl := range []time.Duration{residency.TTL5m, residency.TTL1h, 0} {
			choice = append(choice, Cell{TTL: ttl, RestoreKeepsCache: keeps})
		}
	}
	for _, c := range matrix {
		keep = append(keep, c)
		c.KeepAlive = true
		keep = append(keep, c)
	}
	if r.Cells, err = play(matrix, pols); err != nil {
		return nil, err
	}
	if r.TTLChoice, err = play(choice, pick(pols, "lru+30m", "saving")); err != nil {
		return nil, err
	}
	if r.KeepAlive, err = play(keep, pick(pols, "saving")); err != nil {
		return nil, err
	}
	return r, nil
}

// pick is the policies of ps named names, in ps's order.
func pick(ps []PolicySpec, names ...string) []PolicySpec {
	var out []PolicySpec
	for _, p := range ps {
		for _, n := range names {
			if p.Name == n {
				out = append(out, p)
			}
		}
	}
	return out
}

// playCell plays every day under every policy in cell c and takes the
// means.
func playCell(days [][]Mention, m TeamModel, c Cell, pols []PolicySpec) (TeamCellReport, error) {
	cr := TeamCellReport{TTL: ttlName(c.TTL), RestoreKeepsCache: c.RestoreKeepsCache, KeepAlive: c.KeepAlive}
	for _, pol := range pols {
		var figs []TeamFigures
		for _, d := range days {
			f, err := PlayTeam(d, m, c, pol)
			if err != nil {
				return cr, fmt.Errorf("sim: %s in %s: %w", pol.Name, cr.label(), err)
			}
			figs = append(figs, f)
		}
		cr.Policies = append(cr.Policies, TeamPolicy{Name: pol.Name, TeamFigures: meanFigures(figs)})
	}
	return cr, nil
}

func ttlName(ttl time.Duration) string {
	switch ttl {
	case 0:
		return "chosen"
	case residency.TTL5m:
		return "5m"
	case residency.TTL1h:
		return "1h"
	}
	return ttl.String()
}

// label names the cell in the table.
func (c TeamCellReport) label() string {
	restore := "restore loses the cache"
	if c.RestoreKeepsCache {
		restore = "restore keeps the cache"
	}
	s := "cache TTL " + c.TTL + ", " + restore
	if c.KeepAlive {
		s += ", keep-alives on"
	}
	return s
}

// meanFigures averages figures field by field (peak memory and p95 too:
// the mean of the runs' peaks and p95s).
func meanFigures(fs []TeamFigures) TeamFigures {
	var m TeamFigures
	if len(fs) == 0 {
		return m
	}
	n := float64(len(fs))
	for _, f := range fs {
		for i, p := range figureFields(&m) {
			*p += *figureFields(&f)[i] / n
		}
	}
	return m
}

// figureFields lists f's fields, for meanFigures.
func figureFields(f *TeamFigures) []*float64 {
	return []*float64{&f.Mentions, &f.Turns, &f.Ended, &f.Cost, &f.CostPerMention, &f.CacheWriteTokens, &f.CacheReadTokens,
		&f.Cold, &f.Restores, &f.Warm, &f.Evictions, &f.CachesLost, &f.Reaped, &f.MeanStartedS, &f.P95StartedS,
		&f.ProcessHours, &f.PeakMemoryMiB, &f.KeepAlives, &f.KeepAliveCost, &f.Spawns, &f.Spawns1h}
}

// WriteJSON prints the report as one JSON object.
func (r *TeamReport) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	if err := enc.Encode(r); err != nil {
		return fmt.Errorf("sim: write JSON: %w", err)
	}
	return nil
}

// WriteMarkdown prints the report's tables.
func (r *TeamReport) WriteMarkdown(w io.Writer) error {
	var b strings.Builder
	fmt.Fprintf(&b, "team days: %d run(s), %.1f mentions a run; figures are means over the runs\n", r.Runs, r.Mentions)
	fmt.Fprintf(&b, "the saving column: cost per mention below %s's; started: from the mention to its turn's started\n", TeamBaseline)
	for _, c := range r.Cells {
		c.writeTable(&b)
	}
	b.WriteString("\n## TTL chosen per binding from its keys' return gaps, against fixed 5m and 1h\n")
	for _, c := range r.TTLChoice {
		c.writeTable(&b)
	}
	b.WriteString("\n## Keep-alives where the model says they pay (off in the tables above)\n")
	for _, c := range r.KeepAlive {
		c.writeTable(&b)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// TeamBaseline is the policy the savings are measured against: today's.
const TeamBaseline = "lru+30m"

func (c TeamCellReport) writeTable(b *strings.Builder) {
	fmt.Fprintf(b, "\n### %s\n\n", c.label())
	b.WriteString("| policy | $/mention | saving | cache-write tok | restores | cold | caches lost | mean started s | p95 started s | process-h | peak MiB | 1h spawns | keep-alives |\n")
	b.WriteString("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	base := 0.0
	for _, p := range c.Policies {
		if p.Name == TeamBaseline {
			base = p.CostPerMention
		}
	}
	var ours, oracle float64
	for _, p := range c.Policies {
		switch p.Name {
		case "saving":
			ours = 1 - p.CostPerMention/base
		case "oracle":
			oracle = 1 - p.CostPerMention/base
		}
		saving := "–"
		if base > 0 {
			saving = fmt.Sprintf("%.1f %%", 100*(1-p.CostPerMention/base))
		}
		spawns1h := "–"
		if p.Spawns > 0 {
			spawns1h = fmt.Sprintf("%.0f %%", 100*p.Spawns1h/p.Spawns)
		}
		fmt.Fprintf(b, "| %s | %.4f | %s | %s | %.1f | %.1f | %.1f | %.2f | %.1f | %.1f | %.0f | %s | %.1f |\n",
			p.Name, p.CostPerMention, saving, thousands(int(p.CacheWriteTokens+0.5)), p.Restores, p.Cold, p.CachesLost,
			p.MeanStartedS, p.P95StartedS, p.ProcessHours, p.PeakMemoryMiB, spawns1h, p.KeepAlives)
	}
	if base > 0 && oracle > 0.001 {
		fmt.Fprintf(b, "\nsaving's saving is %.0f %% of the oracle's\n", 100*ours/oracle)
	}
}
