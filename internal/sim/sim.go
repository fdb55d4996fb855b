package sim

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/residentd/residentd/internal/delivery"
)

// Report is the outcome of a run.
type Report struct {
	Stats        Stats
	MaxChars     int
	PrefixTokens int
	BriefTokens  int
	EvictAt      int
	Source       bool     // quote the source article's figures (the default channel only)
	Order        []string // strategies, in table order
	Figures      map[string]Figures
	Rows         []Row
	Elapsed      time.Duration
}

var (
	mainRun  = []string{Window, Watermark, WatermarkNoOwn, BriefInFraming}
	evictRun = []string{WindowEvicted, WatermarkRestored, WatermarkEvictCold}
)

// Run plays o.Messages through the real daemon once per strategy and
// measures what each strategy's agent received.
func Run(ctx context.Context, o Options) (*Report, error) {
	start := time.Now()
	if o.AgentCommand == "" {
		return nil, fmt.Errorf("sim: no agent command")
	}
	// Checked before the runs, not after them: a bad figure would only
	// surface once every strategy had been played.
	for _, f := range []struct {
		name string
		v    int
	}{{"prefix tokens", o.PrefixTokens}, {"evict-at", o.EvictAt}, {"limit", o.Limit}, {"max chars", o.MaxChars}} {
		if f.v < 0 {
			return nil, fmt.Errorf("sim: %s is %d; it must be 0 or more", f.name, f.v)
		}
	}
	dir := o.Dir
	if dir == "" {
		tmp, err := os.MkdirTemp("", "residentd-sim-")
		if err != nil {
			return nil, err
		}
		defer os.RemoveAll(tmp)
		dir = tmp
	}
	tc, err := NewTokens()
	if err != nil {
		return nil, err
	}
	mentions := 0
	var at []time.Time // created_at per mention
	for _, m := range o.Messages {
		if m.MentionsAgent {
			mentions++
			at = append(at, m.CreatedAt)
		}
	}
	if mentions == 0 {
		return nil, fmt.Errorf("sim: the channel has no message that mentions the agent")
	}
	evictAt := o.EvictAt
	if evictAt > mentions || evictAt < 2 {
		evictAt = 0 // no earlier process to evict
	}
	total := mentions
	if evictAt > 0 {
		total *= 2
	}
	progress := func(base int) func(int) {
		return func(n int) {
			if o.Progress != nil {
				fmt.Fprintf(o.Progress, "\rsim: mention %d/%d ", base+n, total)
			}
		}
	}
	mainDir := filepath.Join(dir, "main")
	outs, err := o.play(ctx, mainDir, mainRun, 0, progress(0))
	if err != nil {
		return nil, err
	}
	evDir := filepath.Join(dir, "evict")
	var evOuts map[string]outcome
	if evictAt > 0 {
		if evOuts, err = o.play(ctx, evDir, evictRun, evictAt, progress(mentions)); err != nil {
			return nil, err
		}
	}
	if o.Progress != nil {
		fmt.Fprintf(o.Progress, "\rsim: %d mentions played, counting tokens\n", total)
	}

	prefix := Prefix(tc, o.PrefixTokens)
	stable := tc.encode(prefix)
	r := &Report{
		Stats: Describe(o.Messages, o.MaxChars), MaxChars: o.MaxChars, PrefixTokens: len(stable),
		BriefTokens: tc.Count(delivery.DefaultBrief), EvictAt: evictAt, Source: o.SourceChannel, Figures: map[string]Figures{},
	}
	add := func(name, source, dir string, outs map[string]outcome, pre func(int) []uint, ev int) error {
		turns, err := readRecord(recordPath(dir, source), bindingID(source), outs)
		if err != nil {
			return err
		}
		f, rows := account(tc, modeled{name: name, turns: turns, prefix: pre, evictAt: ev, omitOwn: name == WatermarkNoOwn}, o.Messages, o.MaxChars)
		r.Order = append(r.Order, name)
		r.Figures[name] = f
		r.Rows = append(r.Rows, rows...)
		return nil
	}
	same := func(int) []uint { return stable }
	volatile := func(m int) []uint { return tc.encode(StatusLine(at[m]) + "\n" + prefix) }
	steps := []struct {
		name, source string
		pre          func(int) []uint
	}{
		{Window, Window, same}, {Watermark, Watermark, same}, {Unstable, Watermark, volatile},
		{WatermarkNoOwn, WatermarkNoOwn, same}, {BriefInFraming, BriefInFraming, same},
	}
	for _, s := range steps {
		if err := add(s.name, s.source, mainDir, outs, s.pre, 0); err != nil {
			return nil, err
		}
	}
	if evictAt > 0 {
		for _, name := range evictRun {
			if err := add(name, name, evDir, evOuts, same, evictAt); err != nil {
				return nil, err
			}
		}
	}
	r.Elapsed = time.Since(start)
	return r, nil
}
