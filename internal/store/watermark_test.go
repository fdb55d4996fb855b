package store

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/residentd/residentd/internal/channel"
	"github.com/residentd/residentd/internal/session"
)

func TestWatermarkCommit(t *testing.T) {
	s := openTest(t, Options{})
	wk := channel.WatermarkKey{Key: session.Key{Channel: "ch-a", Binding: "b-1"}}
	if _, ok, err := s.Watermark(wk); ok || err != nil {
		t.Fatalf("missing watermark: ok %v err %v", ok, err)
	}
	w, err := s.CommitWatermark(wk, "n1", channel.Seen{IDs: []string{"m1", "m2"}, LastAt: t0})
	if err != nil {
		t.Fatal(err)
	}
	if w.Native != "n1" || len(w.IDs) != 2 || !w.LastAt.Equal(t0) {
		t.Errorf("first commit = %+v", w)
	}
	w, err = s.CommitWatermark(wk, "n1", channel.Seen{IDs: []string{"m2", "m3"}, LastAt: t0.Add(time.Minute)})
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(w.IDs) != "[m1 m2 m3]" || !w.LastAt.Equal(t0.Add(time.Minute)) {
		t.Errorf("second commit = %+v", w)
	}
	stored, ok, err := s.Watermark(wk)
	if !ok || err != nil || fmt.Sprint(stored.IDs) != fmt.Sprint(w.IDs) || stored.Native != "n1" {
		t.Errorf("stored = %+v %v %v, want %+v", stored, ok, err, w)
	}

	// 250 more ids through commits: at most 200 remain, the newest.
	for i := range 25 {
		var ids []string
		for j := range 10 {
			ids = append(ids, fmt.Sprintf("x%03d", i*10+j))
		}
		if _, err := s.CommitWatermark(wk, "n1", channel.Seen{IDs: ids, LastAt: t0}); err != nil {
			t.Fatal(err)
		}
	}
	stored, _, _ = s.Watermark(wk)
	if len(stored.IDs) != channel.MaxWatermarkIDs || stored.IDs[0] != "x050" || stored.IDs[199] != "x249" {
		t.Errorf("after 253 ids: %d kept, first %q last %q", len(stored.IDs), stored.IDs[0], stored.IDs[len(stored.IDs)-1])
	}

	// Another native replaces the record.
	w, err = s.CommitWatermark(wk, "n2", channel.Seen{IDs: []string{"m9"}, LastAt: t0.Add(-time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	stored, _, _ = s.Watermark(wk)
	if stored.Native != "n2" || fmt.Sprint(stored.IDs) != "[m9]" || !stored.LastAt.Equal(t0.Add(-time.Hour)) {
		t.Errorf("after native change: %+v (returned %+v)", stored, w)
	}

	// Threads are separate records.
	thread := channel.WatermarkKey{Key: session.Key{Channel: "ch-a", Binding: "b-1"}, Thread: "m1"}
	if _, ok, _ := s.Watermark(thread); ok {
		t.Error("thread watermark shares the channel's record")
	}

	if err := s.DeleteWatermark(wk); err != nil {
		t.Fatal(err)
	}
	if _, ok, _ := s.Watermark(wk); ok {
		t.Error("watermark survived delete")
	}
	if err := s.DeleteWatermark(wk); err != nil {
		t.Errorf("deleting a missing watermark: %v", err)
	}
	if _, err := s.CommitWatermark(channel.WatermarkKey{Key: session.Key{Channel: "ch-a"}}, "n", channel.Seen{}); err == nil {
		t.Error("commit without session accepted")
	}
}

func BenchmarkCommitWatermark(b *testing.B) {
	s := openTest(b, Options{})
	wk := channel.WatermarkKey{Key: session.Key{Channel: "ch-a", Binding: "b-1"}}
	ids := make([]string, 12)
	for i := 0; b.Loop(); i++ {
		for j := range ids {
			ids[j] = fmt.Sprintf("m%d-%d", i, j)
		}
		if _, err := s.CommitWatermark(wk, "native", channel.Seen{IDs: ids, LastAt: t0.Add(time.Duration(i) * time.Second)}); err != nil {
			b.Fatal(err)
		}
	}
}

func TestCommitWatermarkKeepsConfiguredIDs(t *testing.T) {
	s := openTest(t, Options{MaxWatermarkIDs: 3})
	var err error
	wk := channel.WatermarkKey{Key: session.Key{Channel: "ch", Binding: "b"}}
	var got channel.Watermark
	for _, id := range []string{"a", "b", "c", "d", "e"} {
		if got, err = s.CommitWatermark(wk, "n", channel.Seen{IDs: []string{id}}); err != nil {
			t.Fatal(err)
		}
	}
	if strings.Join(got.IDs, ",") != "c,d,e" {
		t.Fatalf("ids = %v, want the newest 3", got.IDs)
	}
}
