// ACP v2 for the built-in agent. The agent is written against the Go SDK,
// which speaks v1; a client that asks for v2 at initialize (--protocol
// auto or 2) is served v2 by a shim on the agent's stdin and stdout: the
// v2 initialize becomes the v1 one the SDK reads and its answer v2's; a
// session/prompt is answered {messageId} at once (after its user_message,
// then state running) and the SDK's answer becomes the turn's idle
// state_update, with its stop reason, its own usage and the background
// list; v1-only updates take their v2 shape (tool_call is a
// tool_call_update, chunks carry a messageId, plan and mode updates are
// not sent); a permission request names its tool call as its subject and
// the session is requires_action until the answer. terminal/cancel,
// tool_call/cancel and session/status are answered here.

package agent

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	acp "github.com/coder/acp-go-sdk"
)

// The --protocol values.
const (
	protocolAuto = "auto"
	protocolV1   = "1"
	protocolV2   = "2"
)

// v2Prefix marks the ids the shim gives the prompts it forwards to the SDK.
const v2Prefix = "v2prompt-"

type v2shim struct {
	b       *builtin
	mode    string
	on      atomic.Bool
	decided atomic.Bool // the initialize went by: on says which version
	out     io.Writer   // the process's stdout

	mu      sync.Mutex
	initID  string               // the initialize request's id, as sent
	prompts map[string]v2pending // forwarded id -> the client's prompt
	asks    map[string]string    // permission requests waiting: id -> session
	n       int
}

type v2pending struct {
	id      json.RawMessage // the client's id
	session string
	message string // the messageId the answer gave
}

// bgItem is one piece of background work a v2 client sees listed: a
// terminal, a tool call or a subagent session ([[bg:TYPE:D]]).
type bgItem struct {
	typ, id string
	w       *bgWork
}

// key is how the wire names the item in a background list.
func (it bgItem) wire() map[string]any {
	switch it.typ {
	case "terminal":
		return map[string]any{"type": "terminal", "terminalId": it.id}
	case "tool_call":
		return map[string]any{"type": "tool_call", "toolCallId": it.id}
	}
	return map[string]any{"type": "subagent", "sessionId": it.id}
}

// reader is stdin as the SDK reads it: in v2, translated line by line,
// read only as the SDK reads (a stalled reader leaves stdin unread).
func (s *v2shim) reader(stdin io.Reader) io.Reader {
	if s.mode == protocolV1 {
		return stdin
	}
	return &shimReader{s: s, br: bufio.NewReaderSize(stdin, 64<<10)}
}

type shimReader struct {
	s       *v2shim
	br      *bufio.Reader
	pending []byte
	err     error
	raw     bool // v1 was chosen: bytes pass as they come, no line read whole
}

func (r *shimReader) Read(p []byte) (int, error) {
	if r.raw && len(r.pending) == 0 {
		// As the agent reads stdin without the shim: a read takes what
		// is there, so an agent that stops reading leaves the pipe full.
		return r.br.Read(p)
	}
	for len(r.pending) == 0 {
		if r.err != nil {
			return 0, r.err
		}
		line, err := r.br.ReadBytes('\n')
		r.err = err
		if len(line) > 0 {
			r.pending = r.s.in(line)
			if !r.s.on.Load() && r.s.decided.Load() {
				r.raw = true
			}
		}
	}
	n := copy(p, r.pending)
	r.pending = r.pending[n:]
	return n, nil
}

// message is a JSON-RPC line as the shim reads it.
type message struct {
	ID     json.RawMessage `json:"id"`
	Method string          `json:"method"`
	Params json.RawMessage `json:"params"`
	Result json.RawMessage `json:"result"`
	Error  json.RawMessage `json:"error"`
}

// in translates one line from the client; nil drops it (answered here).
func (s *v2shim) in(line []byte) []byte {
	var m message
	if json.Unmarshal(line, &m) != nil {
		return line
	}
	if m.Method == "initialize" {
		defer s.decided.Store(true)
		return s.initialize(m, line)
	}
	if !s.on.Load() {
		return line
	}
	switch m.Method {
	case acp.AgentMethodSessionPrompt:
		return s.prompt(m, line)
	case acp.AgentMethodSessionSetConfigOption:
		if s.setSessionMode(m) {
			return nil
		}
		return setOptionV1(line)
	case "terminal/cancel", "tool_call/cancel":
		s.cancelItem(m)
		return nil
	case "session/status":
		s.status(m)
		return nil
	case "":
		s.mu.Lock()
		sid, asked := s.asks[string(m.ID)]
		delete(s.asks, string(m.ID))
		s.mu.Unlock()
		if asked {
			// The person answered: the turn runs again.
			_ = s.b.state(sid, "running", nil)
		}
	}
	return line
}

// initialize switches to v2 for a client that asks for it (and --protocol
// allows it), handing the SDK the v1 request it means.
func (s *v2shim) initialize(m message, line []byte) []byte {
	var p struct {
		ProtocolVersion int             `json:"protocolVersion"`
		Info            json.RawMessage `json:"info"`
		ClientInfo      json.RawMessage `json:"clientInfo"`
	}
	_ = json.Unmarshal(m.Params, &p)
	if p.ProtocolVersion < 2 {
		if s.mode == protocolV2 {
			s.write(map[string]any{"jsonrpc": "2.0", "id": m.ID, "error": map[string]any{"code": -32022, "message": "Unsupported protocol version",
				"data": map[string]any{"requested": p.ProtocolVersion, "supported": []int{2}}}})
			return nil
		}
		return line
	}
	s.on.Store(true)
	s.mu.Lock()
	s.initID = string(m.ID)
	s.mu.Unlock()
	params := map[string]any{"protocolVersion": 1, "clientCapabilities": map[string]any{}}
	if len(p.Info) > 0 {
		params["clientInfo"] = p.Info
	}
	return encode(map[string]any{"jsonrpc": "2.0", "id": m.ID, "method": "initialize", "params": params})
}

// prompt answers a v2 prompt at once — its user_message, the answer with
// its messageId, state running — and forwards it to the SDK under an id
// of the shim's, whose answer becomes the turn's idle (out).
func (s *v2shim) prompt(m message, line []byte) []byte {
	var p struct {
		SessionID string          `json:"sessionId"`
		Prompt    json.RawMessage `json:"prompt"`
	}
	if json.Unmarshal(m.Params, &p) != nil {
		return line
	}
	s.mu.Lock()
	s.n++
	fwd, msg := v2Prefix+strconv.Itoa(s.n), fmt.Sprintf("msg-%d", s.n)
	s.prompts[fwd] = v2pending{id: m.ID, session: p.SessionID, message: msg}
	s.mu.Unlock()
	s.b.endCycle(p.SessionID)
	s.b.setMessage(p.SessionID, msg+"-reply")
	_ = s.b.sendRaw(context.Background(), p.SessionID, map[string]any{"sessionUpdate": "user_message", "messageId": msg, "content": p.Prompt})
	s.write(map[string]any{"jsonrpc": "2.0", "id": m.ID, "result": map[string]any{"messageId": msg}})
	_ = s.b.state(p.SessionID, "running", nil)
	var req map[string]any
	if json.Unmarshal(line, &req) != nil {
		return line
	}
	req["id"] = fwd
	return encode(req)
}

// cancelItem answers terminal/cancel and tool_call/cancel: the item ends,
// cancelled, and the answer follows its end and the new list.
func (s *v2shim) cancelItem(m message) {
	var p struct {
		SessionID  string `json:"sessionId"`
		TerminalID string `json:"terminalId"`
		ToolCallID string `json:"toolCallId"`
	}
	_ = json.Unmarshal(m.Params, &p)
	typ, id := "terminal", p.TerminalID
	if m.Method == "tool_call/cancel" {
		typ, id = "tool_call", p.ToolCallID
	}
	s.b.record(map[string]any{"method": m.Method, "session": p.SessionID, "item": id})
	if !s.b.cancelItem(p.SessionID, typ, id) {
		s.write(map[string]any{"jsonrpc": "2.0", "id": m.ID, "error": map[string]any{"code": -32002, "message": "Resource not found: no such " + typ + " running",
			"data": map[string]any{"sessionId": p.SessionID}}})
		return
	}
	s.write(map[string]any{"jsonrpc": "2.0", "id": m.ID, "result": map[string]any{}})
}

// status answers session/status (unstable): open when this process has
// the session in memory or another live one marked it open in --state,
// saved when --state keeps it, else -32002.
func (s *v2shim) status(m message) {
	var p struct {
		SessionID string `json:"sessionId"`
	}
	_ = json.Unmarshal(m.Params, &p)
	st := s.b.sessionStatus(p.SessionID)
	s.b.record(map[string]any{"method": "session/status", "session": p.SessionID, "status": st})
	if st == "" {
		s.write(map[string]any{"jsonrpc": "2.0", "id": m.ID, "error": map[string]any{"code": -32002, "message": "Resource not found",
			"data": map[string]any{"sessionId": p.SessionID}}})
		return
	}
	s.write(map[string]any{"jsonrpc": "2.0", "id": m.ID, "result": map[string]any{"status": st}})
}

// write sends one message of the shim's own, between the SDK's.
func (s *v2shim) write(v any) { _, _ = s.b.out.Write(encode(v)) }

func encode(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		return nil
	}
	return append(b, '\n')
}

// Write is stdout as the SDK and the agent write it (one message per
// write): in v2, each translated.
func (s *v2shim) Write(p []byte) (int, error) {
	if !s.on.Load() {
		return s.out.Write(p)
	}
	out := s.outLine(p)
	if out == nil {
		return len(p), nil
	}
	if _, err := s.out.Write(out); err != nil {
		return 0, err
	}
	return len(p), nil
}

// outLine translates one line to the client; nil drops it.
func (s *v2shim) outLine(p []byte) []byte {
	var m message
	if json.Unmarshal(p, &m) != nil {
		return p // a fault's garbage goes as it is
	}
	switch {
	case m.Method == "" && len(m.ID) > 0:
		return s.answer(m, p)
	case m.Method == acp.ClientMethodSessionUpdate:
		return s.update(m, p)
	case m.Method == acp.ClientMethodSessionRequestPermission:
		return s.permission(m, p)
	}
	return p
}

// answer translates the SDK's answer to initialize and to a forwarded
// prompt (the turn's idle, not an answer).
func (s *v2shim) answer(m message, p []byte) []byte {
	s.mu.Lock()
	isInit := string(m.ID) == s.initID
	var pend v2pending
	var fwd string
	if json.Unmarshal(m.ID, &fwd) == nil {
		pend = s.prompts[fwd]
		delete(s.prompts, fwd)
	}
	s.mu.Unlock()
	switch {
	case isInit && len(m.Result) > 0:
		return s.initAnswer(m)
	case bytes.Contains(m.Result, []byte(`"configOptions"`)) || bytes.Contains(m.Result, []byte(`"modes"`)):
		var res map[string]any
		if json.Unmarshal(m.Result, &res) != nil {
			return p
		}
		v2Options(res)
		return encode(map[string]any{"jsonrpc": "2.0", "id": m.ID, "result": res})
	case pend.session != "":
		idle := map[string]any{}
		if len(m.Error) > 0 {
			idle["stopReason"], idle["error"] = "error", json.RawMessage(m.Error)
		} else {
			var r struct {
				StopReason string          `json:"stopReason"`
				Usage      json.RawMessage `json:"usage"`
				Meta       json.RawMessage `json:"_meta"`
			}
			_ = json.Unmarshal(m.Result, &r)
			idle["stopReason"] = r.StopReason
			if len(r.Usage) > 0 && string(r.Usage) != "null" {
				idle["usage"] = r.Usage
			}
			if len(r.Meta) > 0 && string(r.Meta) != "null" {
				idle["_meta"] = r.Meta
			}
		}
		return s.b.stateLine(pend.session, "idle", idle)
	}
	return p
}

// initAnswer is the v2 initialize answer for the SDK's v1 one: v2's
// baseline (new, resume, close, prompt, cancel), the prompt content the
// agent takes, fork with --fork, the system prompt with --system-prompt,
// and session/status (unstable).
func (s *v2shim) initAnswer(m message) []byte {
	var r struct {
		AgentInfo json.RawMessage `json:"agentInfo"`
		Meta      json.RawMessage `json:"_meta"`
	}
	_ = json.Unmarshal(m.Result, &r)
	info := any(map[string]any{"name": "residentd-builtin", "version": "1"})
	if len(r.AgentInfo) > 0 && string(r.AgentInfo) != "null" {
		info = r.AgentInfo
	}
	prompt := map[string]any{}
	if s.b.opts.image {
		prompt["image"] = map[string]any{}
	}
	if s.b.opts.embedded {
		prompt["embeddedContext"] = map[string]any{}
	}
	session := map[string]any{"prompt": prompt, "mcp": map[string]any{"stdio": map[string]any{}}, "status": map[string]any{}}
	if s.b.opts.fork {
		session["fork"] = map[string]any{}
	}
	if s.b.opts.systemPrompt {
		session["systemPrompt"] = map[string]any{}
	}
	result := map[string]any{"protocolVersion": 2, "info": info, "capabilities": map[string]any{"session": session}, "authMethods": []any{}}
	if len(r.Meta) > 0 && string(r.Meta) != "null" {
		result["_meta"] = r.Meta
	}
	return encode(map[string]any{"jsonrpc": "2.0", "id": m.ID, "result": result})
}

// setOptionV1 is session/set_config_option as the SDK reads it: a
// select's value without v2's type "id".
func setOptionV1(line []byte) []byte {
	var m map[string]any
	if json.Unmarshal(line, &m) != nil {
		return line
	}
	if p, ok := m["params"].(map[string]any); ok && p["type"] == "id" {
		delete(p, "type")
		return encode(m)
	}
	return line
}

// sessionModeOption is the config option that stands, over v2 (which has
// no session modes), for the agent's session modes: category mode.
const sessionModeOption = "session_mode"

// v2Options gives the config options a result or update lists v2's shape
// (configId, not id), and the session modes v2 has not as the config
// option of category mode (the agent's own "mode" option, a model
// setting, keeps no category then).
func v2Options(holder map[string]any) {
	opts, _ := holder["configOptions"].([]any)
	modes, _ := holder["modes"].(map[string]any)
	delete(holder, "modes")
	for _, o := range opts {
		opt, ok := o.(map[string]any)
		if !ok {
			continue
		}
		if opt["id"] != nil {
			opt["configId"] = opt["id"]
			delete(opt, "id")
		}
		if modes != nil && opt["category"] == "mode" {
			delete(opt, "category")
		}
	}
	if modes == nil {
		return
	}
	avail, _ := modes["availableModes"].([]any)
	values := make([]any, 0, len(avail))
	for _, m := range avail {
		if mm, ok := m.(map[string]any); ok {
			values = append(values, map[string]any{"value": mm["id"], "name": mm["name"]})
		}
	}
	holder["configOptions"] = append(opts, map[string]any{"configId": sessionModeOption, "name": "Session mode", "category": "mode",
		"type": "select", "currentValue": modes["currentModeId"], "options": values})
}

// setSessionMode serves session/set_config_option of the option that
// stands for the session modes (session/set_mode of the SDK's agent) and
// reports whether m was one.
func (s *v2shim) setSessionMode(m message) bool {
	var p struct {
		SessionID string `json:"sessionId"`
		ConfigID  string `json:"configId"`
		Value     string `json:"value"`
	}
	if json.Unmarshal(m.Params, &p) != nil || p.ConfigID != sessionModeOption {
		return false
	}
	b := s.b
	b.record(map[string]any{"method": acp.AgentMethodSessionSetConfigOption, "session": p.SessionID, "option": p.ConfigID, "value": p.Value})
	if _, err := b.SetSessionMode(context.Background(), acp.SetSessionModeRequest{SessionId: acp.SessionId(p.SessionID), ModeId: acp.SessionModeId(p.Value)}); err != nil {
		msg := err.Error()
		var re *acp.RequestError
		if errors.As(err, &re) {
			msg = re.Message
		}
		s.write(map[string]any{"jsonrpc": "2.0", "id": m.ID, "error": map[string]any{"code": -32602, "message": msg}})
		return true
	}
	s.write(map[string]any{"jsonrpc": "2.0", "id": m.ID, "result": b.optionsOf(p.SessionID)})
	return true
}

// optionsOf is session id's config options and modes as v2 lists them.
func (b *builtin) optionsOf(id string) map[string]any {
	b.mu.Lock()
	sess := b.sessions[id]
	b.mu.Unlock()
	res := map[string]any{"configOptions": []any{}}
	if sess == nil {
		return res
	}
	raw, _ := json.Marshal(map[string]any{"configOptions": b.configOptions(sess), "modes": b.modes(sess)})
	_ = json.Unmarshal(raw, &res)
	if res["configOptions"] == nil {
		res["configOptions"] = []any{}
	}
	v2Options(res)
	return res
}

// update gives a v1 update its v2 shape.
func (s *v2shim) update(m message, p []byte) []byte {
	var n struct {
		SessionID string         `json:"sessionId"`
		Update    map[string]any `json:"update"`
	}
	if json.Unmarshal(m.Params, &n) != nil || n.Update == nil {
		return p
	}
	switch n.Update["sessionUpdate"] {
	case "tool_call":
		n.Update["sessionUpdate"] = "tool_call_update"
	case "agent_message_chunk", "agent_thought_chunk", "user_message_chunk":
		if _, ok := n.Update["messageId"]; !ok {
			n.Update["messageId"] = s.b.messageOf(n.SessionID)
		}
	case "plan":
		return nil // no such update in v2
	case "current_mode_update":
		// v2 has no modes: the option that stands for them changed.
		u := s.b.optionsOf(n.SessionID)
		u["sessionUpdate"] = "config_option_update"
		n.Update = u
	case "config_option_update":
		v2Options(n.Update)
	default:
		return p
	}
	return encode(map[string]any{"jsonrpc": "2.0", "method": m.Method, "params": map[string]any{"sessionId": n.SessionID, "update": n.Update}})
}

// permission gives a permission request v2's shape (its tool call as the
// subject, a title) after the session's requires_action.
func (s *v2shim) permission(m message, p []byte) []byte {
	var r struct {
		SessionID string          `json:"sessionId"`
		ToolCall  json.RawMessage `json:"toolCall"`
		Options   json.RawMessage `json:"options"`
	}
	if json.Unmarshal(m.Params, &r) != nil {
		return p
	}
	var tc struct {
		Title string `json:"title"`
	}
	_ = json.Unmarshal(r.ToolCall, &tc)
	s.mu.Lock()
	s.asks[string(m.ID)] = r.SessionID
	s.mu.Unlock()
	if line := s.b.stateLine(r.SessionID, "requires_action", nil); line != nil {
		if _, err := s.out.Write(line); err != nil {
			return p
		}
	}
	return encode(map[string]any{"jsonrpc": "2.0", "id": m.ID, "method": m.Method, "params": map[string]any{
		"sessionId": r.SessionID, "title": tc.Title, "subject": map[string]any{"type": "tool_call", "toolCall": r.ToolCall}, "options": r.Options}})
}

// stateLine is a state_update of session id with extra fields and the
// session's background list (the agent reports it on every state).
func (b *builtin) stateLine(id, state string, extra map[string]any) []byte {
	u := map[string]any{"sessionUpdate": "state_update", "state": state, "background": b.backgroundOf(id)}
	for k, v := range extra {
		u[k] = v
	}
	return encode(map[string]any{"jsonrpc": "2.0", "method": acp.ClientMethodSessionUpdate, "params": map[string]any{"sessionId": id, "update": u}})
}

// state sends a state_update of session id (see stateLine).
func (b *builtin) state(id, state string, extra map[string]any) error {
	u := map[string]any{"sessionUpdate": "state_update", "state": state, "background": b.backgroundOf(id)}
	for k, v := range extra {
		u[k] = v
	}
	return b.sendRaw(context.Background(), id, u)
}

// v2On reports whether the client speaks v2.
func (b *builtin) v2On() bool { return b.shim != nil && b.shim.on.Load() }

// backgroundOf is session id's background list as the wire carries it.
func (b *builtin) backgroundOf(id string) []map[string]any {
	b.mu.Lock()
	defer b.mu.Unlock()
	list := make([]map[string]any, 0, len(b.items[id]))
	for _, it := range b.items[id] {
		list = append(list, it.wire())
	}
	return list
}

// setMessage names the messageId of session id's reply chunks.
func (b *builtin) setMessage(id, msg string) {
	b.mu.Lock()
	if b.messages == nil {
		b.messages = map[string]string{}
	}
	b.messages[id] = msg
	b.mu.Unlock()
}

// messageOf is the messageId of session id's current reply ("msg-0" before
// any prompt: output of the agent's own).
func (b *builtin) messageOf(id string) string {
	b.mu.Lock()
	defer b.mu.Unlock()
	if m, ok := b.messages[id]; ok {
		return m
	}
	return "msg-0"
}

// startItems starts the prompt's [[bg:TYPE:D]] work (v2 only): each item
// announced (cancel advertised for terminals and tool calls) before the
// idle that lists it, and, when it ends, its final update, the agent's
// own output (an agent run) and a snapshot of the list without a stop
// reason.
func (b *builtin) startItems(id, text string) {
	if !b.v2On() {
		return
	}
	for i, m := range bgDirective().FindAllStringSubmatch(text, -1) {
		d, err := time.ParseDuration(m[2])
		if err != nil {
			continue
		}
		it := &bgItem{typ: m[1], id: fmt.Sprintf("%s-%d-%d", m[1], time.Now().UnixNano(), i)}
		switch it.typ {
		case "terminal":
			_ = b.sendRaw(context.Background(), id, map[string]any{"sessionUpdate": "terminal_update", "terminalId": it.id, "command": "sleep " + m[2], "capabilities": map[string]any{"cancel": map[string]any{}}})
		case "tool_call":
			_ = b.sendRaw(context.Background(), id, map[string]any{"sessionUpdate": "tool_call_update", "toolCallId": it.id, "title": "background tool call", "kind": "execute", "status": "in_progress", "capabilities": map[string]any{"cancel": map[string]any{}}})
		default:
			_ = b.sendRaw(context.Background(), id, map[string]any{"sessionUpdate": "subagent_update", "sessionId": it.id, "title": "builtin subagent", "state": map[string]any{"state": "running"}})
		}
		b.mu.Lock()
		if b.items == nil {
			b.items = map[string][]*bgItem{}
		}
		b.items[id] = append(b.items[id], it)
		b.mu.Unlock()
		it.w = b.startWork(id, d, b.afterAnswer(func(cancelled bool) { b.itemEnded(id, it, cancelled) }))
	}
}

// itemEnded reports item it of session id ended (cancelled or not).
func (b *builtin) itemEnded(id string, it *bgItem, cancelled bool) {
	b.mu.Lock()
	b.items[id] = without(b.items[id], it)
	b.mu.Unlock()
	switch it.typ {
	case "terminal":
		exit := map[string]any{"exitCode": 0}
		if cancelled {
			exit = map[string]any{"signal": "SIGTERM"}
		}
		_ = b.sendRaw(context.Background(), id, map[string]any{"sessionUpdate": "terminal_update", "terminalId": it.id, "exitStatus": exit, "capabilities": nil})
	case "tool_call":
		status := "completed"
		if cancelled {
			status = "cancelled"
		}
		_ = b.sendRaw(context.Background(), id, map[string]any{"sessionUpdate": "tool_call_update", "toolCallId": it.id, "status": status, "capabilities": nil})
	default:
		stop := "end_turn"
		if cancelled {
			stop = "cancelled"
		}
		_ = b.sendRaw(context.Background(), id, map[string]any{"sessionUpdate": "subagent_update", "sessionId": it.id, "state": map[string]any{"state": "idle", "stopReason": stop}})
	}
	if !cancelled {
		_ = b.sendRaw(context.Background(), id, map[string]any{"sessionUpdate": "agent_message_chunk", "messageId": it.id + "-done", "content": map[string]any{"type": "text", "text": "background " + it.typ + " " + it.id + " done"}})
	}
	_ = b.state(id, "idle", nil)
}

// cancelItem ends session id's running item of type typ, cancelled, and
// reports whether there was one.
func (b *builtin) cancelItem(id, typ, item string) bool {
	b.mu.Lock()
	var found *bgItem
	for _, x := range b.items[id] {
		if x.typ == typ && x.id == item {
			found = x
		}
	}
	if found != nil {
		work := b.background[id]
		for i, w := range work {
			if w == found.w {
				b.background[id] = append(work[:i:i], work[i+1:]...)
				break
			}
		}
	}
	b.mu.Unlock()
	if found == nil || found.w == nil {
		return false
	}
	found.w.end(true)
	return true
}

// sessionStatus is session id's status for session/status: open, saved,
// or "" for a session this agent does not know.
func (b *builtin) sessionStatus(id string) string {
	b.mu.Lock()
	_, here := b.sessions[id]
	b.mu.Unlock()
	if here {
		return "open"
	}
	if b.opts.state == "" || !validID(id) {
		return ""
	}
	if raw, err := os.ReadFile(b.statePath(id, ".open")); err == nil {
		if pid, err := strconv.Atoi(string(bytes.TrimSpace(raw))); err == nil && pid != os.Getpid() && syscall.Kill(pid, 0) == nil {
			return "open"
		}
	}
	for _, ext := range []string{logExt, legacyExt} {
		if _, err := os.Stat(b.statePath(id, ext)); err == nil {
			return "saved"
		}
	}
	return ""
}

// markOpen notes in --state that this process has session id open, for
// another process's session/status.
func (b *builtin) markOpen(id string) {
	if b.opts.state == "" || !validID(id) {
		return
	}
	_ = os.WriteFile(b.statePath(id, ".open"), []byte(strconv.Itoa(os.Getpid())), 0o600)
}

// unmarkOpen removes this process's open mark of session id (closed).
func (b *builtin) unmarkOpen(id string) {
	if b.opts.state == "" || !validID(id) {
		return
	}
	path := b.statePath(id, ".open")
	if raw, err := os.ReadFile(path); err == nil && string(bytes.TrimSpace(raw)) == strconv.Itoa(os.Getpid()) {
		_ = os.Remove(path)
	}
}

// resumeSnapshot sends, in v2, the state snapshot a session/resume gives
// before its answer: idle, with the session's background list.
func (b *builtin) resumeSnapshot(id string) {
	if b.v2On() {
		_ = b.state(id, "idle", nil)
	}
}

// ownCycle runs a cycle of the agent's own in session id after the
// running prompt's answer: state running, then, d later, idle with stop
// reason end_turn. A session/cancel ends it (cancelled), and so does a
// prompt the session takes in meanwhile: a session has one foreground
// work at a time, so the agent ends its own before the prompt's starts.
func (b *builtin) ownCycle(id string, d time.Duration) {
	answer := b.out.answerCount() + 1
	go func() {
		b.out.waitAnswers(answer, time.Minute)
		_ = b.state(id, "running", nil)
		w := b.startWork(id, d, func(cancelled bool) {
			b.mu.Lock()
			delete(b.cycles, id)
			b.mu.Unlock()
			stop := "end_turn"
			if cancelled {
				stop = "cancelled"
			}
			_ = b.state(id, "idle", map[string]any{"stopReason": stop})
		})
		b.mu.Lock()
		if b.cycles == nil {
			b.cycles = map[string]*bgWork{}
		}
		b.cycles[id] = w
		b.mu.Unlock()
	}()
}

// endCycle ends session id's own cycle, if one runs, before a prompt is
// taken in.
func (b *builtin) endCycle(id string) {
	b.mu.Lock()
	w := b.cycles[id]
	delete(b.cycles, id)
	if w != nil {
		list := b.background[id]
		for i, x := range list {
			if x == w {
				b.background[id] = append(list[:i:i], list[i+1:]...)
				break
			}
		}
	}
	b.mu.Unlock()
	if w != nil {
		w.end(true)
	}
}
