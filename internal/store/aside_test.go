package store

import (
	"testing"

	"github.com/residentd/residentd/internal/channel"
	"github.com/residentd/residentd/internal/session"
)

// A set-aside session keeps the conversation's position when it was set
// aside, counts the restores that gave it up, gives way to none other, and
// is dropped when it is the key's native id again, when dropped by name,
// or when the key starts fresh.
func TestAsideSession(t *testing.T) {
	s := openTest(t, Options{})
	k := session.Key{Channel: "ch-a", Binding: "b-1"}
	exchange := func() {
		t.Helper()
		if err := s.AppendTurns(k, session.Turn{Role: session.RoleUser, Text: "u", At: t0}, session.Turn{Role: session.RoleAssistant, Text: "a", At: t0}); err != nil {
			t.Fatal(err)
		}
	}
	if _, ok, err := s.Aside(k); ok || err != nil {
		t.Fatalf("a new key has a set-aside session: %v, %v", ok, err)
	}
	if err := s.SetNativeID(k, "nat-old"); err != nil {
		t.Fatal(err)
	}
	exchange()
	main, thread := channel.WatermarkKey{Key: k}, channel.WatermarkKey{Key: k, Thread: "r1"}
	commit := func(native string, wk channel.WatermarkKey, seq uint64) {
		t.Helper()
		if err := s.FinishTurn(k, Finish{Native: native, Staged: map[channel.WatermarkKey]channel.Seen{wk: {Seq: seq}}}); err != nil {
			t.Fatal(err)
		}
	}
	commit("nat-old", main, 5)
	commit("nat-old", thread, 7)
	a, err := s.SetAside(k, "nat-old", "timeout", t0)
	if err != nil || a.Native != "nat-old" || a.Since != 2 || a.Tries != 1 || a.Reason != "timeout" || !a.At.Equal(t0) ||
		len(a.Watermarks) != 2 || a.Watermarks[""].Seq != 5 || a.Watermarks["r1"].Seq != 7 {
		t.Fatalf("set aside: %+v, %v", a, err)
	}
	// A stand-in answers two exchanges: the set-aside session lacks them;
	// its watermark replaces the key's record, not the one kept aside.
	if err := s.SetNativeID(k, "nat-standin"); err != nil {
		t.Fatal(err)
	}
	exchange()
	exchange()
	commit("nat-standin", main, 9)
	if a, _, _ := s.Aside(k); a.Watermarks[""].Seq != 5 || a.Watermarks[""].Native != "nat-old" {
		t.Fatalf("the stand-in's watermark changed the one kept aside: %+v", a.Watermarks)
	}
	if n, err := s.TurnsSince(k, a.Since); n != 4 || err != nil {
		t.Fatalf("turns since it was set aside: %d, %v; want 4", n, err)
	}
	// Given up again: one try more, its position kept. Another session is
	// not set aside over it.
	if a, err = s.SetAside(k, "nat-old", "failed", t0.Add(1)); err != nil || a.Tries != 2 || a.Since != 2 || a.Reason != "failed" || !a.At.Equal(t0) {
		t.Fatalf("set aside again: %+v, %v", a, err)
	}
	if a, err = s.SetAside(k, "nat-standin", "timeout", t0); err != nil || a.Native != "nat-old" {
		t.Fatalf("another session set aside over it: %+v, %v", a, err)
	}
	if err := s.DropAside(k, "nat-other"); err != nil {
		t.Fatal(err)
	}
	if got, ok, _ := s.Aside(k); !ok || got.Native != "nat-old" {
		t.Fatalf("dropping another session's id dropped it: %+v %v", got, ok)
	}
	// Reopened and saved again: no longer aside.
	if err := s.SetNativeID(k, "nat-old"); err != nil {
		t.Fatal(err)
	}
	if got, ok, _ := s.Aside(k); ok {
		t.Fatalf("still aside once it is the key's native id again: %+v", got)
	}
	// Dropped by name, and with the key started fresh.
	if _, err := s.SetAside(k, "nat-old", "timeout", t0); err != nil {
		t.Fatal(err)
	}
	if err := s.DropAside(k, "nat-old"); err != nil {
		t.Fatal(err)
	}
	if _, ok, _ := s.Aside(k); ok {
		t.Fatal("still aside after DropAside")
	}
	if _, err := s.SetAside(k, "nat-old", "timeout", t0); err != nil {
		t.Fatal(err)
	}
	if err := s.Forget(k); err != nil {
		t.Fatal(err)
	}
	if _, ok, _ := s.Aside(k); ok {
		t.Fatal("still aside after the key started fresh")
	}
	// A key whose only record is a set-aside session keeps it when its
	// native id is cleared.
	k2 := session.Key{Channel: "ch-b", Binding: "b-1"}
	if _, err := s.SetAside(k2, "nat-x", "timeout", t0); err != nil {
		t.Fatal(err)
	}
	if err := s.SetNativeID(k2, ""); err != nil {
		t.Fatal(err)
	}
	if a, ok, _ := s.Aside(k2); !ok || a.Since != 0 {
		t.Fatalf("clearing the native id dropped the set-aside session: %+v %v", a, ok)
	}
}
