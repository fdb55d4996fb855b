package sim

import (
	"strings"

	"github.com/residentd/residentd/internal/channel"
	"github.com/residentd/residentd/internal/delivery"
)

// Figures are one strategy's totals over all its turns.
type Figures struct {
	Turns                 int     `json:"turns"`
	FailedTurns           int     `json:"failed_turns"`
	ColdTurns             int     `json:"cold_turns"`
	RestoredTurns         int     `json:"restored_turns"`
	InputTokens           int     `json:"input_tokens"`
	CacheablePrefixTokens int     `json:"cacheable_prefix_tokens"`
	CacheableRatio        float64 `json:"cacheable_ratio"`
	UncachedPerWarmTurn   float64 `json:"uncached_tokens_per_warm_turn"`
	ChannelTokens         int     `json:"channel_context_tokens"`
	ChannelTokensSeen     int     `json:"channel_context_tokens_seen_before"`
	ChannelSeenPct        float64 `json:"channel_context_seen_pct"`
	ChannelLines          int     `json:"channel_lines"`
	// ResentAfterEviction counts tokens of lines sent after the eviction
	// that the process before it had already been shown.
	ResentAfterEviction int `json:"resent_tokens_after_eviction"`
	// ResentInNewTurn is the part of it in the newest user turn (the
	// snapshot), leaving out the cold turn's replay of the conversation.
	ResentInNewTurn    int `json:"resent_tokens_in_new_turn"`
	MessagesNeverShown int `json:"messages_never_shown"`
}

// Row is one turn of one strategy.
type Row struct {
	Strategy          string `json:"strategy"`
	Mention           int    `json:"mention"` // 1-based
	MessageID         string `json:"message_id"`
	Shape             string `json:"shape"`
	Native            string `json:"native_session"`
	OK                bool   `json:"ok"`
	InputTokens       int    `json:"input_tokens"`
	CachedTokens      int    `json:"cached_tokens"`
	UncachedTokens    int    `json:"uncached_tokens"`
	ChannelLines      int    `json:"channel_lines"`
	ChannelTokens     int    `json:"channel_context_tokens"`
	ChannelTokensSeen int    `json:"channel_context_tokens_seen_before"`
	ResentTokens      int    `json:"resent_tokens_after_eviction"`
	ResentInNewTurn   int    `json:"resent_tokens_in_new_turn"`

	lines []string // the channel lines the agent received
	ids   []string // the message id of each line
}

// modeled says how a strategy's provider requests are built from what its
// agent received.
type modeled struct {
	name    string
	turns   []received
	prefix  func(mention int) []uint // what precedes the history: the system prompt and tools
	evictAt int                      // 1-based; 0 when there was no eviction
	omitOwn bool                     // own posts never shown by design
}

// account models every turn's provider request as prefix + this native
// session's earlier turns (what its agent received and replied) + what the
// agent received now, and counts it. A native session's history, cache and
// seen lines are its own: a process that reloaded the session continues
// them, a new session starts empty. A failed turn is counted as sent but
// neither enters the history nor marks its lines as seen.
//
// Lines are counted by message id, never by their text: a channel that
// repeats the same phrase holds different messages. A successful turn's
// ids are the daemon's own (the done event's context.shown); a failed
// turn's lines are matched to the messages that render to them.
func account(tc *Tokens, md modeled, msgs []Message, maxChars int) (Figures, []Row) {
	sep := tc.encode("\n\n")
	hist := map[string][]uint{}
	prev := map[string][]uint{}
	seen := map[string]map[string]bool{} // native -> message ids given
	before := map[string]bool{}          // ids shown before the eviction
	shown := map[string]bool{}           // ids shown by successful turns
	rendered := renderedLines(msgs, maxChars)
	var f Figures
	rows := make([]Row, 0, len(md.turns))
	warm, warmUncached := 0, 0
	for i, t := range md.turns {
		row := Row{Strategy: md.name, Mention: t.mention + 1, MessageID: mentionID(msgs, t.mention), Shape: t.shape, Native: t.native, OK: t.ok}
		h := hist[t.native]
		recv := tc.encode(t.text)
		pre := md.prefix(t.mention)
		req := make([]uint, 0, len(pre)+len(h)+len(sep)+len(recv))
		req = append(req, pre...)
		req = append(req, h...)
		req = append(req, sep...)
		req = append(req, recv...)
		row.InputTokens = len(req)
		if p, ok := prev[t.native]; ok {
			row.CachedTokens = lcp(req, p)
		}
		row.UncachedTokens = row.InputTokens - row.CachedTokens
		prev[t.native] = req

		s := seen[t.native]
		if s == nil {
			s = map[string]bool{}
			seen[t.native] = s
		}
		after := md.evictAt > 0 && t.mention >= md.evictAt-1
		all, newest := channelLines(t.text)
		ids := lineIDs(all, newest, t, rendered, s)
		for k, line := range all {
			n := tc.Count(line)
			id := ids[k]
			row.lines = append(row.lines, line)
			row.ids = append(row.ids, id)
			row.ChannelLines++
			row.ChannelTokens += n
			if s[id] {
				row.ChannelTokensSeen += n
			}
			if after && before[id] {
				row.ResentTokens += n
				if k >= len(all)-newest {
					row.ResentInNewTurn += n
				}
			}
		}
		if t.ok {
			for _, id := range row.ids {
				s[id] = true
				shown[id] = true
				if !after {
					before[id] = true
				}
			}
			reply := tc.encode(t.reply)
			next := make([]uint, 0, len(h)+2*len(sep)+len(recv)+len(reply))
			next = append(next, h...)
			next = append(next, sep...)
			next = append(next, recv...)
			next = append(next, sep...)
			next = append(next, reply...)
			hist[t.native] = next
		} else {
			f.FailedTurns++
		}
		switch t.shape {
		case "cold":
			f.ColdTurns++
		case "restored":
			f.RestoredTurns++
		}
		f.Turns++
		f.InputTokens += row.InputTokens
		f.CacheablePrefixTokens += row.CachedTokens
		f.ChannelLines += row.ChannelLines
		f.ChannelTokens += row.ChannelTokens
		f.ChannelTokensSeen += row.ChannelTokensSeen
		f.ResentAfterEviction += row.ResentTokens
		f.ResentInNewTurn += row.ResentInNewTurn
		if i > 0 {
			warm++
			warmUncached += row.UncachedTokens
		}
		rows = append(rows, row)
	}
	if f.InputTokens > 0 {
		f.CacheableRatio = float64(f.CacheablePrefixTokens) / float64(f.InputTokens)
	}
	if warm > 0 {
		f.UncachedPerWarmTurn = float64(warmUncached) / float64(warm)
	}
	if f.ChannelTokens > 0 {
		f.ChannelSeenPct = 100 * float64(f.ChannelTokensSeen) / float64(f.ChannelTokens)
	}
	f.MessagesNeverShown = neverShown(msgs, shown, md.omitOwn)
	return f, rows
}

// channelLines returns the channel-context lines of a prompt and how many
// of the last ones belong to its newest user turn (after the last mention
// payload; a cold replay carries the older turns before it).
func channelLines(prompt string) (lines []string, newest int) {
	for _, l := range strings.Split(prompt, "\n") {
		switch {
		case strings.HasPrefix(l, "- ["):
			lines = append(lines, l)
			newest++
		case delivery.IsMentionLine(strings.TrimPrefix(l, "User: ")):
			newest = 0
		}
	}
	return lines, newest
}

func mentionID(msgs []Message, mention int) string {
	n := 0
	for _, m := range msgs {
		if m.MentionsAgent {
			if n == mention {
				return m.ID
			}
			n++
		}
	}
	return ""
}

// lineIDs names the message of every channel line of a prompt. The newest
// turn's lines of a successful turn are the done event's ids, in order;
// other lines (a failed turn's, or a replay's) go to the first message that
// renders to the line and this session was not given yet.
func lineIDs(lines []string, newest int, t received, rendered map[string][]string, given map[string]bool) []string {
	ids := make([]string, len(lines))
	fromDaemon := t.ok && len(t.shown) == newest
	taken := map[string]bool{}
	for k, line := range lines {
		if j := k - (len(lines) - newest); fromDaemon && j >= 0 {
			ids[k] = t.shown[j]
			continue
		}
		cands := rendered[line]
		ids[k] = "?" + line // a line no message renders to: counted on its own
		for _, id := range cands {
			if !taken[id] && !given[id] {
				ids[k] = id
				break
			}
		}
		if strings.HasPrefix(ids[k], "?") && len(cands) > 0 {
			ids[k] = cands[0]
		}
		taken[ids[k]] = true
	}
	return ids
}

// renderedLines maps each message's block line to the ids that render to it.
func renderedLines(msgs []Message, maxChars int) map[string][]string {
	out := map[string][]string{}
	for _, m := range msgs {
		block, _ := delivery.Render(delivery.Block{Rows: []channel.Message{{ID: m.ID, Author: m.Author, AuthorKind: m.AuthorKind, Body: m.Body}}}, delivery.RenderOptions{MaxChars: maxChars})
		if _, line, ok := strings.Cut(block, "\n"); ok {
			out[line] = append(out[line], m.ID)
		}
	}
	return out
}

// neverShown counts the messages posted before the last mention that no
// successful turn ever showed as a line, by id: mentions are in their own
// payload, and own posts are skipped when the strategy leaves them out by
// design. The block's pointer counted each of them.
func neverShown(msgs []Message, shown map[string]bool, omitOwn bool) int {
	last := -1
	for i, m := range msgs {
		if m.MentionsAgent {
			last = i
		}
	}
	n := 0
	for _, m := range msgs[:max(last, 0)] {
		if m.MentionsAgent || omitOwn && m.AuthorKind == channel.KindAgent || shown[m.ID] {
			continue
		}
		n++
	}
	return n
}
