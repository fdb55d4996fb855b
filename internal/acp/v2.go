// ACP v2 beside the SDK's v1. The pinned Go SDK knows v1 only, so v2 is
// spoken around it: the initialize line the SDK writes is rewritten into
// v2's shape (capsWriter), the agent's v2 answer is rewritten into the v1
// shape the SDK reads (its capabilities kept here), a v2 permission request
// becomes the v1 request the SDK's handler answers (the answer has the same
// shape in both), and a prompt's v2 lifecycle is read here: session/prompt
// answers {messageId} at once, and the turn ends with a state_update idle
// that carries its stop reason and its own usage. The session requests
// residentd sends (new, resume, close, set_config_option, cancel) have the
// same shape in both versions. Requests v2 adds (terminal/cancel,
// tool_call/cancel, session/status) go out as raw JSON-RPC lines answered
// through the pump, as a prompt is.

package acp

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"

	sdk "github.com/coder/acp-go-sdk"
	"go.uber.org/zap"
)

// The protocol settings a binding may give (Spec.Protocol).
const (
	ProtocolV1   = "1"    // ACP v1 only (the default)
	ProtocolV2   = "2"    // ACP v2 only: an agent that answers another version fails to start
	ProtocolAuto = "auto" // offer v2 and take the version the agent answers
)

// Protocols lists the values Spec.Protocol takes.
var Protocols = []string{ProtocolV1, ProtocolV2, ProtocolAuto}

// clientInfo is who residentd says it is at initialize.
const clientInfo = `{"name":"residentd","version":"1"}`

// v2InitLine is the initialize request line for an offer of v2 (protocol
// 2 or auto) with JSON-RPC id: v2's shape, with, for auto, v1's fields
// beside it, so that an agent that knows only v1 reads a v1 request (ACP
// lets an agent answer a version it prefers) and one that knows v2 a v2
// request (extra fields are open in both schemas). elicitation is the
// capability the SDK's request carried (forms; none when nobody answers
// them), the same in both versions.
func v2InitLine(id json.RawMessage, mode string, elicitation json.RawMessage) []byte {
	caps := `{}`
	if present(elicitation) {
		caps = `{"elicitation":` + string(elicitation) + `}`
	}
	params := `{"protocolVersion":2,"info":` + clientInfo + `,"capabilities":` + caps + `}`
	if mode == ProtocolAuto {
		v1 := `"fs":{"readTextFile":true,"writeTextFile":true},"terminal":false,"session":` + SessionCapabilities + `,"subagents":` + subagentsCapability
		if present(elicitation) {
			v1 += `,"elicitation":` + string(elicitation)
		}
		params = `{"protocolVersion":2,"info":` + clientInfo + `,"capabilities":` + caps + `,"clientInfo":` + clientInfo +
			`,"clientCapabilities":{` + v1 + `}}`
	}
	return []byte(`{"jsonrpc":"2.0","id":` + string(id) + `,"method":"initialize","params":` + params + "}\n")
}

// v2Caps is what a v2 agent advertised at initialize that residentd reads.
type v2Caps struct {
	status bool // capabilities.session.status (unstable): session/status
}

// v2InitAnswer is an initialize answer as far as the version decides.
type v2InitAnswer struct {
	ID     json.RawMessage `json:"id"`
	Result *struct {
		ProtocolVersion int             `json:"protocolVersion"`
		Info            json.RawMessage `json:"info"`
		Capabilities    struct {
			Session *struct {
				Prompt *struct {
					Image           json.RawMessage `json:"image"`
					EmbeddedContext json.RawMessage `json:"embeddedContext"`
				} `json:"prompt"`
				Fork   json.RawMessage `json:"fork"`
				Status json.RawMessage `json:"status"`
				// SystemPrompt: v2's session.systemPrompt (unstable), v1's
				// sessionCapabilities.systemPrompt (sysprompt.go reads it).
				SystemPrompt json.RawMessage `json:"systemPrompt"`
			} `json:"session"`
			Meta json.RawMessage `json:"_meta"`
		} `json:"capabilities"`
		Meta json.RawMessage `json:"_meta"`
	} `json:"result"`
}

// present: a capability object is advertised (not omitted, not null).
func present(raw json.RawMessage) bool { return len(raw) > 0 && string(raw) != "null" }

// initAnswer reads the answer to the initialize request while one is
// offered v2: a v2 answer switches the connection to v2 and becomes the
// v1 answer the SDK reads (session/resume and session/close are part of
// v2's baseline; v2 has no session/load); a v1 answer goes on unchanged.
// It returns the line to pass on.
func (a *Agent) initAnswer(line []byte) []byte {
	var ans v2InitAnswer
	if json.Unmarshal(line, &ans) != nil || ans.Result == nil {
		if bytes.Contains(line, []byte(`"error"`)) && !bytes.Contains(line, []byte(`"method"`)) {
			a.initWait.Store(false) // the agent refused it: the SDK reports the error
		}
		return line
	}
	a.initWait.Store(false)
	a.protocol.Store(int32(ans.Result.ProtocolVersion))
	if ans.Result.ProtocolVersion < 2 {
		return line
	}
	a.v2.Store(true)
	session := map[string]any{"resume": map[string]any{}, "close": map[string]any{}}
	prompt := map[string]any{}
	if s := ans.Result.Capabilities.Session; s != nil {
		if s.Prompt != nil {
			prompt["image"] = present(s.Prompt.Image)
			prompt["embeddedContext"] = present(s.Prompt.EmbeddedContext)
		}
		if present(s.Fork) {
			session["fork"] = map[string]any{}
		}
		if present(s.SystemPrompt) {
			session["systemPrompt"] = s.SystemPrompt
		}
		a.v2caps.status = present(s.Status)
	}
	caps := map[string]any{"loadSession": false, "promptCapabilities": prompt, "sessionCapabilities": session}
	if present(ans.Result.Capabilities.Meta) {
		caps["_meta"] = ans.Result.Capabilities.Meta
	}
	result := map[string]any{"protocolVersion": ans.Result.ProtocolVersion, "agentCapabilities": caps, "authMethods": []any{}}
	if present(ans.Result.Info) {
		result["agentInfo"] = ans.Result.Info
	}
	if present(ans.Result.Meta) {
		result["_meta"] = ans.Result.Meta
	}
	out, err := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": ans.ID, "result": result})
	if err != nil {
		return line
	}
	return append(out, '\n')
}

// V2 reports whether the agent speaks ACP v2 on this connection.
func (a *Agent) V2() bool { return a.v2.Load() }

// ProtocolVersion is the ACP version the agent answered at initialize.
func (a *Agent) ProtocolVersion() int { return int(a.protocol.Load()) }

// v2Permission is session/request_permission as v2 sends it.
type v2Permission struct {
	ID     json.RawMessage `json:"id"`
	Method string          `json:"method"`
	Params struct {
		SessionID string          `json:"sessionId"`
		Title     string          `json:"title"`
		Subject   json.RawMessage `json:"subject"`
		Options   json.RawMessage `json:"options"`
		Meta      json.RawMessage `json:"_meta"`
	} `json:"params"`
}

// v2In rewrites a line of a v2 agent into the v1 line the SDK reads, where
// the two differ for the SDK: a permission request names its tool call as
// a subject (a tool call, or a command with its terminal or tool call); a
// session config option is named by configId (v1: id).
func v2In(line []byte) []byte {
	if bytes.Contains(line, []byte(`"configOptions"`)) {
		return renameOptionIDs(line, "configId", "id")
	}
	if !bytes.Contains(line, []byte(`"session/request_permission"`)) {
		return line
	}
	var p v2Permission
	if json.Unmarshal(line, &p) != nil || p.Method != sdk.ClientMethodSessionRequestPermission {
		return line
	}
	var subj struct {
		Type       string          `json:"type"`
		ToolCall   json.RawMessage `json:"toolCall"`
		Command    string          `json:"command"`
		Cwd        string          `json:"cwd"`
		ToolCallID string          `json:"toolCallId"`
		TerminalID string          `json:"terminalId"`
	}
	_ = json.Unmarshal(p.Params.Subject, &subj)
	tc := map[string]any{}
	if subj.Type == "tool_call" && present(subj.ToolCall) {
		_ = json.Unmarshal(subj.ToolCall, &tc)
	} else {
		id := subj.ToolCallID
		if id == "" {
			id = "terminal:" + subj.TerminalID
		}
		tc = map[string]any{"toolCallId": id, "kind": "execute", "rawInput": map[string]any{"command": subj.Command, "cwd": subj.Cwd}}
	}
	if _, ok := tc["title"]; !ok && p.Params.Title != "" {
		tc["title"] = p.Params.Title
	}
	params := map[string]any{"sessionId": p.Params.SessionID, "toolCall": tc, "options": p.Params.Options}
	if present(p.Params.Meta) {
		params["_meta"] = p.Params.Meta
	}
	out, err := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": p.ID, "method": p.Method, "params": params})
	if err != nil {
		return line
	}
	return append(out, '\n')
}

// renameOptionIDs renames the key from to to in each config option a line
// lists (an answer's result.configOptions, a config_option_update's
// params.update.configOptions), where to is not set already.
func renameOptionIDs(line []byte, from, to string) []byte {
	var m map[string]any
	if json.Unmarshal(line, &m) != nil {
		return line
	}
	lists := []any{}
	if r, ok := m["result"].(map[string]any); ok {
		lists = append(lists, r["configOptions"])
	}
	if p, ok := m["params"].(map[string]any); ok {
		if u, ok := p["update"].(map[string]any); ok {
			lists = append(lists, u["configOptions"])
		}
	}
	changed := false
	for _, l := range lists {
		opts, _ := l.([]any)
		for _, o := range opts {
			opt, ok := o.(map[string]any)
			if _, has := opt[to]; ok && !has && opt[from] != nil {
				opt[to] = opt[from]
				delete(opt, from)
				changed = true
			}
		}
	}
	if !changed {
		return line
	}
	out, err := json.Marshal(m)
	if err != nil {
		return line
	}
	return append(out, '\n')
}

// setOptionLine gives session/set_config_option v2's shape: the value's
// type (id for a select's value, boolean), which v1 leaves out for ids.
func setOptionLine(p []byte) []byte {
	var m map[string]any
	if json.Unmarshal(p, &m) != nil {
		return p
	}
	params, ok := m["params"].(map[string]any)
	if !ok || params["type"] != nil {
		return p
	}
	switch params["value"].(type) {
	case string:
		params["type"] = "id"
	case bool:
		params["type"] = "boolean"
	default:
		return p
	}
	out, err := json.Marshal(m)
	if err != nil {
		return p
	}
	return append(out, '\n')
}

// rawAnswer is the answer to a request sent with call.
type rawAnswer struct {
	result json.RawMessage
	err    error
}

// rawReply is a JSON-RPC response as call reads it.
type rawReply struct {
	ID     json.RawMessage   `json:"id"`
	Method string            `json:"method"`
	Result json.RawMessage   `json:"result"`
	Error  *sdk.RequestError `json:"error"`
}

// call sends method with params as a raw JSON-RPC request, numbered from
// the prompts' range (prompt.go), and returns its answer's result.
func (a *Agent) call(ctx context.Context, method string, params any) (json.RawMessage, error) {
	p, err := json.Marshal(params)
	if err != nil {
		return nil, fmt.Errorf("acp: %s: encode: %w", method, err)
	}
	id := a.promptID.Add(1)
	ch := make(chan rawAnswer, 1)
	a.mu.Lock()
	a.calls[id] = ch
	a.callsN.Store(int32(len(a.calls)))
	a.mu.Unlock()
	defer func() {
		a.mu.Lock()
		delete(a.calls, id)
		a.callsN.Store(int32(len(a.calls)))
		a.mu.Unlock()
	}()
	line := []byte(`{"jsonrpc":"2.0","id":` + strconv.FormatUint(id, 10) + `,"method":` + strconv.Quote(method) + `,"params":` + string(p) + "}\n")
	if err := a.in.writeLine(line); err != nil {
		return nil, a.callErr(ctx, method, err)
	}
	select {
	case ans := <-ch:
		if ans.err != nil {
			return nil, fmt.Errorf("acp: %s: %w: %w", method, ErrProtocol, ans.err)
		}
		return ans.result, nil
	case <-a.done:
		return nil, fmt.Errorf("acp: %s: %w", method, a.exitedErr())
	case <-ctx.Done():
		return nil, fmt.Errorf("acp: %s: %w", method, ctx.Err())
	}
}

// takeRaw hands line to the call it answers, if it answers one, and
// reports whether it did. Only the pump calls it.
func (a *Agent) takeRaw(line []byte) bool {
	var rep rawReply
	if json.Unmarshal(line, &rep) != nil || rep.Method != "" {
		return false
	}
	n := parseID(rep.ID)
	if n == 0 {
		return false
	}
	a.mu.Lock()
	ch, ok := a.calls[n]
	a.mu.Unlock()
	if !ok {
		return false
	}
	if rep.Error != nil {
		ch <- rawAnswer{err: rep.Error}
	} else {
		ch <- rawAnswer{result: rep.Result}
	}
	return true
}

// v2Turn is a prompt sent to a v2 agent: whether its {messageId} came,
// and, for an agent that sends no user message naming that id, whether
// the session was idle at the answer and ran since.
type v2Turn struct {
	native    string
	acked     bool
	messageID string
	byAnswer  bool // the agent sent no user message of the prompt's id before its answer
	idleAtAck bool
	ran       bool
}

// v2Sent registers prompt id of session native with a v2 agent.
func (a *Agent) v2Sent(id uint64, native string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.v2turns[id] = &v2Turn{native: native}
}

// v2Ack reads the answer to a prompt sent to a v2 agent: an error ends the
// prompt at once; {messageId} names the user message the prompt became,
// whose turn's end (see v2Ended) ends the prompt — now, when it came
// before the answer (the schema fixes no order between the two). It
// reports whether line was one.
func (a *Agent) v2Ack(line []byte) bool {
	var rep rawReply
	if json.Unmarshal(line, &rep) != nil || rep.Method != "" {
		return false
	}
	n := parseID(rep.ID)
	a.mu.Lock()
	t, ok := a.v2turns[n]
	if !ok || n == 0 {
		a.mu.Unlock()
		return false
	}
	if rep.Error != nil {
		delete(a.v2turns, n)
		a.mu.Unlock()
		a.answer(n, promptAnswer{err: rep.Error})
		return true
	}
	var res struct {
		MessageID string `json:"messageId"`
	}
	_ = json.Unmarshal(rep.Result, &res)
	s := a.v2sessionLocked(t.native)
	t.acked, t.messageID = true, res.MessageID
	t.byAnswer = res.MessageID == "" || s.lastUser != res.MessageID
	t.idleAtAck = s.state != stateRunning && s.state != stateRequiresAction
	var end *promptAnswer
	if !t.byAnswer && s.end != nil {
		end = s.end
		delete(a.v2turns, n)
	}
	a.mu.Unlock()
	if end != nil {
		a.answer(n, *end)
	}
	return true
}

// v2Forget drops prompt id's v2 state (it returned).
func (a *Agent) v2Forget(id uint64) {
	a.mu.Lock()
	delete(a.v2turns, id)
	a.mu.Unlock()
}

// v2Ended follows a session's turns as a v2 agent reports them and ends
// the prompt whose turn ended. A prompt becomes a user message (a
// user_message or user_message_chunk with the messageId its answer
// names); that message's turn ends at the first idle with a stop reason
// after it, once the session ran (running, requires_action) since or was
// running when it came. So an
// idle that ends work of the agent's own before the prompt was taken in
// ends no prompt, and neither does a snapshot (an idle with no stop
// reason: a background list changed, a resume) nor a repeated idle,
// whose usage is not counted again. For an agent that names no user
// message, the prompt ends at the first idle with a stop reason after its
// answer, once the session ran since (or was idle at the answer).
func (a *Agent) v2Ended(id string, u *wireUpdate) {
	a.mu.Lock()
	s := a.v2sessionLocked(id)
	var t *v2Turn
	var n uint64
	for k, x := range a.v2turns {
		if x.native == id {
			n, t = k, x
		}
	}
	done := false
	var ans promptAnswer
	switch {
	case (u.Kind == "user_message" || u.Kind == "user_message_chunk") && u.MessageID != "":
		if u.MessageID != s.lastUser {
			// Its turn may have started first (codex-acp reports running
			// before the user message).
			s.lastUser, s.end = u.MessageID, nil
			s.ranSince = s.state == stateRunning || s.state == stateRequiresAction
		}
	case u.Kind != "state_update" || u.State == nil:
	case u.State.State == stateRunning || u.State.State == stateRequiresAction:
		s.ranSince = true
		if t != nil && t.acked {
			t.ran = true
		}
	case u.State.State == stateIdle && u.StopReason != nil:
		ans = idleAnswer(u)
		if s.ranSince && s.end == nil && s.lastUser != "" {
			s.end = &ans
			done = t != nil && t.acked && !t.byAnswer && t.messageID == s.lastUser
		}
		if t != nil && t.acked && t.byAnswer && (t.ran || t.idleAtAck) {
			done = true
		}
	}
	if done {
		delete(a.v2turns, n)
	}
	a.mu.Unlock()
	if done {
		a.answer(n, ans)
	}
}

// idleAnswer is the prompt answer an idle state_update stands for: its stop
// reason, its turn's usage and _meta, or, for stop reason error, the
// JSON-RPC error it carries.
func idleAnswer(u *wireUpdate) promptAnswer {
	var idle struct {
		Usage *sdk.Usage        `json:"usage"`
		Meta  map[string]any    `json:"_meta"`
		Error *sdk.RequestError `json:"error"`
	}
	_ = json.Unmarshal(u.raw, &idle)
	if *u.StopReason == "error" {
		if idle.Error == nil {
			idle.Error = &sdk.RequestError{Code: -32603, Message: "the agent ended the turn with stop reason error"}
		}
		return promptAnswer{err: idle.Error}
	}
	return promptAnswer{resp: sdk.PromptResponse{StopReason: sdk.StopReason(*u.StopReason), Usage: idle.Usage, Meta: idle.Meta}}
}

// Work states of a session (state_update's state).
const (
	stateRunning        = "running"
	stateIdle           = "idle"
	stateRequiresAction = "requires_action"
	stateUnknown        = "unknown"
)

// BackgroundItem is one piece of work a v2 agent lists as still running
// in a session: a terminal, a tool call or a subagent session, and whether
// the agent lets it be cancelled on its own (capabilities.cancel of its
// terminal_update or tool_call_update).
type BackgroundItem struct {
	Type       string `json:"type"` // terminal, tool_call, subagent, or a type of a newer version
	ID         string `json:"id"`   // its terminalId, toolCallId or sessionId
	Cancelable bool   `json:"cancelable"`
}

// v2Session is what a v2 agent said of one session's work.
type v2Session struct {
	state string // the last confirmed state: running, idle, requires_action ("" before any)
	// lastUser is the newest user message's id, ranSince whether the
	// session ran since it, end the idle that ended its turn (see v2Ended).
	lastUser   string
	ranSince   bool
	end        *promptAnswer
	background []BackgroundItem
	reported   bool            // the agent listed background work for it (on every update from then on)
	cancel     map[string]bool // "type:id" -> the agent advertises cancel for it
}

// v2sessionLocked is native's record, made on first use; a.mu is held.
func (a *Agent) v2sessionLocked(native string) *v2Session {
	s := a.v2sessions[native]
	if s == nil {
		s = &v2Session{cancel: map[string]bool{}}
		a.v2sessions[native] = s
	}
	return s
}

// wireBackground is an item of a state_update's background list.
type wireBackground struct {
	Type       string `json:"type"`
	TerminalID string `json:"terminalId"`
	ToolCallID string `json:"toolCallId"`
	SessionID  string `json:"sessionId"`
}

func (w wireBackground) id() string {
	switch w.Type {
	case "terminal":
		return w.TerminalID
	case "tool_call":
		return w.ToolCallID
	}
	return w.SessionID
}

// stateLocked follows a state_update of session id: running and
// requires_action (waiting for a person) are work, idle is not, unknown
// (and a state of a newer version) keeps the last confirmed one; the
// background list, when the update carries one (omitted or null: not
// reported, [] none), is work still running after the turn. Either keeps
// the process from the idle reaper and eviction (up to background_limit).
// The words of the v2 Preview some agents sent (working, busy) count as
// running. a.mu is held.
func (a *Agent) stateLocked(id string, st *wireState, background json.RawMessage) {
	s := a.v2sessionLocked(id)
	switch strings.ToLower(st.State) {
	case stateRunning, "working", "busy", "background":
		s.state = stateRunning
	case stateRequiresAction:
		s.state = stateRequiresAction
	case stateIdle:
		s.state = stateIdle
	}
	if present(background) {
		var items []wireBackground
		if err := json.Unmarshal(background, &items); err == nil {
			s.reported = true
			s.background = s.background[:0]
			for _, it := range items {
				key := it.Type + ":" + it.id()
				s.background = append(s.background, BackgroundItem{Type: it.Type, ID: it.id(), Cancelable: s.cancel[key]})
			}
		} else {
			a.log.Debug("a state_update's background list could not be read", zap.String("session", id), zap.Error(err))
		}
	}
	if s.state == stateRunning || s.state == stateRequiresAction || len(s.background) > 0 {
		a.working["state:"+id] = true
	} else {
		delete(a.working, "state:"+id)
	}
	a.workChangedLocked()
}

// cancelCapLocked notes whether a terminal_update or tool_call_update of
// session id advertises cancel for its item (capabilities.cancel): an
// update that names capabilities sets it, null clears it. a.mu is held.
func (a *Agent) cancelCapLocked(id string, u *wireUpdate) {
	if !present(u.Capabilities) && string(u.Capabilities) != "null" {
		return
	}
	var caps struct {
		Cancel json.RawMessage `json:"cancel"`
	}
	_ = json.Unmarshal(u.Capabilities, &caps)
	typ, item := "tool_call", u.ToolCallID
	if u.Kind == "terminal_update" {
		typ, item = "terminal", u.TerminalID
	}
	s := a.v2sessionLocked(id)
	key := typ + ":" + item
	if present(caps.Cancel) {
		s.cancel[key] = true
	} else {
		delete(s.cancel, key)
	}
	for i := range s.background {
		if s.background[i].Type+":"+s.background[i].ID == key {
			s.background[i].Cancelable = s.cancel[key]
		}
	}
}

// Background is the work session native's agent last listed as still
// running (nil when it never listed any) and the session's last confirmed
// state ("" when the agent reported none).
func (a *Agent) Background(native string) ([]BackgroundItem, string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	s := a.v2sessions[native]
	if s == nil {
		return nil, ""
	}
	if !s.reported {
		return nil, s.state
	}
	return append([]BackgroundItem{}, s.background...), s.state
}

// ErrNotCancelable: the item is not listed, or the agent does not let it be
// cancelled on its own.
var ErrNotCancelable = errors.New("the agent lists no such background item that it lets be cancelled")

// CancelBackground asks the agent to cancel one item of session native's
// background work (terminal/cancel, tool_call/cancel) where it advertises
// cancel for it; the agent's next state_update lists what still runs.
func (a *Agent) CancelBackground(ctx context.Context, native, typ, id string) error {
	a.mu.Lock()
	s := a.v2sessions[native]
	ok := s != nil && s.cancel[typ+":"+id]
	a.mu.Unlock()
	if !ok {
		return fmt.Errorf("acp: cancel %s %q of session %q: %w", typ, id, native, ErrNotCancelable)
	}
	method, params := "terminal/cancel", map[string]any{"sessionId": native, "terminalId": id}
	if typ == "tool_call" {
		method, params = "tool_call/cancel", map[string]any{"sessionId": native, "toolCallId": id}
	}
	if _, err := a.call(ctx, method, params); err != nil {
		return fmt.Errorf("acp: cancel %s %q of session %q: %w", typ, id, native, err)
	}
	return nil
}

// Session statuses session/status answers (unstable), and StatusGone for
// a session the agent does not know (-32002).
const (
	StatusOpen  = "open"  // the agent has it in memory, for some connection
	StatusSaved = "saved" // the agent knows it and can resume it
	StatusGone  = "gone"  // the agent does not know it
)

// CanStatus reports whether the agent serves session/status (v2's unstable
// session.status capability).
func (a *Agent) CanStatus() bool { return a.v2.Load() && a.v2caps.status }

// SessionStatus asks the agent about session native without opening it:
// StatusOpen, StatusSaved, StatusGone, or a status of a newer version.
func (a *Agent) SessionStatus(ctx context.Context, native string) (string, error) {
	if !a.CanStatus() {
		return "", fmt.Errorf("acp: session/status %q: the agent does not advertise it", native)
	}
	res, err := a.call(ctx, "session/status", map[string]any{"sessionId": native})
	if err != nil {
		if re := new(sdk.RequestError); errors.As(err, &re) && re.Code == -32002 {
			return StatusGone, nil
		}
		return "", fmt.Errorf("acp: session/status %q: %w", native, err)
	}
	var st struct {
		Status string `json:"status"`
	}
	if err := json.Unmarshal(res, &st); err != nil || st.Status == "" {
		return "", fmt.Errorf("acp: session/status %q: the answer names no status: %s", native, res)
	}
	return st.Status, nil
}
