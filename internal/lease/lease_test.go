package lease

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/residentd/residentd/internal/channel"
	"github.com/residentd/residentd/internal/session"
	"github.com/residentd/residentd/internal/store"
)

func TestShapeString(t *testing.T) {
	for s, want := range map[Shape]string{Cold: "cold", Warm: "warm", Restored: "restored", Shape(9): "shape(9)"} {
		if s.String() != want {
			t.Errorf("%d.String() = %q, want %q", int(s), s.String(), want)
		}
	}
}

func openStore(t *testing.T) *store.Store {
	t.Helper()
	st, err := store.Open(t.TempDir()+"/r.db", store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

func TestCommitMovesWatermarkOnce(t *testing.T) {
	st := openStore(t)
	k := channel.WatermarkKey{Key: session.Key{Channel: "ch", Binding: "b"}}
	l := New(Warm, "nat-1")
	l.Stage(k, channel.Seen{Seq: 7, Marks: channel.Unedited("q1")})
	l.Stage(k, channel.Seen{Seq: 5, Marks: channel.Unedited("q2"), Held: []channel.Mark{{ID: "q3", Seq: 4}}})
	l.Stage(k, channel.Seen{}) // nothing shown: nothing staged
	if l.Staged() != 1 {
		t.Fatalf("Staged = %d, want 1", l.Staged())
	}
	if _, ok, _ := st.Watermark(k); ok {
		t.Fatal("watermark exists before commit")
	}
	n, err := l.Commit(st)
	if err != nil || n != 1 {
		t.Fatalf("Commit = %d, %v; want 1, nil", n, err)
	}
	wm, ok, err := st.Watermark(k)
	if err != nil || !ok {
		t.Fatalf("Watermark after commit: ok=%v err=%v", ok, err)
	}
	if wm.Native != "nat-1" || wm.Seq != 7 || strings.Join(channel.MarkIDs(wm.Marks), ",") != "q1,q2" || fmt.Sprint(wm.Held) != "[{q3 4}]" {
		t.Fatalf("watermark = %+v", wm)
	}
	if n := l.Discard(); n != 0 {
		t.Fatalf("Discard after Commit dropped %d", n)
	}
	if n, _ := l.Commit(st); n != 0 {
		t.Fatalf("second Commit wrote %d", n)
	}
}

func TestDiscardLeavesWatermark(t *testing.T) {
	st := openStore(t)
	k := channel.WatermarkKey{Key: session.Key{Channel: "ch", Binding: "b"}}
	l := New(Cold, "nat-2")
	l.Stage(k, channel.Seen{Seq: 9})
	if n := l.Discard(); n != 1 {
		t.Fatalf("Discard = %d, want 1", n)
	}
	if n, err := l.Commit(st); n != 0 || err != nil {
		t.Fatalf("Commit after Discard = %d, %v", n, err)
	}
	if _, ok, _ := st.Watermark(k); ok {
		t.Fatal("a discarded run moved the watermark")
	}
	l.Stage(k, channel.Seen{Seq: 10})
	if l.Staged() != 0 {
		t.Fatal("Stage after Discard kept something")
	}
}

type failingCommitter struct{}

func (failingCommitter) CommitWatermarks(string, map[channel.WatermarkKey]channel.Seen) error {
	return errors.New("disk full")
}

func TestCommitErrorNamesKey(t *testing.T) {
	l := New(Warm, "nat-3")
	l.Stage(channel.WatermarkKey{Key: session.Key{Channel: "ch-x", Binding: "b"}}, channel.Seen{Seq: 1})
	_, err := l.Commit(failingCommitter{})
	if err == nil || !strings.Contains(err.Error(), `"ch-x/b"`) || !strings.Contains(err.Error(), "disk full") {
		t.Fatalf("Commit error = %v", err)
	}
}
