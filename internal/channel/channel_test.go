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
	t1 := time.Date(2026, 1, 1, 0, 0, 1, 0, time.UTC)
	t2 := t1.Add(time.Minute)
	w := Watermark{Native: "n1", LastAt: t1, IDs: []string{"a", "b"}}

	got := w.Advance("n1", Seen{IDs: []string{"b", "c"}, LastAt: t2}, 0)
	if got.Native != "n1" || !got.LastAt.Equal(t2) || strings.Join(got.IDs, ",") != "a,b,c" {
		t.Fatalf("same native: %+v", got)
	}
	// An older render never moves last_at backwards.
	got = w.Advance("n1", Seen{IDs: []string{"z"}, LastAt: t1.Add(-time.Hour)}, 0)
	if !got.LastAt.Equal(t1) {
		t.Fatalf("last_at moved backwards: %v", got.LastAt)
	}
	// Another native session saw none of the old one's lines: replaced.
	got = w.Advance("n2", Seen{IDs: []string{"c"}, LastAt: t2}, 0)
	if got.Native != "n2" || strings.Join(got.IDs, ",") != "c" {
		t.Fatalf("other native: %+v", got)
	}
	if len(w.IDs) != 2 {
		t.Fatal("Advance changed its receiver")
	}
}

func TestAdvanceKeepsNewestIDs(t *testing.T) {
	var w Watermark
	for i := 0; i < 250; i++ {
		w = w.Advance("n", Seen{IDs: []string{fmt.Sprintf("m%03d", i)}}, 0)
	}
	if len(w.IDs) != MaxWatermarkIDs || w.IDs[0] != "m050" || w.IDs[len(w.IDs)-1] != "m249" {
		t.Fatalf("ids: %d, first %s, last %s", len(w.IDs), w.IDs[0], w.IDs[len(w.IDs)-1])
	}
	if w = w.Advance("n", Seen{IDs: []string{"x"}}, 3); len(w.IDs) != 3 || w.IDs[2] != "x" {
		t.Fatalf("max 3: %v", w.IDs)
	}
}
