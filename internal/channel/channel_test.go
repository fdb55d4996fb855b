package channel

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
)

func TestValidate(t *testing.T) {
	at := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
	ok := Message{ID: "m1", Channel: "ch", Author: "aiko", AuthorKind: KindUser, CreatedAt: at, Body: "hi"}
	if err := ok.Validate(); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		mut  func(*Message)
		want string
	}{
		{"missing id", func(m *Message) { m.ID = "" }, "missing id"},
		{"missing channel", func(m *Message) { m.Channel = "" }, "missing channel_id"},
		{"zero time", func(m *Message) { m.CreatedAt = time.Time{} }, "created_at"},
		{"kind", func(m *Message) { m.AuthorKind = "bot" }, "author_kind"},
		{"oversized", func(m *Message) { m.Body = strings.Repeat("x", MaxBodyBytes+1) }, fmt.Sprint(MaxBodyBytes)},
		{"bad utf-8", func(m *Message) { m.Body = "\xff" }, "UTF-8"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := ok
			tt.mut(&m)
			err := m.Validate()
			if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Validate = %v, want ErrInvalid mentioning %q", err, tt.want)
			}
		})
	}
}

func TestAdvance(t *testing.T) {
	w := Watermark{Native: "n1", Seq: 5, Marks: Unedited("a", "b")}

	got := w.Advance("n1", Seen{Seq: 9, Marks: Unedited("b", "c")}, 0)
	if got.Native != "n1" || got.Seq != 9 || strings.Join(MarkIDs(got.Marks), ",") != "a,b,c" {
		t.Fatalf("same native: %+v", got)
	}
	// An older delivery never moves seq backwards.
	if got = w.Advance("n1", Seen{Seq: 2}, 0); got.Seq != 5 {
		t.Fatalf("seq moved backwards: %d", got.Seq)
	}
	// Another native session saw none of the old one's lines: replaced.
	got = w.Advance("n2", Seen{Seq: 3, Marks: Unedited("c")}, 0)
	if got.Native != "n2" || got.Seq != 3 || strings.Join(MarkIDs(got.Marks), ",") != "c" {
		t.Fatalf("other native: %+v", got)
	}
	if len(MarkIDs(w.Marks)) != 2 {
		t.Fatal("Advance changed its receiver")
	}
}

func TestAdvanceDropsCoveredMarks(t *testing.T) {
	w := Watermark{Native: "n", Seq: 5, Marks: []Mark{{ID: "a", Seq: 7}, {ID: "b"}, {ID: "c", Seq: 20}}}
	got := w.Advance("n", Seen{Seq: 10, Marks: []Mark{{ID: "b"}, {ID: "d", Seq: 9}}}, 0)
	if got.Seq != 10 || fmt.Sprint(got.Marks) != "[{b 0} {c 20}]" {
		t.Fatalf("advance = %+v, want marks below the new seq dropped, duplicates merged", got)
	}
}

func TestAdvanceKeepsNewestAddressed(t *testing.T) {
	var w Watermark
	for i := 0; i < 250; i++ {
		w = w.Advance("n", Seen{Marks: Unedited(fmt.Sprintf("m%03d", i))}, 0)
	}
	if len(MarkIDs(w.Marks)) != MaxWatermarkIDs || MarkIDs(w.Marks)[0] != "m050" || MarkIDs(w.Marks)[len(MarkIDs(w.Marks))-1] != "m249" {
		t.Fatalf("ids: %d, first %s, last %s", len(MarkIDs(w.Marks)), MarkIDs(w.Marks)[0], MarkIDs(w.Marks)[len(MarkIDs(w.Marks))-1])
	}
	if w = w.Advance("n", Seen{Marks: Unedited("x")}, 3); len(MarkIDs(w.Marks)) != 3 || MarkIDs(w.Marks)[2] != "x" {
		t.Fatalf("max 3: %v", MarkIDs(w.Marks))
	}
}

func TestCovers(t *testing.T) {
	w := Watermark{Native: "n", Seq: 10, Marks: append(Unedited("late"), Mark{ID: "root", Seq: 12})}
	for _, tt := range []struct {
		id     string
		seq    uint64
		edited bool
		want   bool
	}{
		{"old", 3, false, true},
		{"tie", 10, false, true},
		{"new", 11, false, false},
		{"late", 40, false, true},     // a mention answered before the app pushed it
		{"late", 41, true, false},     // ... edited since: news
		{"old-edit", 12, true, false}, // an edit arrives with a new seq
		{"old-edit", 9, true, true},   // an edit the session was shown
	} {
		if got := w.Covers(tt.id, tt.seq, tt.edited); got != tt.want {
			t.Errorf("Covers(%q, %d, edited %v) = %v, want %v", tt.id, tt.seq, tt.edited, got, tt.want)
		}
	}
}

func TestSelfWrote(t *testing.T) {
	s := Self{Handle: "@claude", Binding: "b-claude"}
	for _, tt := range []struct {
		author, binding string
		agent, want     bool
	}{
		{"@claude", "", true, true},
		{"@claude", "", false, false},       // a person whose name is the handle
		{"@claude", "b-other", true, false}, // another binding's post under the same handle
		{"claude", "", true, true},
		{"Claude", "", true, true},
		{" @CLAUDE ", "", true, true},
		{"Claude", "", false, false}, // a person who shares the name
		{"claude", "", false, false},
		{"Claude Code", "b-claude", false, true}, // a display name, marked with the binding
		{"Claude Code", "", true, false},
		{"@claude-2", "", true, false},
		{"aiko", "b-other", false, false},
		{"", "", true, false},
	} {
		if got := s.Wrote(tt.author, tt.binding, tt.agent); got != tt.want {
			t.Errorf("Wrote(%q, %q, agent %v) = %v, want %v", tt.author, tt.binding, tt.agent, got, tt.want)
		}
	}
	if (Self{}).Wrote("", "", true) {
		t.Error("an empty handle matched an empty author")
	}
}

// A hole is a version at or below Seq left out for a later turn: not
// covered until a mark fills it; other holes stay; holes never fall to
// the mark limit.
func TestAdvanceHoles(t *testing.T) {
	w := Watermark{Native: "n", Seq: 10, Held: []Mark{{ID: "q1", Seq: 4}, {ID: "q2", Seq: 7}}}
	for _, tt := range []struct {
		id   string
		seq  uint64
		want bool
	}{{"q1", 4, false}, {"q2", 7, false}, {"q1", 5, true}, {"other", 4, true}} {
		if got := w.Covers(tt.id, tt.seq, false); got != tt.want {
			t.Errorf("Covers(%q, %d) = %v, want %v", tt.id, tt.seq, got, tt.want)
		}
	}
	got := w.Advance("n", Seen{Seq: 12, Marks: []Mark{{ID: "q1", Seq: 4}}, Held: []Mark{{ID: "q3", Seq: 11}}}, 1)
	if fmt.Sprint(got.Held) != "[{q2 7} {q3 11}]" || len(got.Marks) != 0 || got.Seq != 12 {
		t.Fatalf("advance = %+v, want q1 filled (its mark dropped under the seq), q2 kept, q3 added", got)
	}
	// A mention answered by any unedited version fills its hole too.
	if got = got.Advance("n", Seen{Marks: Unedited("q2")}, 0); fmt.Sprint(got.Held) != "[{q3 11}]" {
		t.Fatalf("unedited mark: holes %v", got.Held)
	}
	// Another native session's holes say nothing of this one.
	if got = got.Advance("n2", Seen{Seq: 3}, 0); len(got.Held) != 0 {
		t.Fatalf("other native kept holes %v", got.Held)
	}
	if (Seen{Held: []Mark{{ID: "q", Seq: 1}}}).Empty() {
		t.Fatal("a Seen with only holes is empty")
	}
}
