package store

import (
	"fmt"
	"slices"
	"testing"

	"github.com/residentd/residentd/internal/channel"
	"github.com/residentd/residentd/internal/session"
)

func TestConversationAppendAndBound(t *testing.T) {
	s := openTest(t, Options{MaxTurns: 5})
	k := session.Key{Channel: "ch-a", Binding: "b-1"}
	if got, err := s.Conversation(k); err != nil || len(got) != 0 {
		t.Fatalf("empty conversation = %v, %v", got, err)
	}
	for i := range 4 {
		if err := s.AppendTurns(k,
			session.Turn{Role: session.RoleUser, Text: fmt.Sprintf("u%d", i), At: t0},
			session.Turn{Role: session.RoleAssistant, Text: fmt.Sprintf("a%d", i), At: t0}); err != nil {
			t.Fatal(err)
		}
	}
	got, err := s.Conversation(k)
	if err != nil {
		t.Fatal(err)
	}
	var texts []string
	for _, tr := range got {
		texts = append(texts, tr.Text)
	}
	if want := []string{"a1", "u2", "a2", "u3", "a3"}; !slices.Equal(texts, want) {
		t.Errorf("turns = %v, want %v", texts, want)
	}
	// One append larger than the bound keeps its newest turns.
	var many []session.Turn
	for i := range 7 {
		many = append(many, session.Turn{Role: session.RoleUser, Text: fmt.Sprint(i)})
	}
	if err := s.AppendTurns(k, many...); err != nil {
		t.Fatal(err)
	}
	got, _ = s.Conversation(k)
	if len(got) != 5 || got[0].Text != "2" || got[4].Text != "6" {
		t.Errorf("after big append: %+v", got)
	}
	// Other keys are separate.
	if got, _ := s.Conversation(session.Key{Channel: "ch-a", Binding: "b-2"}); len(got) != 0 {
		t.Errorf("other key has %d turns", len(got))
	}
}

func TestAppendTurnsRejects(t *testing.T) {
	s := openTest(t, Options{})
	k := session.Key{Channel: "ch-a", Binding: "b-1"}
	if err := s.AppendTurns(k, session.Turn{Role: session.RoleUser, Text: "ok"}, session.Turn{Role: "system", Text: "no"}); err == nil {
		t.Error("role system accepted")
	}
	if got, _ := s.Conversation(k); len(got) != 0 {
		t.Errorf("rejected batch wrote %d turns", len(got))
	}
	if err := s.AppendTurns(session.Key{Channel: "ch-a"}, session.Turn{Role: session.RoleUser}); err == nil {
		t.Error("key without binding accepted")
	}
}

func TestNativeID(t *testing.T) {
	s := openTest(t, Options{})
	k := session.Key{Channel: "ch-a", Binding: "b-1"}
	if n, err := s.NativeID(k); n != "" || err != nil {
		t.Fatalf("unset native = %q, %v", n, err)
	}
	if err := s.SetNativeID(k, "sess-1"); err != nil {
		t.Fatal(err)
	}
	if err := s.SetNativeID(k, "sess-2"); err != nil {
		t.Fatal(err)
	}
	if n, _ := s.NativeID(k); n != "sess-2" {
		t.Errorf("native = %q, want sess-2", n)
	}
	if err := s.SetNativeID(k, ""); err != nil {
		t.Fatal(err)
	}
	if n, _ := s.NativeID(k); n != "" {
		t.Errorf("cleared native = %q", n)
	}
	if keys, _ := s.Keys(); len(keys) != 0 {
		t.Errorf("key with nothing kept still listed: %q", keys)
	}
	// Clearing keeps the conversation.
	if err := s.AppendTurns(k, session.Turn{Role: session.RoleUser, Text: "x"}); err != nil {
		t.Fatal(err)
	}
	if err := s.SetNativeID(k, "sess-3"); err != nil {
		t.Fatal(err)
	}
	if err := s.SetNativeID(k, ""); err != nil {
		t.Fatal(err)
	}
	if got, _ := s.Conversation(k); len(got) != 1 {
		t.Errorf("clearing the native id dropped the conversation: %v", got)
	}
}

func TestKeysAndForget(t *testing.T) {
	s := openTest(t, Options{})
	a := session.Key{Channel: "ch-a", Binding: "b-1"}
	b := session.Key{Channel: "ch-a", Binding: "b-2"}
	// Ids with separator-like bytes must not collide.
	odd := session.Key{Channel: "ch\x00a", Binding: "/b"}
	for _, k := range []session.Key{a, b, odd} {
		if err := s.AppendTurns(k, session.Turn{Role: session.RoleUser, Text: "x"}); err != nil {
			t.Fatal(err)
		}
		if err := s.SetNativeID(k, "n-"+k.Binding); err != nil {
			t.Fatal(err)
		}
	}
	keys, err := s.Keys()
	if err != nil {
		t.Fatal(err)
	}
	if len(keys) != 3 || !slices.Contains(keys, a) || !slices.Contains(keys, b) || !slices.Contains(keys, odd) {
		t.Fatalf("keys = %q", keys)
	}
	wA := channel.WatermarkKey{Key: a}
	wAThread := channel.WatermarkKey{Key: a, Thread: "m1"}
	wB := channel.WatermarkKey{Key: b}
	// A session key that extends a's must survive a's Forget.
	wLonger := channel.WatermarkKey{Key: session.Key{Channel: a.Channel, Binding: a.Binding + "x"}}
	for _, wk := range []channel.WatermarkKey{wA, wAThread, wB, wLonger} {
		if _, err := s.CommitWatermark(wk, "n", channel.Seen{Seq: 1}); err != nil {
			t.Fatal(err)
		}
	}

	if err := s.Forget(a); err != nil {
		t.Fatal(err)
	}
	if got, _ := s.Conversation(a); len(got) != 0 {
		t.Errorf("forgotten conversation has %d turns", len(got))
	}
	if n, _ := s.NativeID(a); n != "" {
		t.Errorf("forgotten native = %q", n)
	}
	for _, wk := range []channel.WatermarkKey{wA, wAThread} {
		if _, ok, _ := s.Watermark(wk); ok {
			t.Errorf("watermark %v survived Forget", wk)
		}
	}
	for _, wk := range []channel.WatermarkKey{wB, wLonger} {
		if _, ok, _ := s.Watermark(wk); !ok {
			t.Errorf("watermark %v of another session was dropped", wk)
		}
	}
	if n, _ := s.NativeID(b); n != "n-b-2" {
		t.Errorf("other key's native = %q", n)
	}
	keys, _ = s.Keys()
	if len(keys) != 2 || slices.Contains(keys, a) {
		t.Errorf("keys after forget = %q", keys)
	}
	// Forgetting an unknown key is fine.
	if err := s.Forget(session.Key{Channel: "nope", Binding: "nope"}); err != nil {
		t.Error(err)
	}
}

// FinishTurn writes the exchange and the watermarks together, or nothing.
func TestFinishTurnIsOneTransaction(t *testing.T) {
	s := openTest(t, Options{})
	k := session.Key{Channel: "ch", Binding: "b"}
	turns := []session.Turn{{Role: session.RoleUser, Text: "q", At: t0}, {Role: session.RoleAssistant, Text: "a", At: t0}}
	wk := channel.WatermarkKey{Key: k}
	thread := channel.WatermarkKey{Key: k, Thread: "r1"}
	before := s.Commits()
	if err := s.FinishTurn(k, Finish{Turns: turns, Native: "n1", SaveNative: true, Staged: map[channel.WatermarkKey]channel.Seen{wk: {Seq: 3}, thread: {Marks: channel.Unedited("q")}}}); err != nil {
		t.Fatal(err)
	}
	if n := s.Commits() - before; n != 1 {
		t.Fatalf("%d commits, want 1", n)
	}
	conv, _ := s.Conversation(k)
	w, _, _ := s.Watermark(wk)
	tw, _, _ := s.Watermark(thread)
	native, _ := s.NativeID(k)
	if len(conv) != 2 || w.Seq != 3 || w.Native != "n1" || len(tw.Marks) != 1 || native != "n1" {
		t.Fatalf("after FinishTurn: %d turns, native %q, %+v, %+v", len(conv), native, w, tw)
	}
	// A bad staged key refuses the whole turn.
	bad := map[channel.WatermarkKey]channel.Seen{{Key: session.Key{Channel: "ch"}}: {Seq: 9}}
	if err := s.FinishTurn(k, Finish{Turns: turns, Native: "n2", SaveNative: true, Staged: bad}); err == nil {
		t.Fatal("a watermark without a binding was accepted")
	}
	if conv, _ := s.Conversation(k); len(conv) != 2 {
		t.Fatalf("a refused turn appended: %d turns", len(conv))
	}
	if native, _ := s.NativeID(k); native != "n1" {
		t.Fatalf("a refused turn saved native %q", native)
	}
}
