package lease

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/residentd/residentd/internal/channel"
	"github.com/residentd/residentd/internal/store"
)

func TestPromptShape(t *testing.T) {
	const sys, replay, newest = "SYSTEM", "User: one\n\nAssistant: r1\n\nUser: two", "two"
	tests := []struct {
		name   string
		shape  Shape
		newest string
		want   string
	}{
		{"cold: framing + full replay", Cold, newest, sys + "\n\n" + replay},
		{"warm: newest turn only", Warm, newest, newest},
		{"restored: framing + newest turn", Restored, newest, sys + "\n\n" + newest},
		{"warm with blank newest falls back to replay", Warm, "  \n\t", sys + "\n\n" + replay},
		{"restored with blank newest falls back to replay", Restored, "", sys + "\n\n" + replay},
		{"cold with blank newest", Cold, "", sys + "\n\n" + replay},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := New(tt.shape, "nat-1").Prompt(sys, replay, tt.newest)
			if got != tt.want {
				t.Fatalf("Prompt = %q, want %q", got, tt.want)
			}
		})
	}
}

// A warm process must never be fed its own transcript again.
func TestWarmPromptCarriesNoEarlierTurn(t *testing.T) {
	earlier := []string{"first question about the refund spec", "builtin reply one", "second question", "builtin reply two"}
	replay := "User: " + earlier[0] + "\n\nAssistant: " + earlier[1] + "\n\nUser: " + earlier[2] + "\n\nAssistant: " + earlier[3] + "\n\nUser: newest"
	got := New(Warm, "nat-1").Prompt("SYSTEM FRAMING", replay, "newest")
	for _, e := range earlier {
		if strings.Contains(got, e) {
			t.Errorf("warm prompt contains earlier turn %q: %q", e, got)
		}
	}
	if strings.Contains(got, "SYSTEM FRAMING") {
		t.Errorf("warm prompt contains the system framing: %q", got)
	}
}

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
	k := store.WatermarkKey{Session: "ch/b", Channel: "ch"}
	at := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	l := New(Warm, "nat-1")
	l.Stage(k, channel.Seen{IDs: []string{"m1", "m2"}, LastAt: at})
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
	if wm.Native != "nat-1" || !wm.LastAt.Equal(at) || strings.Join(wm.IDs, ",") != "m1,m2" {
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
	k := store.WatermarkKey{Session: "ch/b", Channel: "ch"}
	l := New(Cold, "nat-2")
	l.Stage(k, channel.Seen{IDs: []string{"m9"}, LastAt: time.Now()})
	if n := l.Discard(); n != 1 {
		t.Fatalf("Discard = %d, want 1", n)
	}
	if n, err := l.Commit(st); n != 0 || err != nil {
		t.Fatalf("Commit after Discard = %d, %v", n, err)
	}
	if _, ok, _ := st.Watermark(k); ok {
		t.Fatal("a discarded run moved the watermark")
	}
	l.Stage(k, channel.Seen{IDs: []string{"m10"}})
	if l.Staged() != 0 {
		t.Fatal("Stage after Discard kept something")
	}
}

type failingCommitter struct{}

func (failingCommitter) CommitWatermark(store.WatermarkKey, string, channel.Seen) (channel.Watermark, error) {
	return channel.Watermark{}, errors.New("disk full")
}

func TestCommitErrorNamesKey(t *testing.T) {
	l := New(Warm, "nat-3")
	l.Stage(store.WatermarkKey{Session: "ch-x/b", Channel: "ch-x"}, channel.Seen{IDs: []string{"a"}})
	_, err := l.Commit(failingCommitter{})
	if err == nil || !strings.Contains(err.Error(), `"ch-x"`) || !strings.Contains(err.Error(), "disk full") {
		t.Fatalf("Commit error = %v", err)
	}
}

// NeedsReplay must agree with Prompt: the replay is built exactly when sent.
func TestNeedsReplayAgreesWithPrompt(t *testing.T) {
	const marker = "REPLAY-MARKER"
	for _, s := range Shapes {
		for _, newest := range []string{"newest", "", " \n"} {
			l := New(s, "n")
			uses := strings.Contains(l.Prompt("SYS", marker, newest), marker)
			if got := l.NeedsReplay(newest); got != uses {
				t.Errorf("%s newest %q: NeedsReplay = %v, Prompt uses replay = %v", s, newest, got, uses)
			}
		}
	}
}
