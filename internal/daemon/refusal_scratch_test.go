package daemon

import (
	"path/filepath"
	"testing"

	"github.com/residentd/residentd/internal/config"
	"github.com/residentd/residentd/internal/session"
)

func TestScratchRefusedColdThenWarm(t *testing.T) {
	var rec string
	h := newHarness(t, func(c *config.Config) {
		rec = filepath.Join(c.StateDir, "record.jsonl")
		b := &c.Bindings[0]
		b.Args = append(b.Args, "--record", rec)
	})
	k := session.Key{Channel: "ch", Binding: "b-builtin"}
	reply(t, h.mention("ch", "b-builtin", "q0", "@agent zero"))
	if _, err := h.d.Fresh(k); err != nil {
		t.Fatal(err)
	}
	h.restart() // forget the listing
	if _, err := h.d.SetSessionOptions(k, map[string]string{"model": "gpt-9"}); err != nil {
		t.Fatalf("put: %v", err)
	}
	r1 := h.mention("ch", "b-builtin", "q1", "@agent one")
	t.Logf("turn1 err=%v", r1.err)
	if _, err := h.d.SetSessionOptions(k, map[string]string{}); err != nil {
		t.Fatal(err)
	}
	r2 := h.mention("ch", "b-builtin", "q2", "@agent two")
	t.Logf("turn2 shape=%s err=%v", r2.done.Shape, r2.err)
	ps := prompts(t, rec)
	t.Logf("last prompt: %q", ps[len(ps)-1])
}
