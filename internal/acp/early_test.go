package acp

import (
	"context"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
)

const neverOpened = "dropping session/update for a session this agent never opened"

// observed starts spec with a debug logger the test reads; saw is closed
// by the first entry whose message is msg.
func observed(t *testing.T, spec Spec, msg string) (a *Agent, logs *observer.ObservedLogs, saw <-chan struct{}) {
	t.Helper()
	core, logs := observer.New(zapcore.DebugLevel)
	ch := make(chan struct{})
	var once sync.Once
	log := zap.New(core, zap.Hooks(func(e zapcore.Entry) error {
		if e.Message == msg {
			once.Do(func() { close(ch) })
		}
		return nil
	}))
	a, err := Start(context.Background(), spec, log)
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(func() { _ = a.Close() })
	return a, logs, ch
}

// An update the agent sends for a new session before its session/new
// reply is held and then routed to that session, with no warning.
func TestUpdateBeforeSessionNewIsHeld(t *testing.T) {
	a, logs, _ := observed(t, builtinSpec(t, "--fault", "early-update"), "")
	native := newSession(t, a)
	// The SDK hands over the notifications sent before a response first, so
	// the early update has been routed by now: outside a prompt, it is
	// dropped at debug level as any update between turns is.
	routed := logs.FilterMessage("dropping session/update outside a prompt").FilterField(zap.String("session", native)).All()
	if len(routed) != 1 || routed[0].ContextMap()["kind"] != "available_commands_update" {
		t.Fatalf("the early update was not routed to %s: %+v", native, logs.All())
	}
	if _, err := a.Prompt(context.Background(), native, "hello", nil); err != nil {
		t.Fatal(err)
	}
	if n := logs.FilterMessage(neverOpened).Len(); n != 0 {
		t.Fatalf("%d false warnings about an unopened session", n)
	}
}

// An update for a session id that never comes is dropped with the warning,
// once the hold passes.
func TestUpdateForUnknownSessionWarnsAfterTheHold(t *testing.T) {
	spec := builtinSpec(t)
	spec.EarlyHold = 20 * time.Millisecond
	a, logs, saw := observed(t, spec, neverOpened)
	native := newSession(t, a)
	res, err := a.Prompt(context.Background(), native, "[[fault:unknown-session-update]]", nil)
	if err != nil || res.StopReason != "end_turn" {
		t.Fatalf("prompt: %+v, %v", res, err)
	}
	select {
	case <-saw:
	case <-time.After(30 * time.Second):
		t.Fatalf("no warning for the unknown session: %+v", logs.All())
	}
	w := logs.FilterMessage(neverOpened).All()
	if len(w) != 1 || w[0].ContextMap()["session"] != "nat-unknown" || w[0].ContextMap()["updates"] != int64(1) {
		t.Fatalf("warning %+v", w)
	}
}
