package acp

import (
	"context"
	"testing"
)

// TestContextUsed: the context in use is what the agent's last
// usage_update said, per session; a compaction drops it; an unknown
// session has none.
func TestContextUsed(t *testing.T) {
	a := start(t, builtinSpec(t))
	native := newSession(t, a)
	if n := a.ContextUsed(native); n != 0 {
		t.Fatalf("before any prompt: %d in use", n)
	}
	long := "User: " + string(make([]byte, 4000))
	if _, err := a.Prompt(context.Background(), native, long, nil); err != nil {
		t.Fatal(err)
	}
	before := a.ContextUsed(native)
	if before < 1000 {
		t.Fatalf("after a 4,000-byte prompt: %d tokens in use, want about a quarter of its bytes", before)
	}
	if _, err := a.Prompt(context.Background(), native, "[[compact]] sum it up", nil); err != nil {
		t.Fatal(err)
	}
	if after := a.ContextUsed(native); after >= before {
		t.Fatalf("after a compaction: %d in use, before %d", after, before)
	}
	// The built-in agent's "/compact", as claude-agent-acp's slash command:
	// each one a compaction of its own, reported to the prompt's result.
	for i := range 2 {
		if _, err := a.Prompt(context.Background(), native, long, nil); err != nil {
			t.Fatal(err)
		}
		res, err := a.Prompt(context.Background(), native, "/compact", nil)
		if err != nil || !res.Compacted {
			t.Fatalf("/compact %d: compacted %v, %v", i+1, res.Compacted, err)
		}
		if n := a.ContextUsed(native); n >= 1000 {
			t.Fatalf("/compact %d left %d tokens in use", i+1, n)
		}
	}
	if n := a.ContextUsed("nope"); n != 0 {
		t.Fatalf("unknown session: %d", n)
	}
}
