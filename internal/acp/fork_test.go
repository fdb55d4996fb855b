package acp

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
)

// TestForkSession: an agent that advertises session/fork opens a new
// session with the source's history, on another process than the one that
// made the source (read from the agent's saved state); the source goes on
// unchanged. An agent that does not advertise it says so.
func TestForkSession(t *testing.T) {
	ctx := context.Background()
	state := filepath.Join(t.TempDir(), "state")
	src := start(t, builtinSpec(t, "--state", state, "--fork"))
	if !src.CanFork() {
		t.Fatal("an agent started with --fork does not advertise session/fork")
	}
	native := newSession(t, src)
	for _, text := range []string{"one", "two"} {
		if _, err := src.Prompt(ctx, native, text, nil); err != nil {
			t.Fatal(err)
		}
	}
	other := start(t, builtinSpec(t, "--state", state, "--fork"))
	fork, err := other.ForkSession(ctx, native)
	if err != nil || fork == "" || fork == native {
		t.Fatalf("ForkSession = %q, %v", fork, err)
	}
	res, err := other.Prompt(ctx, fork, "three", nil)
	if err != nil || !strings.Contains(res.Text, "turn=3") {
		t.Fatalf("the fork's first reply %q (%v), want turn=3: it holds the source's two turns", res.Text, err)
	}
	res, err = src.Prompt(ctx, native, "three", nil)
	if err != nil || !strings.Contains(res.Text, "turn=3") {
		t.Fatalf("the source's next reply %q (%v), want turn=3: the fork's turn is not its own", res.Text, err)
	}
	if _, err := other.ForkSession(ctx, "nat-unknown"); err == nil {
		t.Fatal("a fork of an unknown session succeeded")
	}

	plain := start(t, builtinSpec(t, "--state", state))
	if plain.CanFork() {
		t.Fatal("an agent without --fork advertises session/fork")
	}
	if _, err := plain.ForkSession(ctx, native); err == nil {
		t.Fatal("an agent without --fork forked a session")
	}
}
