package sim

import (
	"encoding/csv"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
)

// source holds the numbers the source article printed for its 30-mention
// run, shown beside ours for reference.
var source = map[string][]string{
	Window:    {"515,784", "485,477", "0.941", "943", "9,132", "5,057 (55%)", "360", "25"},
	Watermark: {"417,419", "392,256", "0.940", "766", "4,075", "0", "162", "25"},
	Unstable:  {"418,259", "145", "0.000", "14,315", "4,075", "0", "162", "–"},
}

var figureNames = []string{
	"input tokens, all turns", "of which cacheable prefix", "cacheable-prefix ratio", "uncached tokens per warm turn",
	"channel-context tokens sent", "of which seen before", "channel lines sent", "messages never shown (counted in a pointer)",
}

var titles = map[string]string{
	Window: "window", Watermark: "watermark", Unstable: "unstable prefix", WatermarkNoOwn: "watermark, no own posts",
	BriefInFraming: "brief in framing", WindowEvicted: "window", WatermarkRestored: "watermark, restored",
	WatermarkEvictCold: "watermark, cold (restore off)",
}

func cells(f Figures) []string {
	seen := "0"
	if f.ChannelTokensSeen > 0 {
		seen = fmt.Sprintf("%s (%.0f%%)", thousands(f.ChannelTokensSeen), f.ChannelSeenPct)
	}
	return []string{
		thousands(f.InputTokens), thousands(f.CacheablePrefixTokens), fmt.Sprintf("%.3f", f.CacheableRatio),
		thousands(int(f.UncachedPerWarmTurn + 0.5)), thousands(f.ChannelTokens), seen, thousands(f.ChannelLines),
		strconv.Itoa(f.MessagesNeverShown),
	}
}

// WriteMarkdown prints the channel summary and the tables.
func (r *Report) WriteMarkdown(w io.Writer) error {
	var b strings.Builder
	s := r.Stats
	fmt.Fprintf(&b, "channel: %d messages, %d mentions, %d longer than %d chars, %d agent posts\n", s.Messages, s.Mentions, s.Long, r.MaxChars, s.AgentPosts)
	fmt.Fprintf(&b, "messages between mentions: min %d, median %d, max %d\n", s.GapMin, s.GapMedian, s.GapMax)
	fmt.Fprintf(&b, "prefix %d tok, brief %d tok (cl100k_base); run took %.2f s\n\n", r.PrefixTokens, r.BriefTokens, r.Elapsed.Seconds())

	main := []string{}
	for _, n := range r.Order {
		if n == Window || n == Watermark || n == Unstable || n == WatermarkNoOwn || n == BriefInFraming {
			main = append(main, n)
		}
	}
	// The source's columns are its own run's printed figures, not computed
	// here; they are quoted only beside the default channel shaped like it.
	src := func(cells ...string) string {
		if !r.Source {
			return "\n"
		}
		return " " + strings.Join(cells, " | ") + " |\n"
	}
	fmt.Fprintf(&b, "| %d mentions |", s.Mentions)
	for _, n := range main {
		fmt.Fprintf(&b, " %s |", titles[n])
	}
	b.WriteString(src("source article: window", "source article: watermark", "source article: unstable"))
	b.WriteString("|---|" + strings.Repeat("---:|", len(main)))
	b.WriteString(src("---:", "---:", "---:"))
	cols := make([][]string, len(main))
	for i, n := range main {
		cols[i] = cells(r.Figures[n])
	}
	for i, name := range figureNames {
		fmt.Fprintf(&b, "| %s |", name)
		for _, c := range cols {
			fmt.Fprintf(&b, " %s |", c[i])
		}
		b.WriteString(src(source[Window][i], source[Watermark][i], source[Unstable][i]))
	}
	if r.Source {
		b.WriteString("\nThe source-article columns quote the figures the source printed for its own 200-message channel; they are not measured here.\n")
	}

	if r.EvictAt > 0 {
		fmt.Fprintf(&b, "\nEviction before mention %d (daemon restarted on the same store):\n\n", r.EvictAt)
		b.WriteString("| |")
		for _, n := range evictRun {
			fmt.Fprintf(&b, " %s |", titles[n])
		}
		b.WriteString(src("source article: window", "source article: watermark"))
		b.WriteString("|---|" + strings.Repeat("---:|", len(evictRun)))
		b.WriteString(src("---:", "---:"))
		row := func(name string, v func(Figures) string, quoted ...string) {
			fmt.Fprintf(&b, "| %s |", name)
			for _, n := range evictRun {
				fmt.Fprintf(&b, " %s |", v(r.Figures[n]))
			}
			b.WriteString(src(quoted...))
		}
		row("input tokens, all turns", func(f Figures) string { return thousands(f.InputTokens) }, "290k", "245k")
		row("cacheable-prefix ratio", func(f Figures) string { return fmt.Sprintf("%.3f", f.CacheableRatio) }, "–", "–")
		row("cold / restored turns", func(f Figures) string { return fmt.Sprintf("%d / %d", f.ColdTurns, f.RestoredTurns) }, "–", "–")
		row("re-sent tokens of lines the old process had seen", func(f Figures) string { return thousands(f.ResentAfterEviction) }, "–", "–")
		row("… of which in the new turn's snapshot (not the replay)", func(f Figures) string { return thousands(f.ResentInNewTurn) }, "–", "23")
	}
	r.writeWarmCost(&b)
	_, err := io.WriteString(w, b.String())
	return err
}

// warmCheckpoints are the mentions whose warm-turn cost a long channel's
// table shows: flat from 10 to 300 means a session's cost does not grow
// with its age.
var warmCheckpoints = []int{10, 100, 300, 1000}

// writeWarmCost adds, for a channel of 100 mentions or more, the uncached
// tokens of single warm turns at fixed mentions, window against watermark.
func (r *Report) writeWarmCost(b *strings.Builder) {
	if r.Stats.Mentions < 100 {
		return
	}
	at := map[string]map[int]Row{}
	for _, x := range r.Rows {
		if x.Strategy != Window && x.Strategy != Watermark {
			continue
		}
		if at[x.Strategy] == nil {
			at[x.Strategy] = map[int]Row{}
		}
		at[x.Strategy][x.Mention] = x
	}
	b.WriteString("\nUncached tokens of one warm turn, by mention:\n\n| mention | window | watermark |\n|---:|---:|---:|\n")
	for _, m := range warmCheckpoints {
		if m > r.Stats.Mentions {
			break
		}
		cell := func(s string) string {
			x, ok := at[s][m]
			if !ok || !x.OK || x.Shape != "warm" {
				return "–"
			}
			return thousands(x.UncachedTokens)
		}
		fmt.Fprintf(b, "| %d | %s | %s |\n", m, cell(Window), cell(Watermark))
	}
}

// WriteJSON prints one object keyed by strategy.
func (r *Report) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r.Figures)
}

// WriteRowsJSON writes the per-turn rows as a JSON array.
func (r *Report) WriteRowsJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r.Rows)
}

// WriteRowsCSV writes the per-turn rows as CSV with a header.
func (r *Report) WriteRowsCSV(w io.Writer) error {
	cw := csv.NewWriter(w)
	cw.Write([]string{"strategy", "mention", "message_id", "shape", "native_session", "ok", "input_tokens", "cached_tokens",
		"uncached_tokens", "channel_lines", "channel_context_tokens", "channel_context_tokens_seen_before", "resent_tokens_after_eviction", "resent_tokens_in_new_turn"})
	for _, x := range r.Rows {
		cw.Write([]string{x.Strategy, strconv.Itoa(x.Mention), x.MessageID, x.Shape, x.Native, strconv.FormatBool(x.OK),
			strconv.Itoa(x.InputTokens), strconv.Itoa(x.CachedTokens), strconv.Itoa(x.UncachedTokens), strconv.Itoa(x.ChannelLines),
			strconv.Itoa(x.ChannelTokens), strconv.Itoa(x.ChannelTokensSeen), strconv.Itoa(x.ResentTokens), strconv.Itoa(x.ResentInNewTurn)})
	}
	cw.Flush()
	return cw.Error()
}

// thousands formats n with comma separators, as the source's table does.
func thousands(n int) string {
	s := strconv.Itoa(n)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
}
