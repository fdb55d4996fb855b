package store

import (
	"fmt"
	"strings"
	"testing"

	"github.com/residentd/residentd/internal/channel"
	"github.com/residentd/residentd/internal/session"
)

func TestWatermarkCommit(t *testing.T) {
	s := openTest(t, Options{})
	wk := channel.WatermarkKey{Key: session.Key{Channel: "ch-a", Binding: "b-1"}}
	if _, ok, err := s.Watermark(wk); ok || err != nil {
		t.Fatalf("missing watermark: ok %v err %v", ok, err)
	}
	w, err := s.CommitWatermark(wk, "n1", channel.Seen{Seq: 4, Marks: channel.Unedited("q1", "q2")})
	if err != nil {
		t.Fatal(err)
	}
	if w.Native != "n1" || w.Seq != 4 || len(channel.MarkIDs(w.Marks)) != 2 {
		t.Errorf("first commit = %+v", w)
	}
	w, err = s.CommitWatermark(wk, "n1", channel.Seen{Seq: 9, Marks: channel.Unedited("q2", "q3")})
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(channel.MarkIDs(w.Marks)) != "[q1 q2 q3]" || w.Seq != 9 {
		t.Errorf("second commit = %+v", w)
	}
	stored, ok, err := s.Watermark(wk)
	if !ok || err != nil || fmt.Sprint(channel.MarkIDs(stored.Marks)) != fmt.Sprint(channel.MarkIDs(w.Marks)) || stored.Native != "n1" || stored.Seq != 9 {
		t.Errorf("stored = %+v %v %v, want %+v", stored, ok, err, w)
	}

	// 250 more ids through commits: at most 200 remain, the newest.
	for i := range 25 {
		var ids []string
		for j := range 10 {
			ids = append(ids, fmt.Sprintf("x%03d", i*10+j))
		}
		if _, err := s.CommitWatermark(wk, "n1", channel.Seen{Seq: 1, Marks: channel.Unedited(ids...)}); err != nil {
			t.Fatal(err)
		}
	}
	stored, _, _ = s.Watermark(wk)
	if len(channel.MarkIDs(stored.Marks)) != channel.MaxWatermarkIDs || channel.MarkIDs(stored.Marks)[0] != "x050" || channel.MarkIDs(stored.Marks)[199] != "x249" || stored.Seq != 9 {
		t.Errorf("after 253 ids: %d kept, first %q last %q, seq %d", len(channel.MarkIDs(stored.Marks)), channel.MarkIDs(stored.Marks)[0], channel.MarkIDs(stored.Marks)[len(channel.MarkIDs(stored.Marks))-1], stored.Seq)
	}

	// Another native replaces the record.
	w, err = s.CommitWatermark(wk, "n2", channel.Seen{Seq: 2, Marks: channel.Unedited("m9")})
	if err != nil {
		t.Fatal(err)
	}
	stored, _, _ = s.Watermark(wk)
	if stored.Native != "n2" || fmt.Sprint(channel.MarkIDs(stored.Marks)) != "[m9]" || stored.Seq != 2 {
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
	for i := 0; b.Loop(); i++ {
		if _, err := s.CommitWatermark(wk, "native", channel.Seen{Seq: uint64(i + 1)}); err != nil {
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
		if got, err = s.CommitWatermark(wk, "n", channel.Seen{Marks: channel.Unedited(id)}); err != nil {
			t.Fatal(err)
		}
	}
	if strings.Join(channel.MarkIDs(got.Marks), ",") != "c,d,e" {
		t.Fatalf("ids = %v, want the newest 3", channel.MarkIDs(got.Marks))
	}
}

// TestThreadKeys: a thread key is stored beside its channel's key (a
// channel key's names are as they always were), Keys lists both, Forget of
// one leaves the other, and a fork's watermarks are its source's, filed
// under the thread key for the fork's native.
func TestThreadKeys(t *testing.T) {
	s := openTest(t, Options{})
	ch := session.Key{Channel: "ch/a", Binding: "b-1"}
	th := session.Key{Channel: "ch/a", Binding: "b-1", Thread: "r/1"}
	if string(convName(ch)) != string(joinKey("ch/a", "b-1")) {
		t.Fatalf("a channel key's bucket name changed: %x", convName(ch))
	}
	if err := s.FinishTurn(ch, Finish{Native: "n-ch", SaveNative: true, Turns: []session.Turn{{Role: session.RoleUser, Text: "one"}},
		Staged: map[channel.WatermarkKey]channel.Seen{{Key: ch}: {Seq: 7}, {Key: ch, Thread: "r/1"}: {Seq: 5}, {Key: ch, Thread: "r/2"}: {Seq: 3}}}); err != nil {
		t.Fatal(err)
	}
	// A record of an older native is not the source's.
	if _, err := s.CommitWatermark(channel.WatermarkKey{Key: ch, Thread: "r/2"}, "n-old", channel.Seen{Seq: 9}); err != nil {
		t.Fatal(err)
	}
	native, wms, err := s.ForkSource(ch)
	if err != nil || native != "n-ch" || len(wms) != 2 || wms[""].Seq != 7 || wms["r/1"].Seq != 5 {
		t.Fatalf("ForkSource = %q %+v %v", native, wms, err)
	}
	if err := s.InheritWatermarks(th, "n-fork", wms); err != nil {
		t.Fatal(err)
	}
	thread, main, err := s.Seen(th, "r/1")
	if err != nil || main == nil || thread == nil || thread.Native != "n-fork" || main.Native != "n-fork" || thread.Seq != 5 || main.Seq != 7 {
		t.Fatalf("the fork's watermarks: thread %+v main %+v %v", thread, main, err)
	}
	if err := s.FinishTurn(th, Finish{Native: "n-fork", SaveNative: true, Turns: []session.Turn{{Role: session.RoleUser, Text: "in the thread"}}}); err != nil {
		t.Fatal(err)
	}
	keys, err := s.Keys()
	if err != nil || len(keys) != 2 || !(keys[0] == ch && keys[1] == th || keys[0] == th && keys[1] == ch) {
		t.Fatalf("Keys = %v, %v", keys, err)
	}
	if err := s.Forget(th); err != nil {
		t.Fatal(err)
	}
	if n, _ := s.NativeID(ch); n != "n-ch" {
		t.Fatalf("forgetting the thread key dropped the channel's session: %q", n)
	}
	if w, ok, _ := s.Watermark(channel.WatermarkKey{Key: ch}); !ok || w.Seq != 7 {
		t.Fatalf("forgetting the thread key dropped the channel's watermark: %+v", w)
	}
	if n, _ := s.NativeID(th); n != "" {
		t.Fatalf("the thread key's session survived Forget: %q", n)
	}
	if w, ok, _ := s.Watermark(channel.WatermarkKey{Key: th}); ok {
		t.Fatalf("the thread key's watermark survived Forget: %+v", w)
	}
}
