package lease

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/residentd/residentd/internal/channel"
	"github.com/residentd/residentd/internal/delivery"
	"github.com/residentd/residentd/internal/session"
)

const testFraming = "SYSTEM FRAMING"

// earlier is a stored conversation of two exchanges.
var earlier = []session.Turn{
	{Role: session.RoleUser, Text: "first question about the refund spec"},
	{Role: session.RoleAssistant, Text: "builtin reply one"},
	{Role: session.RoleUser, Text: "second question"},
	{Role: session.RoleAssistant, Text: "builtin reply two"},
}

// loaders counts how often Compose read the framing and the conversation.
type loaders struct{ framing, conv int }

func (l *loaders) input(shape Shape, text string) Input {
	return Input{
		Shape: shape, Native: "nat-1",
		Framing:      func() (string, error) { l.framing++; return testFraming, nil },
		Conversation: func() ([]session.Turn, error) { l.conv++; return earlier, nil },
		Placement:    delivery.InTurn, BriefEvery: 10,
		Mention:      delivery.Payload{ChannelID: "ch", MessageID: "m9", RunID: "run-1", BindingID: "b", Text: text},
		Unseen:       unseen(nil),
		KeepsSession: true,
	}
}

// unseen reads rows as the store would: they arrived in the order given
// (Seq 1, 2, ... unless set).
func unseen(rows []channel.Message) func(uint64, []string, []string, func([]channel.Candidate) []int) (channel.View, error) {
	return func(after uint64, also, known []string, pick func([]channel.Candidate) []int) (channel.View, error) {
		var (
			cands []channel.Candidate
			msgs  []channel.Message
			v     channel.View
		)
		for i, m := range rows {
			if m.Seq == 0 {
				m.Seq = uint64(i + 1)
			}
			v.Seq = max(v.Seq, m.Seq)
			if m.Seq > after || slices.Contains(also, m.ID) {
				cands = append(cands, channel.Candidate{ID: m.ID, Seq: m.Seq, At: m.CreatedAt, Author: m.Author, Binding: m.BindingID, Agent: m.AuthorKind == channel.KindAgent, Edited: m.Edited})
				msgs = append(msgs, m)
			}
		}
		v.Total, v.Candidates = len(rows), len(cands)
		for _, id := range known {
			k := channel.Known{ID: id}
			for i, m := range rows {
				if m.ID == id {
					k.Seq, k.Thread, k.Author = max(m.Seq, uint64(i+1)), m.ThreadRoot, m.Author
				}
			}
			v.Known = append(v.Known, k)
		}
		for _, i := range pick(cands) {
			v.Rows = append(v.Rows, msgs[i])
		}
		return v, nil
	}
}

// The three shapes of the spec, byte for byte.
func TestComposeShapes(t *testing.T) {
	var ld loaders
	newest := delivery.UserTurn(ld.input(Warm, "q").Mention, delivery.DefaultBrief, "")
	replay := delivery.BuildPrompt(append(append([]session.Turn(nil), earlier...), session.Turn{Role: session.RoleUser, Text: newest}))
	caughtUp := delivery.BuildPrompt(append(append([]session.Turn(nil), earlier[2:]...), session.Turn{Role: session.RoleUser, Text: newest}))
	for _, tt := range []struct {
		name   string
		shape  Shape
		missed int
		want   string
	}{
		{"cold: framing + full replay", Cold, 0, testFraming + "\n\n" + replay},
		{"warm: newest user turn only", Warm, 0, newest},
		{"restored: framing + newest user turn", Restored, 0, testFraming + "\n\n" + newest},
		{"restored, missed the newest exchange: framing + its replay + newest user turn", Restored, 2, testFraming + "\n\n" + delivery.CaughtUp + "\n\n" + caughtUp},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var ld loaders
			in := ld.input(tt.shape, "q")
			in.Missed = tt.missed
			out, err := Compose(in)
			if err != nil {
				t.Fatal(err)
			}
			if out.Text != tt.want {
				t.Fatalf("Text = %q\nwant %q", out.Text, tt.want)
			}
			if out.Turn != newest {
				t.Fatalf("Turn = %q, want the newest user turn", out.Turn)
			}
			if out.Stored != delivery.StoredTurn(ld.input(Warm, "q").Mention) {
				t.Fatalf("Stored = %q, want the compact user turn", out.Stored)
			}
		})
	}
}

// Every shape x brief placement x refresh count x blank newest turn.
func TestComposeTable(t *testing.T) {
	const every = 3
	for _, shape := range Shapes {
		for _, placement := range delivery.Placements {
			for _, count := range []int{0, every - 2, every - 1} {
				for _, text := range []string{"why is the refund spec flaky?", "", " \n\t"} {
					blank := strings.TrimSpace(text) == ""
					name := fmt.Sprintf("%s/%s/count=%d/blank=%v", shape, placement, count, blank)
					t.Run(name, func(t *testing.T) {
						var ld loaders
						in := ld.input(shape, text)
						in.Placement, in.BriefEvery, in.BriefCount = placement, every, count
						out, err := Compose(in)
						if err != nil {
							t.Fatal(err)
						}
						floor := placement == delivery.InFraming
						framed := shape != Warm
						replays := shape == Cold || blank
						sendsFraming := framed || blank
						if floor {
							// A restored session holds its framing already.
							sendsFraming = replays
						}
						refresh := floor && !sendsFraming && count+1 >= every
						fullInTurn := placement == delivery.InTurn || refresh
						readsConv := replays || (floor && shape == Restored)

						if got := strings.HasPrefix(out.Text, testFraming); got != sendsFraming {
							t.Errorf("text starts with the framing = %v, want %v", got, sendsFraming)
						}
						if got := strings.Contains(out.Text, "Assistant: builtin reply one"); got != replays {
							t.Errorf("text replays the conversation = %v, want %v", got, replays)
						}
						if readsConv != (ld.conv == 1) || ld.conv > 1 {
							t.Errorf("conversation read %d times, want it read %v", ld.conv, readsConv)
						}
						if sendsFraming != (ld.framing == 1) || ld.framing > 1 {
							t.Errorf("framing read %d times, sent %v", ld.framing, sendsFraming)
						}
						if !strings.HasSuffix(out.Text, out.Turn) {
							t.Errorf("text does not end with the newest user turn")
						}
						if got := strings.Contains(out.Turn, delivery.DefaultBrief); got != fullInTurn {
							t.Errorf("user turn carries the full brief = %v, want %v", got, fullInTurn)
						}
						inFraming := floor && sendsFraming
						if got := strings.HasPrefix(out.Text, testFraming+"\n\n"+delivery.DefaultBrief); got != inFraming {
							t.Errorf("brief rides with the framing = %v, want %v", got, inFraming)
						}
						if got := strings.Contains(out.Text, delivery.FactsPrefix); got != inFraming {
							t.Errorf("text carries the channel facts = %v, want %v", got, inFraming)
						}
						// The stored conversation holds no facts and a warm
						// process was given none: they count as changed.
						if got := strings.Contains(out.Text, delivery.FactsChangedPrefix); got != (floor && !sendsFraming) {
							t.Errorf("text says the facts changed = %v, want %v", got, floor && !sendsFraming)
						}
						if got := strings.HasPrefix(out.Text, delivery.Reopened); got != (floor && shape == Restored && !blank) {
							t.Errorf("text opens with the reopened line = %v", got)
						}
						for _, gone := range []string{delivery.Intro, `"run_id"`} {
							if got := strings.Contains(out.Turn, gone); got == floor {
								t.Errorf("user turn carries %q = %v with the brief in %s", gone, got, placement)
							}
						}
						if want := !floor || sendsFraming || refresh; out.BriefSent != want {
							t.Errorf("BriefSent = %v, want %v", out.BriefSent, want)
						}
						wantCount := count
						if floor {
							switch {
							case sendsFraming, refresh:
								wantCount = 0
							default:
								wantCount = count + 1
							}
						}
						if out.BriefCount != wantCount {
							t.Errorf("BriefCount = %d, want %d", out.BriefCount, wantCount)
						}
						if (out.Framing != "") != sendsFraming {
							t.Errorf("Framing = %q, sent %v", out.Framing, sendsFraming)
						}
					})
				}
			}
		}
	}
}

// With the brief in the framing, each shape byte for byte: what never
// changes for a key goes once with the framing, a warm turn is the mention
// line and the block, a restored one adds one line, and the facts go again
// only when they changed.
func TestComposeFloorShapes(t *testing.T) {
	root := "m1"
	payload := delivery.Payload{ChannelID: "ch", MessageID: "m9", RunID: "run-1", BindingID: "b", Runtime: "cli:x", Supervised: true, Resident: true,
		ChannelAgents: []delivery.Agent{{Handle: "@x", Reachable: true}}, MaxRecipients: 3, Text: "why?"}
	facts := `{"channel_id":"ch","binding_id":"b","runtime":"cli:x","supervised":true,"resident":true,"channel_agents":[{"handle":"@x","reachable":true}],"max_recipients":3}`
	other := strings.Replace(facts, `"max_recipients":3`, `"max_recipients":5`, 1)
	mention := `{"message_id":"m9","author":"aiko","text":"why?"}`
	at := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
	rows := []channel.Message{
		{ID: "m7", Channel: "ch", Author: "ben", AuthorKind: channel.KindUser, Body: "seen before", CreatedAt: at, Seq: 4},
		{ID: "m8", Channel: "ch", Author: "ben", AuthorKind: channel.KindUser, Body: "CI is red", CreatedAt: at, Seq: 5},
		{ID: "m9", Channel: "ch", Author: "aiko", AuthorKind: channel.KindUser, Body: "why?", CreatedAt: at.Add(time.Second), Seq: 6},
	}
	withFacts := func(f string) []session.Turn {
		c := append([]session.Turn(nil), earlier...)
		c[2].Facts = f
		return c
	}
	// A set-aside session saw the first exchange (these facts); a stand-in
	// answered the second (other facts).
	caught := withFacts(other)
	caught[0].Facts = facts
	wm := &channel.Watermark{Native: "nat-1", Seq: 4}
	newBlock := delivery.HeaderNew + "\n- [user] ben: CI is red"
	snapBlock := delivery.HeaderSnapshot + "\n- [user] ben: seen before\n- [user] ben: CI is red"
	replay := func(turn string) string {
		return delivery.BuildPrompt(append(append([]session.Turn(nil), earlier...), session.Turn{Role: session.RoleUser, Text: turn}))
	}
	for _, tt := range []struct {
		name   string
		edit   func(*Input)
		stored []session.Turn
		want   string
	}{
		{"cold: framing + brief + facts + replay", func(in *Input) { in.Shape, in.Native = Cold, "nat-2" }, earlier,
			testFraming + "\n\n" + delivery.DefaultBrief + "\n\n" + delivery.FactsPrefix + facts + "\n\n" + replay(mention+"\n\n"+snapBlock)},
		{"warm: the mention line and the new lines", func(in *Input) { in.SeenFacts = facts }, earlier,
			mention + "\n\n" + newBlock},
		{"warm in a thread", func(in *Input) { in.SeenFacts = facts; in.Mention.ThreadRootID = &root; in.Watermark = nil }, earlier,
			`{"message_id":"m9","thread_root_id":"m1","author":"aiko","text":"why?"}` + "\n\n" + snapBlock},
		{"warm, facts changed: one line", func(in *Input) { in.SeenFacts = other }, earlier,
			delivery.FactsChangedPrefix + facts + "\n" + mention + "\n\n" + newBlock},
		{"warm, brief due after a compaction", func(in *Input) { in.SeenFacts = facts; in.BriefDue = true }, earlier,
			delivery.DefaultBrief + "\n\n" + mention + "\n\n" + newBlock},
		{"restored: one line + the warm shape", func(in *Input) { in.Shape = Restored }, withFacts(facts),
			delivery.Reopened + "\n" + mention + "\n\n" + newBlock},
		{"restored, facts changed since the newest stored turn", func(in *Input) { in.Shape = Restored }, withFacts(other),
			delivery.Reopened + "\n" + delivery.FactsChangedPrefix + facts + "\n" + mention + "\n\n" + newBlock},
		{"restored, missed the newest exchange: its replay, facts compared with those it saw", func(in *Input) { in.Shape, in.Missed = Restored, 2 }, caught,
			delivery.Reopened + "\n" + delivery.CaughtUp + "\n\n" + delivery.BuildPrompt(caught[2:]) + "\n\n" + mention + "\n\n" + newBlock},
	} {
		t.Run(tt.name, func(t *testing.T) {
			in := Input{
				Shape: Warm, Native: "nat-1",
				Framing:      func() (string, error) { return testFraming, nil },
				Conversation: func() ([]session.Turn, error) { return tt.stored, nil },
				Placement:    delivery.InFraming, BriefEvery: 10,
				Mention: payload, Unseen: unseen(rows), Watermark: wm, KeepsSession: true,
			}
			tt.edit(&in)
			out, err := Compose(in)
			if err != nil {
				t.Fatal(err)
			}
			if out.Text != tt.want {
				t.Fatalf("Text =\n%s\nwant\n%s", out.Text, tt.want)
			}
			if out.Facts != facts || !strings.HasPrefix(out.Stored, `{"message_id":"m9"`) || !strings.Contains(out.Turn, out.Stored+"\n\n") {
				t.Errorf("Facts = %s, Stored = %s", out.Facts, out.Stored)
			}
		})
	}
}

// A warm process must never be fed its own transcript again.
func TestWarmComposeCarriesNoEarlierTurn(t *testing.T) {
	var ld loaders
	out, err := Compose(ld.input(Warm, "newest"))
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range earlier {
		if strings.Contains(out.Text, e.Text) {
			t.Errorf("warm prompt contains earlier turn %q", e.Text)
		}
	}
	if strings.Contains(out.Text, testFraming) || ld.framing != 0 || ld.conv != 0 {
		t.Errorf("warm turn read the framing (%d) or the conversation (%d): %q", ld.framing, ld.conv, out.Text)
	}
}

func TestComposeWatermarkRule(t *testing.T) {
	at := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
	rows := []channel.Message{
		{ID: "m1", Channel: "ch", Author: "aiko", AuthorKind: channel.KindUser, CreatedAt: at, Body: "old"},
		{ID: "m2", Channel: "ch", Author: "aiko", AuthorKind: channel.KindUser, CreatedAt: at, Body: "same second, later"},
		{ID: "m9", Channel: "ch", Author: "ben", AuthorKind: channel.KindUser, CreatedAt: at.Add(time.Second), Body: "@agent q"},
	}
	seen := channel.Watermark{Native: "nat-1", Seq: 1}
	other := channel.Watermark{Native: "nat-0", Seq: 1}
	done := channel.Watermark{Native: "nat-1", Seq: 3}
	for _, tt := range []struct {
		name   string
		wm     *channel.Watermark
		keeps  bool
		header string
		lines  int
		stage  channel.Seen
	}{
		{"no watermark: snapshot", nil, true, "snapshot", 2, channel.Seen{Seq: 3}},
		{"same native: only what is new, a tie included", &seen, true, "new", 1, channel.Seen{Seq: 3}},
		{"another native: a snapshot, not a gap", &other, true, "snapshot", 2, channel.Seen{Seq: 3}},
		{"nothing new: no block, nothing to commit", &done, true, "none", 0, channel.Seen{}},
		{"no session kept: snapshot, nothing staged", &seen, false, "snapshot", 2, channel.Seen{}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var ld loaders
			in := ld.input(Warm, "q")
			in.Unseen, in.Watermark, in.KeepsSession = unseen(rows), tt.wm, tt.keeps
			out, err := Compose(in)
			if err != nil {
				t.Fatal(err)
			}
			if out.Header() != tt.header || out.Context.Lines != tt.lines || out.Stage.Seq != tt.stage.Seq || len(channel.MarkIDs(out.Stage.Marks)) != 0 {
				t.Fatalf("header %q lines %d staged %+v; want %q %d %+v", out.Header(), out.Context.Lines, out.Stage, tt.header, tt.lines, tt.stage)
			}
			if tt.lines > 0 && out.Context.Known != 1 {
				t.Fatalf("the mention was not left out of its own block: %+v", out.Context)
			}
		})
	}
	// A mention the channel does not hold yet is staged as addressed, so
	// that its late push is not news.
	var ld loaders
	out, _ := Compose(ld.input(Warm, "q"))
	if out.Header() != "none" || strings.Contains(out.Turn, delivery.HeaderSnapshot) {
		t.Fatalf("no rows: header %q, user turn %q", out.Header(), out.Turn)
	}
	if out.Stage.Seq != 0 || len(channel.MarkIDs(out.Stage.Marks)) != 1 || channel.MarkIDs(out.Stage.Marks)[0] != "m9" {
		t.Fatalf("stage = %+v, want the mention addressed", out.Stage)
	}
}

// A cold replay carries the brief once, keeps earlier turns compact, and
// its snapshot leaves out the mentions the replay already holds.
func TestComposeColdReplayIsLean(t *testing.T) {
	at := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
	p1 := delivery.Payload{ChannelID: "ch", MessageID: "q1", Text: "@agent first"}
	conv := []session.Turn{
		{Role: session.RoleUser, Text: delivery.StoredTurn(p1), MessageID: "q1"},
		{Role: session.RoleAssistant, Text: "answer one"},
	}
	rows := []channel.Message{
		{ID: "m1", Channel: "ch", Author: "aiko", AuthorKind: channel.KindUser, CreatedAt: at, Body: "context line"},
		{ID: "q1", Channel: "ch", Author: "ben", AuthorKind: channel.KindUser, CreatedAt: at.Add(time.Second), Body: "@agent first"},
		{ID: "m9", Channel: "ch", Author: "ben", AuthorKind: channel.KindUser, CreatedAt: at.Add(2 * time.Second), Body: "@agent second"},
	}
	var ld loaders
	in := ld.input(Cold, "@agent second")
	in.Conversation = func() ([]session.Turn, error) { return conv, nil }
	in.Unseen = unseen(rows)
	out, err := Compose(in)
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(out.Text, delivery.DefaultBrief); n != 1 {
		t.Fatalf("the replay carries the brief %d times", n)
	}
	if n := strings.Count(out.Text, "@agent first"); n != 1 {
		t.Fatalf("the first mention appears %d times (replay and snapshot)", n)
	}
	if out.Context.Lines != 1 || out.Context.Known != 2 || !strings.Contains(out.Text, "- [user] aiko: context line") {
		t.Fatalf("snapshot: %+v\n%s", out.Context, out.Text)
	}
	if out.Stage.Seq != 3 || len(channel.MarkIDs(out.Stage.Marks)) != 0 {
		t.Fatalf("stage = %+v", out.Stage)
	}
}

func TestComposeLoaderErrors(t *testing.T) {
	boom := errors.New("boom")
	var ld loaders
	in := ld.input(Cold, "q")
	in.Framing = func() (string, error) { return "", boom }
	if _, err := Compose(in); !errors.Is(err, boom) {
		t.Fatalf("framing error = %v", err)
	}
	in = ld.input(Cold, "q")
	in.Conversation = func() ([]session.Turn, error) { return nil, boom }
	if _, err := Compose(in); !errors.Is(err, boom) {
		t.Fatalf("conversation error = %v", err)
	}
	in = ld.input(Warm, "q")
	in.Unseen = func(uint64, []string, []string, func([]channel.Candidate) []int) (channel.View, error) {
		return channel.View{}, boom
	}
	if _, err := Compose(in); !errors.Is(err, boom) {
		t.Fatalf("channel read error = %v", err)
	}
}

// BenchmarkCompose is the daemon's prompt step on a 40-turn conversation.
func BenchmarkCompose(b *testing.B) {
	conv := make([]session.Turn, 0, 40)
	for i := range 20 {
		p := delivery.Payload{ChannelID: "ch-backend", MessageID: fmt.Sprintf("m%03d", i), RunID: fmt.Sprintf("run-%02d", i),
			BindingID: "b-claude", Runtime: "cli:claude:agent", Supervised: true, Resident: true,
			ChannelAgents: []delivery.Agent{{Handle: "@claude", Reachable: true}}, MaxRecipients: 3,
			Text: "@claude why is the refund spec flaky? look at the last runs"}
		conv = append(conv,
			session.Turn{Role: session.RoleUser, Text: delivery.StoredTurn(p), MessageID: p.MessageID},
			session.Turn{Role: session.RoleAssistant, Text: "The refund spec shares a fixture that is not reset between examples."})
	}
	for _, shape := range []Shape{Cold, Warm} {
		b.Run(shape.String(), func(b *testing.B) {
			in := Input{
				Shape: shape, Native: "nat-1", Placement: delivery.InTurn, BriefEvery: 10,
				Framing:      func() (string, error) { return testFraming, nil },
				Conversation: func() ([]session.Turn, error) { return conv, nil },
				Mention:      delivery.Payload{ChannelID: "ch-backend", MessageID: "m999", Text: "@claude and now?"},
				Unseen:       unseen(nil),
			}
			b.ReportAllocs()
			n := 0
			for b.Loop() {
				out, err := Compose(in)
				if err != nil {
					b.Fatal(err)
				}
				n += len(out.Text)
			}
			if n == 0 {
				b.Fatal("empty prompt")
			}
		})
	}
}

// The mentions the key's lane holds for later turns are left out of a
// block and staged as holes, not as seen; a coalesced list is carried as
// the mention is; once no turn holds it, a hole is a candidate again and
// the delivery that accounts for it fills it.
func TestComposeHeldAndListed(t *testing.T) {
	at := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
	row := func(id string) channel.Message {
		return channel.Message{ID: id, Channel: "ch", Author: "aiko", AuthorKind: channel.KindUser, CreatedAt: at, Body: "@agent " + id}
	}
	rows := []channel.Message{row("m1"), row("q2"), row("q3"), row("m9")}
	var ld loaders
	in := ld.input(Warm, "q")
	in.Unseen, in.Listed, in.Held = unseen(rows), []string{"q3", "q-unpushed"}, []string{"q2"}
	out, err := Compose(in)
	if err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprint(out.Context.Shown); got != "[m1]" || out.Context.Known != 2 || out.Context.Held != 1 {
		t.Fatalf("shown %s, report %+v: want m1 alone, q3 and m9 carried, q2 held", got, out.Context)
	}
	if fmt.Sprint(out.Stage) != "{4 [{q-unpushed 0}] [{q2 2}]}" {
		t.Fatalf("stage %+v: want the prefix to 4, the unpushed listed mention marked, q2 a hole", out.Stage)
	}
	wm := (channel.Watermark{}).Advance("nat-1", out.Stage, 0)
	if wm.Covers("q2", 2, false) || !wm.Covers("q3", 3, false) {
		t.Fatalf("watermark %+v covers the held mention, or not the listed one", wm)
	}

	// Still held: left out again, nothing changes, nothing to write.
	in.Listed, in.Watermark = nil, &wm
	if out, err = Compose(in); err != nil || out.Context.Lines != 0 || out.Context.Held != 1 || !out.Stage.Empty() {
		t.Fatalf("held again: report %+v stage %+v err %v", out.Context, out.Stage, err)
	}
	// Its turn ended unanswered: the next block shows it, and fills the hole.
	in.Held = nil
	if out, err = Compose(in); err != nil || fmt.Sprint(out.Context.Shown) != "[q2]" {
		t.Fatalf("released: shown %v err %v", out.Context.Shown, err)
	}
	if wm = wm.Advance("nat-1", out.Stage, 0); len(wm.Held) != 0 || !wm.Covers("q2", 2, false) {
		t.Fatalf("after the block that showed it: %+v", wm)
	}
}

// The turns a restored session missed go to it as a replay does: their
// mentions are carried, so the block leaves them out; the lines it has not
// seen (by its own watermark) are shown, though a stand-in saw them.
func TestComposeCatchUpCarriesItsMentions(t *testing.T) {
	at := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
	rows := []channel.Message{
		{ID: "m7", Channel: "ch", Author: "ben", AuthorKind: channel.KindUser, Body: "@x first", CreatedAt: at, Seq: 1},
		{ID: "l1", Channel: "ch", Author: "cho", AuthorKind: channel.KindUser, Body: "a line the stand-in saw", CreatedAt: at.Add(time.Second), Seq: 2},
		{ID: "m8", Channel: "ch", Author: "ben", AuthorKind: channel.KindUser, Body: "@x second", CreatedAt: at.Add(2 * time.Second), Seq: 3},
		{ID: "m9", Channel: "ch", Author: "aiko", AuthorKind: channel.KindUser, Body: "@x third", CreatedAt: at.Add(3 * time.Second), Seq: 4},
	}
	conv := []session.Turn{
		{Role: session.RoleUser, Text: `{"message_id":"m7","text":"@x first"}`, MessageID: "m7", MessageSeq: 1},
		{Role: session.RoleAssistant, Text: "reply one"},
		{Role: session.RoleUser, Text: `{"message_id":"m8","text":"@x second"}`, MessageID: "m8", MessageSeq: 3},
		{Role: session.RoleAssistant, Text: "reply two, from the stand-in"},
	}
	for _, placement := range []delivery.Placement{delivery.InFraming, delivery.InTurn} {
		in := Input{
			Shape: Restored, Native: "nat-aside", Missed: 2,
			Framing:      func() (string, error) { return testFraming, nil },
			Conversation: func() ([]session.Turn, error) { return conv, nil },
			Placement:    placement, BriefEvery: 10,
			Mention: delivery.Payload{ChannelID: "ch", MessageID: "m9", BindingID: "b", Text: "@x third"},
			Unseen:  unseen(rows), KeepsSession: true,
			Watermark: &channel.Watermark{Native: "nat-aside", Seq: 1},
		}
		out, err := Compose(in)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(out.Text, delivery.CaughtUp) || !strings.Contains(out.Text, "reply two, from the stand-in") || strings.Contains(out.Text, "reply one") {
			t.Fatalf("%s: the catch-up is not the missed exchange alone:\n%s", placement, out.Text)
		}
		if strings.Contains(out.Text, "- [user] ben:") || !strings.Contains(out.Text, "- [user] cho: a line the stand-in saw") {
			t.Fatalf("%s: the block shows a mention the session saw or was carried, or leaves out the line it has not seen:\n%s", placement, out.Text)
		}
		if out.Context.Known != 2 || out.Stage.Seq != 4 {
			t.Fatalf("%s: known = %d, staged %+v; want the mention and the one the catch-up carries, seen to 4", placement, out.Context.Known, out.Stage)
		}
	}
}
