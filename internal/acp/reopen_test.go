package acp

import (
	"context"
	"encoding/json"
	"errors"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"
)

// Every update the agent sends for a session it reopens is progress: each
// message a load replays, and nothing of the session's before or after.
func TestReopenProgress(t *testing.T) {
	state := t.TempDir()
	first := start(t, builtinSpec(t, "--state", state))
	native := newSession(t, first)
	for _, p := range []string{"one", "two"} {
		if _, err := first.Prompt(context.Background(), native, p, nil); err != nil {
			t.Fatal(err)
		}
	}
	if err := first.Close(); err != nil {
		t.Fatal(err)
	}
	second := start(t, builtinSpec(t, "--state", state, "--fault", "long-replay", "--replay", "50"))
	var n atomic.Int64
	if err := second.LoadSession(WithProgress(context.Background(), func() { n.Add(1) }), native); err != nil {
		t.Fatal(err)
	}
	if got := n.Load(); got != 50+2*2 { // the replayed messages, then the two kept turns' user and agent messages
		t.Fatalf("progress heard %d times, want 54: one per replayed message", got)
	}
	if _, err := second.Prompt(context.Background(), native, "three", nil); err != nil {
		t.Fatal(err)
	}
	if got := n.Load(); got != 54 {
		t.Fatalf("progress heard %d times after a prompt, want 54: only the reopen's updates count", got)
	}
	// A resume that reports how it gets on.
	third := start(t, builtinSpec(t, "--state", state, "--fault", "resume-slow", "--steps", "5", "--step", "1ms"))
	n.Store(0)
	if err := third.ResumeSession(WithProgress(context.Background(), func() { n.Add(1) }), native); err != nil {
		t.Fatal(err)
	}
	if got := n.Load(); got != 5 {
		t.Fatalf("progress heard %d times in a resume-slow, want its 5 steps", got)
	}
}

// An agent that answers a reopen saying it does not know the session
// (ACP's resource not found) is told apart from one that fails it
// otherwise.
func TestReopenOfAnUnknownSession(t *testing.T) {
	bare := start(t, builtinSpec(t))
	for name, call := range map[string]func(context.Context, string) error{"load": bare.LoadSession, "resume": bare.ResumeSession} {
		err := call(context.Background(), "nat-0000000000000000")
		if !errors.Is(err, ErrUnknownSession) || !errors.Is(err, ErrProtocol) {
			t.Fatalf("%s of an unknown session: %v, want ErrUnknownSession and ErrProtocol", name, err)
		}
	}
	failing := start(t, builtinSpec(t, "--fault", "restore-fail"))
	native := newSession(t, failing)
	if err := failing.LoadSession(context.Background(), native); !errors.Is(err, ErrProtocol) || errors.Is(err, ErrUnknownSession) {
		t.Fatalf("an induced load failure: %v, want ErrProtocol and not ErrUnknownSession", err)
	}
}

// A reopen the caller gives up on leaves the session routed: the agent may
// still be opening it, so Close sends session/close for it before the stop.
func TestGivenUpReopenIsClosed(t *testing.T) {
	state, record := t.TempDir(), filepath.Join(t.TempDir(), "record.jsonl")
	first := start(t, builtinSpec(t, "--state", state))
	native := newSession(t, first)
	if _, err := first.Prompt(context.Background(), native, "one", nil); err != nil {
		t.Fatal(err)
	}
	if err := first.Close(); err != nil {
		t.Fatal(err)
	}
	a := start(t, builtinSpec(t, "--state", state, "--record", record, "--fault", "resume-hang"))
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if err := a.ResumeSession(ctx, native); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("resume that never answers: %v, want the caller's deadline", err)
	}
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, l := range readRecord(t, record) {
		var m, s string
		_ = json.Unmarshal(l["method"], &m)
		_ = json.Unmarshal(l["session"], &s)
		if s == native {
			got = append(got, m)
		}
	}
	if len(got) != 2 || got[0] != "session/resume" || got[1] != "session/close" {
		t.Fatalf("the agent was asked %q of the session, want session/resume then session/close", got)
	}
}
