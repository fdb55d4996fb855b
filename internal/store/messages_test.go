package store

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/residentd/residentd/internal/channel"
)

func ids(msgs []channel.Message) []string {
	out := make([]string, 0, len(msgs))
	for _, m := range msgs {
		out = append(out, m.ID)
	}
	return out
}

func put(t *testing.T, s *Store, msgs ...channel.Message) int {
	t.Helper()
	res, err := s.PutMessages(msgs)
	if err != nil {
		t.Fatalf("put: %v", err)
	}
	return res.Added
}

func TestPutMessagesAtomicBatch(t *testing.T) {
	s := openTest(t, Options{})
	bad := msg("ch-a", "m-bad", 2, "")
	bad.AuthorKind = "robot"
	_, err := s.PutMessages([]channel.Message{msg("ch-a", "m1", 1, ""), bad, msg("ch-b", "m3", 3, "")})
	if !errors.Is(err, channel.ErrInvalid) {
		t.Fatalf("err = %v, want ErrInvalid", err)
	}
	for _, want := range []string{`"m-bad"`, "message 1 of 3"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not name %s", err, want)
		}
	}
	if chs, _ := s.Channels(); len(chs) != 0 {
		t.Errorf("invalid batch created channels %v", chs)
	}
	if got, _ := s.Recent("ch-a", "", 10); len(got) != 0 {
		t.Errorf("invalid batch wrote %v", ids(got))
	}
	if res, err := s.PutMessages(nil); res != (PutResult{}) || err != nil {
		t.Errorf("empty batch: %+v, %v", res, err)
	}
}

func TestPutMessagesDuplicatesAndChannels(t *testing.T) {
	s := openTest(t, Options{})
	if n := put(t, s, msg("ch-b", "m1", 1, ""), msg("ch-a", "m1", 1, ""), msg("ch-a", "m2", 2, "")); n != 3 {
		t.Errorf("added %d, want 3", n)
	}
	again := msg("ch-a", "m1", 5, "")
	again.Body = "rewritten"
	res, err := s.PutMessages([]channel.Message{again, msg("ch-a", "m2", 2, ""), msg("ch-a", "m3", 3, ""), msg("ch-a", "m3", 3, "")})
	if err != nil || res != (PutResult{Added: 1, Edited: 1, Duplicates: 2}) {
		t.Errorf("push = %+v, %v; want m3 added once, m1 edited, m2 and the second m3 duplicates", res, err)
	}
	got, err := s.Recent("ch-a", "", 10)
	if err != nil {
		t.Fatal(err)
	}
	// An edit keeps the first push's created_at (and so its place).
	if fmt.Sprint(ids(got)) != "[m1 m2 m3]" || got[0].Body != "rewritten" || !got[0].Edited || !got[0].CreatedAt.Equal(t0.Add(time.Second)) {
		t.Errorf("recent = %+v", got)
	}
	chs, err := s.Channels()
	if err != nil || fmt.Sprint(chs) != "[ch-a ch-b]" {
		t.Errorf("channels = %v, %v", chs, err)
	}
}

func TestRetention(t *testing.T) {
	s := openTest(t, Options{MaxChannelMessages: 3})
	// Inserted out of created_at order; the oldest by created_at go.
	put(t, s, msg("ch-a", "m5", 5, ""), msg("ch-a", "m1", 1, ""), msg("ch-a", "m4", 4, "m1"))
	put(t, s, msg("ch-a", "m2", 2, ""), msg("ch-a", "m6", 6, "m1"), msg("ch-b", "x", 0, ""))
	all, _, err := s.History("ch-a", "", "", 100)
	if err != nil {
		t.Fatal(err)
	}
	thread, _ := s.Recent("ch-a", "m1", 100)
	if fmt.Sprint(ids(all)) != "[m5]" || fmt.Sprint(ids(thread)) != "[m4 m6]" {
		t.Errorf("main %v thread %v, want [m5] and [m4 m6]", ids(all), ids(thread))
	}
	// A dropped id is gone from the id index: as a cursor it is unknown.
	if _, _, err := s.History("ch-a", "", "m1", 10); !errors.Is(err, ErrNotFound) {
		t.Errorf("cursor at dropped id: %v", err)
	}
	if got, _ := s.Recent("ch-b", "", 10); len(got) != 1 {
		t.Errorf("other channel trimmed: %v", ids(got))
	}
	if err := s.Check(); err != nil {
		t.Error(err)
	}
	// Reopening with the same bound keeps the count right.
	s = reopen(t, s, Options{MaxChannelMessages: 3})
	put(t, s, msg("ch-a", "m7", 7, ""))
	thread, _ = s.Recent("ch-a", "m1", 100)
	all, _ = s.Recent("ch-a", "", 100)
	if fmt.Sprint(ids(all)) != "[m5 m7]" || fmt.Sprint(ids(thread)) != "[m6]" {
		t.Errorf("after reopen: main %v thread %v", ids(all), ids(thread))
	}
}

func TestRecentThreadVsMain(t *testing.T) {
	s := openTest(t, Options{})
	put(t, s,
		msg("ch-a", "r1", 1, ""),
		msg("ch-a", "b", 3, ""),
		msg("ch-a", "a", 3, ""), // same instant: ordered by id
		msg("ch-a", "t1", 2, "r1"),
		msg("ch-a", "t2", 4, "r1"),
		msg("ch-a", "u1", 5, "r2"),
		msg("ch-a", "self", 6, "self"),
	)
	cases := []struct {
		thread string
		n      int
		want   string
	}{
		{"", 10, "[r1 a b self]"},
		{"", 2, "[b self]"},
		{"r1", 10, "[r1 t1 t2]"},
		{"r1", 2, "[t1 t2]"},
		{"r2", 10, "[u1]"}, // root unknown: replies only
		{"nope", 10, "[]"},
		{"", 0, "[]"},
	}
	for _, c := range cases {
		got, err := s.Recent("ch-a", c.thread, c.n)
		if err != nil {
			t.Fatal(err)
		}
		if fmt.Sprint(ids(got)) != c.want {
			t.Errorf("Recent(%q, %d) = %v, want %s", c.thread, c.n, ids(got), c.want)
		}
	}
	if got, err := s.Recent("no-such-channel", "", 10); err != nil || len(got) != 0 {
		t.Errorf("unknown channel: %v, %v", got, err)
	}
}

func TestHistoryPaging(t *testing.T) {
	s := openTest(t, Options{})
	var batch []channel.Message
	for i := range 25 {
		batch = append(batch, msg("ch-a", fmt.Sprintf("m%02d", i), i, ""))
		if i%5 == 0 {
			batch = append(batch, msg("ch-a", fmt.Sprintf("t%02d", i), i, "m00"))
		}
	}
	put(t, s, batch...)

	// Page by id cursor until the start.
	var pages [][]string
	cursor := ""
	for range 10 {
		got, next, err := s.History("ch-a", "", cursor, 10)
		if err != nil {
			t.Fatal(err)
		}
		pages = append(pages, ids(got))
		if next == "" {
			break
		}
		if next != got[0].ID {
			t.Errorf("next = %q, want the page's oldest %q", next, got[0].ID)
		}
		cursor = next
	}
	want := "[[m15 m16 m17 m18 m19 m20 m21 m22 m23 m24] [m05 m06 m07 m08 m09 m10 m11 m12 m13 m14] [m00 m01 m02 m03 m04]]"
	if fmt.Sprint(pages) != want {
		t.Errorf("pages = %v\nwant    %s", pages, want)
	}
	// A page that ends exactly at the start has no next.
	if got, next, _ := s.History("ch-a", "", "m05", 5); next != "" || len(got) != 5 {
		t.Errorf("exact last page: %v next %q", ids(got), next)
	}

	// Timestamp cursor: strictly older than the instant.
	got, next, err := s.History("ch-a", "", t0.Add(3*time.Second).Format(time.RFC3339), 2)
	if err != nil || fmt.Sprint(ids(got)) != "[m01 m02]" || next != "m01" {
		t.Errorf("timestamp cursor: %v next %q err %v", ids(got), next, err)
	}
	got, _, err = s.History("ch-a", "", t0.Add(3*time.Second+time.Millisecond).Format(time.RFC3339Nano), 1)
	if err != nil || fmt.Sprint(ids(got)) != "[m03]" {
		t.Errorf("fractional timestamp cursor: %v err %v", ids(got), err)
	}
	if got, next, err := s.History("ch-a", "", "2000-01-01T00:00:00Z", 5); err != nil || len(got) != 0 || next != "" {
		t.Errorf("cursor before everything: %v %q %v", ids(got), next, err)
	}

	// Thread paging includes the root, which lives in the main timeline.
	got, next, err = s.History("ch-a", "m00", "", 3)
	if err != nil || fmt.Sprint(ids(got)) != "[t10 t15 t20]" || next != "t10" {
		t.Fatalf("thread page 1: %v next %q err %v", ids(got), next, err)
	}
	got, next, err = s.History("ch-a", "m00", next, 3)
	if err != nil || fmt.Sprint(ids(got)) != "[m00 t00 t05]" || next != "" {
		t.Errorf("thread page 2: %v next %q err %v", ids(got), next, err)
	}

	// Bad cursors.
	for _, bad := range []string{"no-such-id", "yesterday", "2025-13-01T00:00:00Z"} {
		if _, _, err := s.History("ch-a", "", bad, 5); !errors.Is(err, ErrNotFound) || !strings.Contains(err.Error(), bad) {
			t.Errorf("cursor %q: err = %v, want ErrNotFound naming it", bad, err)
		}
	}
	// Unknown channel: empty, no error.
	if got, next, err := s.History("nope", "", "whatever", 5); err != nil || len(got) != 0 || next != "" {
		t.Errorf("unknown channel: %v %q %v", got, next, err)
	}
	// Default limit.
	var many []channel.Message
	for i := range DefaultHistoryLimit + 5 {
		many = append(many, msg("ch-many", fmt.Sprint(i), i, ""))
	}
	put(t, s, many...)
	if got, next, _ := s.History("ch-many", "", "", 0); len(got) != DefaultHistoryLimit || next != "5" {
		t.Errorf("default limit gave %d, next %q", len(got), next)
	}
}

func BenchmarkRecent30(b *testing.B) {
	s := openTest(b, Options{})
	var batch []channel.Message
	for i := range 5000 {
		root := ""
		if i%4 == 0 && i > 0 {
			root = fmt.Sprintf("m%05d", i-i%40)
		}
		m := channel.Message{ID: fmt.Sprintf("m%05d", i), Channel: "ch-a", ThreadRoot: root, Author: "ann", AuthorKind: channel.KindUser, CreatedAt: t0.Add(time.Duration(i) * time.Second), Body: strings.Repeat("x", 300)}
		batch = append(batch, m)
	}
	for chunk := range slices.Chunk(batch, 1000) {
		if _, err := s.PutMessages(chunk); err != nil {
			b.Fatal(err)
		}
	}
	for b.Loop() {
		got, err := s.Recent("ch-a", "", 30)
		if err != nil || len(got) != 30 {
			b.Fatalf("recent: %d, %v", len(got), err)
		}
	}
}
