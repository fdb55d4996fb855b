package acp

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/residentd/residentd/apitype"
)

// TestV2Negotiated: the built-in agent answers v2 to a binding of protocol
// 2 or auto and v1 to one of 1, and to auto when it serves v1 only; a
// binding of 2 refuses an agent that serves v1 only.
func TestV2Negotiated(t *testing.T) {
	for _, tc := range []struct {
		protocol, agentProtocol string
		want                    int
	}{
		{ProtocolV1, "auto", 1}, {ProtocolV2, "auto", 2}, {ProtocolAuto, "auto", 2},
		{ProtocolAuto, "1", 1}, {ProtocolV2, "2", 2}, {ProtocolAuto, "2", 2},
	} {
		spec := builtinSpec(t, "--protocol", tc.agentProtocol)
		spec.Protocol = tc.protocol
		a := start(t, spec)
		if got := a.ProtocolVersion(); got != tc.want || a.V2() != (tc.want == 2) {
			t.Errorf("protocol %s, agent --protocol %s: version %d (v2 %v), want %d", tc.protocol, tc.agentProtocol, got, a.V2(), tc.want)
		}
		native := newSession(t, a)
		res, err := a.Prompt(context.Background(), native, "hello", nil)
		if err != nil || res.StopReason != "end_turn" || !strings.Contains(res.Text, "builtin turn=1") {
			t.Errorf("protocol %s/%s: prompt = %+v, %v", tc.protocol, tc.agentProtocol, res, err)
		}
		if res.Usage == nil || res.Usage.InputTokens == 0 {
			t.Errorf("protocol %s/%s: no usage: %+v", tc.protocol, tc.agentProtocol, res)
		}
	}
	spec := builtinSpec(t, "--protocol", "1")
	spec.Protocol = ProtocolV2
	if a, err := Start(context.Background(), spec, nil); err == nil {
		_ = a.Close()
		t.Fatal("a binding of protocol 2 started an agent that serves v1 only")
	} else if !errors.Is(err, ErrProtocol) {
		t.Fatalf("protocol 2 against a v1 agent: %v, want ErrProtocol", err)
	}
}

// TestV2TurnEndsAtIdle: over v2 a turn's end is its idle: the answer
// {messageId} ends nothing, each turn's usage is its own (not the sum of
// the turns before), and a state snapshot after it (an idle with no stop
// reason) is no new turn end.
func TestV2TurnEndsAtIdle(t *testing.T) {
	spec := builtinSpec(t)
	spec.Protocol = ProtocolV2
	a := start(t, spec)
	native := newSession(t, a)
	var c collector
	first, err := a.Prompt(context.Background(), native, "one", c.on)
	if err != nil {
		t.Fatal(err)
	}
	second, err := a.Prompt(context.Background(), native, "two, a longer prompt than the first one", nil)
	if err != nil {
		t.Fatal(err)
	}
	if first.Usage == nil || second.Usage == nil || second.Usage.InputTokens <= first.Usage.InputTokens {
		t.Fatalf("usage: first %+v second %+v", first.Usage, second.Usage)
	}
	if !strings.Contains(second.Text, "turn=2") {
		t.Fatalf("second turn's text %q", second.Text)
	}
	if n := count(c.kinds(), "agent_message_chunk"); n == 0 {
		t.Fatalf("first turn saw no message chunks: %v", c.kinds())
	}
}

// TestV2BackgroundItems: work a v2 agent lists after its idle keeps the
// process working; each item it lets be cancelled is cancelled alone
// (terminal/cancel, tool_call/cancel) and the next list leaves it out;
// one that ends by itself ends the work, and what the agent says about it
// comes between prompts (an agent run).
func TestV2BackgroundItems(t *testing.T) {
	spec := builtinSpec(t)
	spec.Protocol = ProtocolV2
	said := make(chan string, 16)
	spec.Between = func(native string, u Update) {
		if u.Kind == "agent_message_chunk" {
			said <- u.Text
		}
	}
	a := start(t, spec)
	native := newSession(t, a)
	if _, err := a.Prompt(context.Background(), native, "work [[bg:terminal:1h]] [[bg:tool_call:1h]] [[bg:subagent:300ms]]", nil); err != nil {
		t.Fatal(err)
	}
	items, state := a.Background(native)
	if state != stateIdle || len(items) != 3 {
		t.Fatalf("after the turn: state %q, items %+v; want idle with 3", state, items)
	}
	if w, _ := a.Working(); !w {
		t.Fatal("a process with background work listed is not working")
	}
	byType := map[string]BackgroundItem{}
	for _, it := range items {
		byType[it.Type] = it
	}
	if !byType["terminal"].Cancelable || !byType["tool_call"].Cancelable || byType["subagent"].Cancelable {
		t.Fatalf("cancel advertised: %+v", items)
	}
	if err := a.CancelBackground(context.Background(), native, "subagent", byType["subagent"].ID); !errors.Is(err, ErrNotCancelable) {
		t.Fatalf("cancel a subagent: %v, want ErrNotCancelable", err)
	}
	select {
	case s := <-said:
		if !strings.Contains(s, "background subagent") {
			t.Fatalf("said between prompts: %q", s)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the subagent's end was never said")
	}
	for _, typ := range []string{"terminal", "tool_call"} {
		if err := a.CancelBackground(context.Background(), native, typ, byType[typ].ID); err != nil {
			t.Fatalf("cancel %s: %v", typ, err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if !a.WaitIdle(ctx) {
		items, _ := a.Background(native)
		t.Fatalf("still working after every item ended: %+v", items)
	}
	if items, _ := a.Background(native); items == nil || len(items) != 0 {
		t.Fatalf("after the cancels the list is %+v, want reported and empty", items)
	}
	if err := a.CancelBackground(context.Background(), native, "terminal", byType["terminal"].ID); !errors.Is(err, ErrNotCancelable) {
		t.Fatalf("cancel an ended terminal: %v, want ErrNotCancelable", err)
	}
}

// TestV2SessionStatus: session/status says open for a session another
// live process has open, saved for one kept in --state, gone for one the
// agent does not know.
func TestV2SessionStatus(t *testing.T) {
	state := t.TempDir()
	spec := builtinSpec(t, "--state", state)
	spec.Protocol = ProtocolAuto
	one := start(t, spec)
	native := newSession(t, one)
	if _, err := one.Prompt(context.Background(), native, "keep me", nil); err != nil {
		t.Fatal(err)
	}
	two := start(t, spec)
	if !two.CanStatus() {
		t.Fatal("the built-in agent over v2 does not advertise session/status")
	}
	for _, tc := range []struct{ id, want string }{{native, StatusOpen}, {"nat-never", StatusGone}} {
		got, err := two.SessionStatus(context.Background(), tc.id)
		if err != nil || got != tc.want {
			t.Errorf("status of %s: %q, %v; want %q", tc.id, got, err, tc.want)
		}
	}
	if err := one.Close(); err != nil {
		t.Fatal(err)
	}
	if got, err := two.SessionStatus(context.Background(), native); err != nil || got != StatusSaved {
		t.Errorf("status after its process stopped: %q, %v; want saved", got, err)
	}
	if err := os.Remove(filepath.Join(state, native+".jsonl")); err != nil {
		t.Fatal(err)
	}
	if got, err := two.SessionStatus(context.Background(), native); err != nil || got != StatusGone {
		t.Errorf("status once its history is gone: %q, %v; want gone", got, err)
	}
}

// TestV2OwnWorkIsNoTurnsEnd: a prompt sent while the agent runs work of
// its own ([[state:D]]: a cycle after the turn) ends at its own idle, not
// at the idle that ends the agent's work (which comes before the agent
// takes the prompt in); while the agent waits for a person the session is
// requires_action and working, not idle.
func TestV2OwnWorkIsNoTurnsEnd(t *testing.T) {
	spec := builtinSpec(t)
	spec.Protocol = ProtocolV2
	running := make(chan struct{}, 4)
	spec.Between = func(native string, u Update) {
		if strings.Contains(string(u.Raw), `"state":"running"`) {
			running <- struct{}{}
		}
	}
	asked := make(chan string, 1)
	spec.Permission = "ask"
	var a *Agent
	spec.Ask = func(ctx context.Context, native string, _ apitype.ToolCall, _ []apitype.PermissionOption) string {
		_, state := a.Background(native)
		working, _ := a.Working()
		if !working {
			state += " (not working)"
		}
		asked <- state
		return "allow"
	}
	a = start(t, spec)
	native := newSession(t, a)
	if _, err := a.Prompt(context.Background(), native, "one [[state:1h]]", nil); err != nil {
		t.Fatal(err)
	}
	select {
	case <-running:
	case <-time.After(20 * time.Second):
		t.Fatal("the agent's own work never reported running")
	}
	if _, state := a.Background(native); state != stateRunning {
		t.Fatalf("state during the agent's own work: %q", state)
	}
	res, err := a.Prompt(context.Background(), native, "two [[permission:execute]]", nil)
	if err != nil || !strings.Contains(res.Text, "turn=2") || res.StopReason != "end_turn" {
		t.Fatalf("the prompt sent during the agent's own work: %+v, %v", res, err)
	}
	if got := <-asked; got != stateRequiresAction {
		t.Fatalf("while the agent waited for a person: %q, want requires_action and working", got)
	}
	if _, state := a.Background(native); state != stateIdle {
		t.Fatalf("after the turn: %q", state)
	}
}

// TestV2StateReading: how state_updates read, as the schema says: unknown
// (and a state of a newer version) keeps the last confirmed state;
// requires_action is work; an omitted or null background list is not
// reported and keeps the last list, [] is none; an item is cancelable
// where its terminal_update or tool_call_update advertised cancel.
func TestV2StateReading(t *testing.T) {
	a := &Agent{log: zap.NewNop(), working: map[string]bool{}, workCh: make(chan struct{}), v2sessions: map[string]*v2Session{}}
	apply := func(line string) {
		var u wireUpdate
		if err := json.Unmarshal([]byte(line), &u); err != nil {
			t.Fatal(err)
		}
		a.mu.Lock()
		defer a.mu.Unlock()
		if u.Kind == "state_update" {
			a.stateLocked("s", u.State, u.Background)
		} else {
			a.cancelCapLocked("s", &u)
		}
	}
	for _, step := range []struct {
		line    string
		state   string
		items   int
		working bool
	}{
		{`{"sessionUpdate":"state_update","state":"running"}`, stateRunning, -1, true},
		{`{"sessionUpdate":"state_update","state":"unknown"}`, stateRunning, -1, true},
		{`{"sessionUpdate":"state_update","state":"requires_action","background":null}`, stateRequiresAction, -1, true},
		{`{"sessionUpdate":"terminal_update","terminalId":"t1","capabilities":{"cancel":{}}}`, stateRequiresAction, -1, true},
		{`{"sessionUpdate":"state_update","state":"idle","stopReason":"end_turn","background":[{"type":"terminal","terminalId":"t1"},{"type":"subagent","sessionId":"c1"}]}`, stateIdle, 2, true},
		{`{"sessionUpdate":"state_update","state":"paused-in-a-newer-version"}`, stateIdle, 2, true},
		{`{"sessionUpdate":"state_update","state":"idle"}`, stateIdle, 2, true},
		{`{"sessionUpdate":"terminal_update","terminalId":"t1","exitStatus":{"exitCode":0},"capabilities":null}`, stateIdle, 2, true},
		{`{"sessionUpdate":"state_update","state":"idle","background":[]}`, stateIdle, 0, false},
	} {
		apply(step.line)
		items, state := a.Background("s")
		working, _ := a.Working()
		if state != step.state || (step.items >= 0 && len(items) != step.items) || (step.items < 0 && items != nil) || working != step.working {
			t.Fatalf("after %s: state %q items %+v working %v; want %q, %d items, working %v", step.line, state, items, working, step.state, step.items, step.working)
		}
		if len(items) == 2 && items[0].Cancelable == strings.Contains(step.line, "exitStatus") {
			t.Fatalf("after %s: terminal cancelable %v", step.line, items[0].Cancelable)
		}
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.v2sessions["s"].cancel["terminal:t1"] {
		t.Fatal("an exited terminal (capabilities null) still counts as cancelable")
	}
}
