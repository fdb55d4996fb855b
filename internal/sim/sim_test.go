package sim

import (
	"bytes"
	"context"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/residentd/residentd/internal/channel"
	"github.com/residentd/residentd/internal/testkit"
)

// TestMain lets the test binary double as the built-in agent, so the sim
// drives real agent processes through the real daemon.
func TestMain(m *testing.M) { testkit.Main(m) }

func shortParams() ChannelParams {
	return ChannelParams{Seed: 7, Messages: 70, People: 5, Mentions: 8, Long: 2, GapMin: 1, GapMax: 14, GapMedian: 4, MaxChars: 600}
}

func run(t *testing.T, msgs []Message, evictAt, failAt int) *Report {
	t.Helper()
	exe := testkit.Exe(t)
	r, err := Run(context.Background(), Options{
		Messages: msgs, PrefixTokens: 500, EvictAt: evictAt, FailAt: failAt, Limit: 12, MaxChars: 600,
		AgentCommand: exe, AgentArgs: []string{"agent"}, AgentEnv: map[string]string{"RESIDENTD_TEST_AGENT": "1"},
		Dir: t.TempDir(),
	})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func TestGenerateHasTheSpecShape(t *testing.T) {
	p := DefaultChannelParams()
	msgs, err := Generate(p)
	if err != nil {
		t.Fatal(err)
	}
	s := Describe(msgs, p.MaxChars)
	want := Stats{Messages: 200, Mentions: 30, Long: 8, GapMin: 1, GapMedian: 4, GapMax: 21, AgentPosts: s.AgentPosts}
	if s != want || s.AgentPosts == 0 {
		t.Fatalf("channel stats %+v, want %+v with agent posts", s, want)
	}
	again, _ := Generate(p)
	if !reflect.DeepEqual(msgs, again) {
		t.Fatal("same seed gave a different channel")
	}
	p.Seed++
	other, _ := Generate(p)
	if reflect.DeepEqual(msgs, other) {
		t.Fatal("another seed gave the same channel")
	}
	var buf bytes.Buffer
	if err := WriteChannel(&buf, msgs); err != nil {
		t.Fatal(err)
	}
	back, err := ReadChannel(&buf)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(msgs, back) {
		t.Fatal("channel file does not round-trip")
	}
}

func TestGenerateRejectsImpossibleShape(t *testing.T) {
	p := shortParams()
	p.Messages = 20 // 8 mentions with a gap of 14 do not fit
	if _, err := Generate(p); err == nil {
		t.Fatal("want an error for a channel that cannot hold its gaps")
	}
}

func TestStrategiesThroughTheDaemon(t *testing.T) {
	msgs, err := Generate(shortParams())
	if err != nil {
		t.Fatal(err)
	}
	r := run(t, msgs, 5, 0)
	win, wm, un := r.Figures[Window], r.Figures[Watermark], r.Figures[Unstable]
	if wm.ChannelTokensSeen != 0 || wm.ChannelLines == 0 {
		t.Fatalf("watermark sent %d duplicated tokens over %d lines; want none over some", wm.ChannelTokensSeen, wm.ChannelLines)
	}
	if win.ChannelTokensSeen == 0 || win.ChannelLines <= wm.ChannelLines || win.InputTokens <= wm.InputTokens {
		t.Fatalf("window %+v should send more than watermark %+v, some of it seen", win, wm)
	}
	if un.CacheableRatio > wm.CacheableRatio/4 || wm.CacheableRatio < 0.5 {
		t.Fatalf("cacheable ratio: unstable %.3f, watermark %.3f", un.CacheableRatio, wm.CacheableRatio)
	}
	if win.Turns != 8 || wm.Turns != 8 || win.ColdTurns != 1 || wm.ColdTurns != 1 {
		t.Fatalf("turns: window %+v watermark %+v", win, wm)
	}
	if f := r.Figures[WatermarkRestored]; f.RestoredTurns != 1 || f.ResentAfterEviction != 0 {
		t.Fatalf("restored after eviction: %+v; want one restored turn and nothing re-sent", f)
	}
	if f := r.Figures[WatermarkEvictCold]; f.ColdTurns != 2 || f.ResentAfterEviction == 0 {
		t.Fatalf("cold after eviction: %+v; want a second cold turn that replays what the old process saw", f)
	}
	if f := r.Figures[WatermarkNoOwn]; f.ChannelLines >= wm.ChannelLines {
		t.Fatalf("omitting own posts sent %d lines, watermark %d", f.ChannelLines, wm.ChannelLines)
	}

	again := run(t, msgs, 0, 0)
	for _, name := range []string{Window, Watermark, Unstable, WatermarkNoOwn, BriefInFraming} {
		if !reflect.DeepEqual(r.Figures[name], again.Figures[name]) {
			t.Fatalf("same channel, different %s figures:\n%+v\n%+v", name, r.Figures[name], again.Figures[name])
		}
	}
}

func TestFailedTurnDoesNotCountAsSeen(t *testing.T) {
	msgs, err := Generate(shortParams())
	if err != nil {
		t.Fatal(err)
	}
	// Fail a mention whose lines and the next gap fit in one block of 12,
	// so the next turn can show them all again.
	var at []int
	for i, m := range msgs {
		if m.MentionsAgent {
			at = append(at, i)
		}
	}
	fail := 0
	for k := 1; k+1 < len(at) && fail == 0; k++ {
		if before, after := at[k]-at[k-1], at[k+1]-at[k]; before > 1 && before+after <= 12 {
			fail = k + 1
		}
	}
	if fail == 0 {
		t.Fatal("the short channel has no mention to fail; change its seed")
	}
	r := run(t, msgs, 0, fail)
	var failed, next *Row
	for i := range r.Rows {
		row := &r.Rows[i]
		if row.Strategy != Watermark {
			continue
		}
		switch row.Mention {
		case fail:
			failed = row
		case fail + 1:
			next = row
		}
	}
	if failed == nil || next == nil || failed.OK || !next.OK {
		t.Fatalf("rows: failed %+v next %+v", failed, next)
	}
	if len(failed.lines) == 0 {
		t.Fatal("the failing turn showed no lines; the test needs some")
	}
	for _, l := range failed.lines {
		if !slices.Contains(next.lines, l) {
			t.Fatalf("line %q of the failed turn is not shown again by the next turn %q", l, next.lines)
		}
	}
	if next.ChannelTokensSeen != 0 || r.Figures[Watermark].FailedTurns != 1 {
		t.Fatalf("next turn counted %d tokens as seen; figures %+v", next.ChannelTokensSeen, r.Figures[Watermark])
	}
}

// A channel whose messages repeat the same phrase: counted by id, the
// watermark shows nothing twice and the never-shown count is the true one.
func TestCountsByMessageID(t *testing.T) {
	at := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
	var msgs []Message
	add := func(body string, mention bool) {
		msgs = append(msgs, Message{ID: fmt.Sprintf("m%03d", len(msgs)+1), Author: "aiko", AuthorKind: channel.KindUser,
			CreatedAt: at.Add(time.Duration(len(msgs)) * time.Second), Body: body, MentionsAgent: mention})
	}
	for k := range 4 {
		// 20 identical lines, then a mention: 12 shown, 8 left to the pointer.
		for range 20 {
			add("+1, same here", false)
		}
		add(fmt.Sprintf("%s why is it flaky? (%d)", AgentHandle, k), true)
	}
	r := run(t, msgs, 0, 0)
	wm := r.Figures[Watermark]
	if wm.ChannelTokensSeen != 0 || wm.ChannelLines != 4*12 || wm.MessagesNeverShown != 4*8 {
		t.Fatalf("watermark on a repetitive channel: %d lines, %d tokens seen before, %d never shown; want 48, 0, 32", wm.ChannelLines, wm.ChannelTokensSeen, wm.MessagesNeverShown)
	}
	// The window shows the newest 12 each time: by id, the repeats it sends
	// again are seen, the others new.
	if win := r.Figures[Window]; win.ChannelTokensSeen != 0 || win.MessagesNeverShown != 32 {
		t.Fatalf("window: %+v", win)
	}
	var md strings.Builder
	if err := r.WriteMarkdown(&md); err != nil || strings.Contains(md.String(), "source article") {
		t.Fatalf("a custom channel's table quotes the source's figures:\n%s", md.String())
	}
}

func TestRunRejectsNegativeFigures(t *testing.T) {
	for _, o := range []Options{{PrefixTokens: -1}, {Limit: -1}, {MaxChars: -600}, {EvictAt: -2}} {
		o.AgentCommand = "unused"
		if _, err := Run(context.Background(), o); err == nil || !strings.Contains(err.Error(), "must be 0 or more") {
			t.Errorf("Run(%+v) = %v, want a refusal before any run", o, err)
		}
	}
}

// TestLongChannel: 300 mentions over 2,000 messages generate (the reply
// templates run out of distinct lines long before that), play through the
// daemon, and a warm turn at mention 300 costs what one at mention 10 does.
func TestLongChannel(t *testing.T) {
	p := DefaultChannelParams()
	p.Messages, p.Mentions = 2000, 300
	msgs, err := Generate(p)
	if err != nil {
		t.Fatal(err)
	}
	if s := Describe(msgs, p.MaxChars); s.Messages != 2000 || s.Mentions != 300 {
		t.Fatalf("channel stats %+v, want 2000 messages and 300 mentions", s)
	}
	keys := map[string]string{}
	for _, m := range msgs {
		if other, dup := keys[matchKey(m.Body)]; dup {
			t.Fatalf("%s and %s start alike: the sim could not tell their lines apart", other, m.ID)
		}
		keys[matchKey(m.Body)] = m.ID
	}
	r := run(t, msgs, 0, 0)
	uncached := map[string]map[int]int{}
	for _, x := range r.Rows {
		if !x.OK {
			t.Fatalf("%s mention %d failed", x.Strategy, x.Mention)
		}
		if uncached[x.Strategy] == nil {
			uncached[x.Strategy] = map[int]int{}
		}
		if x.Shape == "warm" {
			uncached[x.Strategy][x.Mention] = x.UncachedTokens
		}
	}
	wm := uncached[Watermark]
	for _, m := range []int{10, 100, 300} {
		if _, ok := wm[m]; !ok {
			t.Fatalf("watermark mention %d was not a warm turn", m)
		}
	}
	// Flat: the newest turn costs its own new lines, not the session's age.
	if wm[300] > wm[10]*3/2 || wm[100] > wm[10]*3/2 {
		t.Fatalf("watermark warm-turn cost grows with the session: %d at 10, %d at 100, %d at 300", wm[10], wm[100], wm[300])
	}
	var md strings.Builder
	if err := r.WriteMarkdown(&md); err != nil {
		t.Fatal(err)
	}
	for _, m := range []string{"| 10 |", "| 100 |", "| 300 |"} {
		if !strings.Contains(md.String(), m) {
			t.Fatalf("the long channel's table lacks the row %q:\n%s", m, md.String())
		}
	}
}
