package lease

import (
	"errors"
	"fmt"
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
		KeepsSession: true,
	}
}

// The three shapes of the spec, byte for byte.
func TestComposeShapes(t *testing.T) {
	var ld loaders
	newest := delivery.UserTurn(ld.input(Warm, "q").Mention, delivery.DefaultBrief, "")
	replay := delivery.BuildPrompt(append(append([]session.Turn(nil), earlier...), session.Turn{Role: session.RoleUser, Text: newest}))
	for _, tt := range []struct {
		name  string
		shape Shape
		want  string
	}{
		{"cold: framing + full replay", Cold, testFraming + "\n\n" + replay},
		{"warm: newest user turn only", Warm, newest},
		{"restored: framing + newest user turn", Restored, testFraming + "\n\n" + newest},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var ld loaders
			out, err := Compose(ld.input(tt.shape, "q"))
			if err != nil {
				t.Fatal(err)
			}
			if out.Text != tt.want {
				t.Fatalf("Text = %q\nwant %q", out.Text, tt.want)
			}
			if out.Stored != newest {
				t.Fatalf("Stored = %q, want the newest user turn", out.Stored)
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
						framed := shape != Warm
						replays := shape == Cold || blank
						sendsFraming := framed || blank
						refresh := placement == delivery.InFraming && !framed && count+1 >= every
						fullInTurn := placement == delivery.InTurn || refresh

						if got := strings.HasPrefix(out.Text, testFraming); got != sendsFraming {
							t.Errorf("text starts with the framing = %v, want %v", got, sendsFraming)
						}
						if got := strings.Contains(out.Text, "Assistant: builtin reply one"); got != replays {
							t.Errorf("text replays the conversation = %v, want %v", got, replays)
						}
						if replays != (ld.conv == 1) || ld.conv > 1 {
							t.Errorf("conversation read %d times, replay %v", ld.conv, replays)
						}
						if sendsFraming != (ld.framing == 1) || ld.framing > 1 {
							t.Errorf("framing read %d times, sent %v", ld.framing, sendsFraming)
						}
						if !replays && !strings.HasSuffix(out.Text, out.Stored) {
							t.Errorf("text does not end with the newest user turn")
						}
						if got := strings.Contains(out.Stored, delivery.DefaultBrief); got != fullInTurn {
							t.Errorf("user turn carries the full brief = %v, want %v", got, fullInTurn)
						}
						if got := strings.Contains(out.Stored, delivery.BriefPointer()); got != !fullInTurn {
							t.Errorf("user turn carries the brief pointer = %v, want %v", got, !fullInTurn)
						}
						inFraming := placement == delivery.InFraming && sendsFraming
						if got := strings.HasPrefix(out.Text, testFraming+"\n\n"+delivery.DefaultBrief); got != inFraming {
							t.Errorf("brief rides with the framing = %v, want %v", got, inFraming)
						}
						if want := fullInTurn || framed; out.BriefSent != want {
							t.Errorf("BriefSent = %v, want %v", out.BriefSent, want)
						}
						wantCount := count
						if placement == delivery.InFraming {
							switch {
							case framed, refresh:
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
		{ID: "m2", Channel: "ch", Author: "aiko", AuthorKind: channel.KindUser, CreatedAt: at.Add(time.Second), Body: "new"},
	}
	seen := channel.Watermark{Native: "nat-1", LastAt: at, IDs: []string{"m1"}}
	other := channel.Watermark{Native: "nat-0", LastAt: at, IDs: []string{"m1"}}
	for _, tt := range []struct {
		name   string
		wm     *channel.Watermark
		keeps  bool
		header string
		lines  int
		stage  int
	}{
		{"no watermark: snapshot", nil, true, "snapshot", 2, 2},
		{"same native: only what is new", &seen, true, "new", 1, 1},
		{"another native: a snapshot, not a gap", &other, true, "snapshot", 2, 2},
		{"no session kept: snapshot, nothing staged", &seen, false, "snapshot", 2, 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var ld loaders
			in := ld.input(Warm, "q")
			in.Rows, in.Watermark, in.KeepsSession = rows, tt.wm, tt.keeps
			out, err := Compose(in)
			if err != nil {
				t.Fatal(err)
			}
			if out.Header() != tt.header || out.Context.Lines != tt.lines || len(out.Stage.IDs) != tt.stage {
				t.Fatalf("header %q lines %d staged %v; want %q %d %d", out.Header(), out.Context.Lines, out.Stage.IDs, tt.header, tt.lines, tt.stage)
			}
		})
	}
	var ld loaders
	out, _ := Compose(ld.input(Warm, "q"))
	if out.Header() != "none" || strings.Contains(out.Stored, delivery.HeaderSnapshot) {
		t.Fatalf("no rows: header %q, user turn %q", out.Header(), out.Stored)
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
}

// BenchmarkCompose is the daemon's prompt step on a 40-turn conversation.
func BenchmarkCompose(b *testing.B) {
	conv := make([]session.Turn, 0, 40)
	for i := range 20 {
		p := delivery.Payload{ChannelID: "ch-backend", MessageID: fmt.Sprintf("m%03d", i), RunID: fmt.Sprintf("run-%02d", i),
			BindingID: "b-claude", Runtime: "cli:claude:agent", Supervised: true, Resident: true,
			ChannelAgents: []delivery.Agent{{Handle: "@claude", Reachable: true}}, MaxRecipients: 3,
			Text: "@claude why is the refund spec flaky? look at the last runs"}
		block := delivery.HeaderNew + "\n- [user] aiko: I think the cache key needs the locale, otherwise ja users get en pages"
		conv = append(conv,
			session.Turn{Role: session.RoleUser, Text: delivery.UserTurn(p, delivery.DefaultBrief, block)},
			session.Turn{Role: session.RoleAssistant, Text: "The refund spec shares a fixture that is not reset between examples."})
	}
	for _, shape := range []Shape{Cold, Warm} {
		b.Run(shape.String(), func(b *testing.B) {
			in := Input{
				Shape: shape, Native: "nat-1", Placement: delivery.InTurn, BriefEvery: 10,
				Framing:      func() (string, error) { return testFraming, nil },
				Conversation: func() ([]session.Turn, error) { return conv, nil },
				Mention:      delivery.Payload{ChannelID: "ch-backend", MessageID: "m999", Text: "@claude and now?"},
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
