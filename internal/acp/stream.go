// The agent's stdout, read here before the SDK sees it. The SDK queues
// every notification (at most 1,024, then it closes the connection) and
// decodes each update three times; an agent that streams a long reply
// finely, or replays a long history on session/load, overflows it. So
// session/update lines are decoded here, once, and delivered in order
// before the next line is read: a slow consumer slows the agent's writes
// (the pipe fills), nothing queues up. Every other line (responses,
// requests, other notifications) goes on to the SDK's connection through a
// pipe, after the updates written before it were delivered, which keeps the
// SDK's promise that a response comes after the updates sent before it.

package acp

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	sdk "github.com/coder/acp-go-sdk"
	"go.uber.org/zap"

	"github.com/residentd/residentd/apitype"
)

// Limits on what one agent may send; hitting one fails the work it hit
// with an error that names it.
const (
	// MaxLineBytes bounds one JSON-RPC line from the agent (the SDK's own
	// scanner bound): past it the connection is closed.
	MaxLineBytes = 10 << 20
	// MaxReplyBytes bounds the reply text a prompt collects for its
	// result; past it the text is cut and the turn fails.
	MaxReplyBytes = 64 << 20
	// MaxReadBytes bounds a file an agent reads through fs/read_text_file:
	// the answer is one JSON-RPC line, and the SDK's peers take none longer
	// than MaxLineBytes.
	MaxReadBytes = MaxLineBytes
)

// ErrLimit: the agent sent more than a bound allows; the message names it.
var ErrLimit = errors.New("agent output limit")

// envelope is a JSON-RPC line as far as the demultiplexer needs it: a
// notification's method and, for session/update, the update typed.
type envelope struct {
	ID     json.RawMessage `json:"id"`
	Method string          `json:"method"`
	Params struct {
		SessionID string       `json:"sessionId"`
		Update    updateFields `json:"update"`
	} `json:"params"`
}

// updateFields is a wireUpdate without its UnmarshalJSON, so that an
// update line decodes in one pass (a nested Unmarshal checks and decodes
// the update's bytes over again); dispatch fetches raw when it is needed.
type updateFields wireUpdate

// rawUpdate is an update line's update as the agent wrote it.
type rawUpdate struct {
	Params struct {
		Update json.RawMessage `json:"update"`
	} `json:"params"`
}

// pump reads the agent's stdout until it ends, delivering updates and
// passing every other line to the SDK through out. It closes out when it
// returns, which ends the SDK's connection.
func (a *Agent) pump(src io.Reader, out *io.PipeWriter) {
	br := bufio.NewReaderSize(src, 64<<10)
	var long []byte // a line longer than br's buffer, assembled
	for {
		frag, err := br.ReadSlice('\n')
		line := frag
		if err == bufio.ErrBufferFull || long != nil {
			long = append(long, frag...)
			line = long
			if len(long) > MaxLineBytes {
				a.limited(fmt.Errorf("%w: a line of the agent's output is longer than %d MiB (max line)", ErrLimit, MaxLineBytes>>20))
				_ = out.CloseWithError(a.limitErr())
				// With no prompt in flight nothing else would stop it: the
				// process, blocked on its stdout, must not stay in the pool.
				_ = a.stop()
				return
			}
			if err == bufio.ErrBufferFull {
				continue
			}
		}
		if a.initWait.Load() {
			line = a.initAnswer(line) // the answer to an offer of v2 (v2.go)
		} else if a.v2.Load() {
			line = v2In(line)
		}
		if len(bytes.TrimSpace(line)) > 0 && !a.dispatch(line) {
			if _, werr := out.Write(line); werr != nil {
				return // the SDK's connection is gone
			}
			if err != nil && line[len(line)-1] != '\n' {
				_, _ = out.Write([]byte{'\n'})
			}
		}
		long = nil
		if err != nil {
			_ = out.CloseWithError(err)
			return
		}
	}
}

// dispatch delivers line if it is a session/update notification and
// reports whether it did.
func (a *Agent) dispatch(line []byte) bool {
	// The method is all that tells an update line from another; an
	// update's own fields decode in the same pass.
	if !bytes.Contains(line, []byte(`"session/update"`)) {
		if bytes.Contains(line, []byte(`"stopReason"`)) && !bytes.Contains(line, []byte(`"method"`)) {
			a.promptAnswered()
		}
		if a.intercept(line) {
			return true
		}
		// The answer to a request sent here is this package's (prompt.go,
		// v2.go).
		if a.callsN.Load() > 0 && a.takeRaw(line) {
			return true
		}
		if a.v2.Load() && a.promptsN.Load() > 0 && a.v2Ack(line) {
			return true
		}
		return a.promptsN.Load() > 0 && a.takeAnswer(line)
	}
	// One target for every line, zeroed first: a decode into pointers or
	// slices left from the last line would write into what that line
	// delivered. Nothing keeps u past route (holdEarlyLocked copies it).
	env := &a.env
	*env = envelope{}
	if err := a.lines.Decode(line, env); err != nil || env.Method != sdk.ClientMethodSessionUpdate || env.ID != nil {
		// The SDK reads it, and logs what it cannot; unless it is a
		// response that quotes the method, to a prompt sent here.
		return err == nil && env.Method == "" && a.promptsN.Load() > 0 && a.takeAnswer(line)
	}
	u := (*wireUpdate)(&env.Params.Update)
	if !u.plainText() {
		// What the typed fields fall short of (wireUpdate.UnmarshalJSON
		// keeps the same bytes); a plain text chunk, the common update,
		// needs no second pass.
		r := &a.raw
		*r = rawUpdate{}
		if err := a.lines.Decode(line, r); err != nil {
			return false
		}
		u.raw = r.Params.Update
	}
	a.route(env.Params.SessionID, u)
	return true
}

var contentDecoders = sync.Pool{New: func() any { return new(contentDecoder) }}

// promptAnswered marks the running prompt answered as the pump reads its
// answer (a response carrying a stopReason), so that an update the agent
// writes right after it goes to no turn even while the SDK has not yet
// handed the answer to Prompt. A process serves one session, so at most
// one prompt runs on it.
func (a *Agent) promptAnswered() {
	a.mu.Lock()
	routes := make([]*route, 0, len(a.routes))
	for _, r := range a.routes {
		routes = append(routes, r)
	}
	a.mu.Unlock()
	for _, r := range routes {
		r.mu.Lock()
		if r.on != nil {
			r.answered = true
		}
		r.mu.Unlock()
	}
}

// route delivers u to the route of session id (or, for a subagent's
// session, its parent's), or holds it until the session is known.
func (a *Agent) route(id string, u *wireUpdate) {
	a.mu.Lock()
	if u.Kind == "subagent_update" && u.SubSession != "" && u.SubSession != id {
		a.children[u.SubSession] = id
		if u.State != nil {
			// A running subagent is work the agent does whether or not a
			// prompt is in flight; any other state ends it.
			if u.State.State == "running" {
				a.working[u.SubSession] = true
			} else {
				delete(a.working, u.SubSession)
			}
			a.workChangedLocked()
		}
	}
	if u.Kind == "state_update" && u.State != nil {
		a.stateLocked(id, u.State, u.Background)
	}
	if u.Kind == "terminal_update" || (u.Kind == "tool_call_update" && len(u.Capabilities) > 0) {
		a.cancelCapLocked(id, u)
	}
	if len(u.Meta) > 0 {
		a.claudeTasksLocked(u)
	}
	r, sub := a.routes[id], ""
	if r == nil {
		if parent, ok := a.children[id]; ok {
			// A subagent's update is its parent session's, told apart by sub.
			r, sub, id = a.routes[parent], id, parent
		}
	}
	if r == nil {
		a.holdEarlyLocked(id, u)
		a.mu.Unlock()
		return
	}
	a.mu.Unlock()
	r.mu.Lock()
	a.deliverLocked(r, id, u, sub)
	r.mu.Unlock()
	if sub == "" && a.v2.Load() {
		a.v2Ended(id, u) // after the update: the turn's last
	}
}

// claudeTasksLocked follows claude-agent-acp's background tasks as it
// reports them to a client of ACP v1: a tool call whose result names a
// backgroundTaskId starts one; the usage report of a turn the agent began
// on a task's notification ends them. a.mu is held.
func (a *Agent) claudeTasksLocked(u *wireUpdate) {
	switch {
	case u.Kind == "tool_call_update" && bytes.Contains(u.Meta, []byte(`"backgroundTaskId"`)):
		var m struct {
			ClaudeCode struct {
				ToolResponse struct {
					BackgroundTaskID string `json:"backgroundTaskId"`
				} `json:"toolResponse"`
			} `json:"claudeCode"`
		}
		if json.Unmarshal(u.Meta, &m) == nil && m.ClaudeCode.ToolResponse.BackgroundTaskID != "" {
			a.working["task:"+m.ClaudeCode.ToolResponse.BackgroundTaskID] = true
			a.workChangedLocked()
		}
	case u.Kind == "usage_update" && u.Cost != nil && bytes.Contains(u.Meta, []byte(`"task-notification"`)):
		for id := range a.working {
			if strings.HasPrefix(id, "task:") {
				delete(a.working, id)
			}
		}
		a.workChangedLocked()
	}
}

// workChangedLocked stamps a change of working and wakes WaitIdle. a.mu
// is held.
func (a *Agent) workChangedLocked() {
	a.workedAt = time.Now()
	close(a.workCh)
	a.workCh = make(chan struct{})
}

// WaitIdle waits until the agent reports no work running, the process is
// gone or ctx ends, and reports whether the agent went idle.
func (a *Agent) WaitIdle(ctx context.Context) bool {
	for {
		a.mu.Lock()
		idle, ch := len(a.working) == 0, a.workCh
		a.mu.Unlock()
		if idle {
			return true
		}
		select {
		case <-ch:
		case <-a.done:
			return false
		case <-ctx.Done():
			return false
		}
	}
}

// CancelSession sends session/cancel for native: ACP's one way to ask an
// agent to stop what it works on in a session, turn or background work.
// It is a notification: nothing answers it.
func (a *Agent) CancelSession(ctx context.Context, native string) error {
	if err := a.conn.Cancel(ctx, sdk.CancelNotification{SessionId: sdk.SessionId(native)}); err != nil {
		return fmt.Errorf("acp: session/cancel %q: %w", native, err)
	}
	return nil
}

// Working reports whether the agent has work running that it reported
// (subagent sessions it announced as running, claude-agent-acp's
// background tasks), and when that last changed.
func (a *Agent) Working() (bool, time.Time) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.working) > 0, a.workedAt
}

// limited records the first limit the agent's output hit.
func (a *Agent) limited(err error) {
	a.mu.Lock()
	if a.limit == nil {
		a.limit = err
	}
	a.mu.Unlock()
	a.log.Warn("agent output hit a limit; closing its connection", zap.Error(err))
}

func (a *Agent) limitErr() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.limit
}

// wireUpdate is a session update as ACP sends it, every variant's fields
// flat in one struct so that it decodes in one pass. raw keeps the agent's
// own bytes where the typed fields fall short (everything but a plain
// text chunk).
type wireUpdate struct {
	Kind    string          `json:"sessionUpdate"`
	Content wireContent     `json:"content"`
	Meta    json.RawMessage `json:"_meta"`

	// tool_call, tool_call_update
	ToolCallID string                 `json:"toolCallId"`
	Title      *string                `json:"title"`
	ToolKind   *string                `json:"kind"`
	Status     *string                `json:"status"`
	Locations  []sdk.ToolCallLocation `json:"locations"`
	// plan
	Entries []sdk.PlanEntry `json:"entries"`
	// usage_update
	Used int       `json:"used"`
	Size int       `json:"size"`
	Cost *sdk.Cost `json:"cost"`
	// config_option_update
	ConfigOptions []sdk.SessionConfigOption `json:"configOptions"`
	// current_mode_update
	CurrentModeID string `json:"currentModeId"`
	// compaction_update
	CompactionID string        `json:"compactionId"`
	Summary      []wireContent `json:"summary"`
	// notice
	Severity    string `json:"severity"`
	Description string `json:"description"`
	// subagent_update: the subagent's session and its work state
	SubSession string `json:"sessionId"`
	// state_update: the session's work state, an idle's stop reason, the
	// work still running (raw: omitted or null is "not reported")
	State      *wireState      `json:"state"`
	StopReason *string         `json:"stopReason"`
	Background json.RawMessage `json:"background"`
	// user_message, user_message_chunk (v2): the message a prompt became
	MessageID string `json:"messageId"`
	// terminal_update, tool_call_update (v2): the item's terminal and
	// capabilities (cancel)
	TerminalID   string          `json:"terminalId"`
	Capabilities json.RawMessage `json:"capabilities"`

	raw json.RawMessage
}

// wireState is a work state: an object with a state (subagent_update,
// and state_update as ACP v2 Preview sends it) or, accepted defensively
// for state_update, the state as a bare string.
type wireState struct {
	State string `json:"state"`
}

func (w *wireState) UnmarshalJSON(b []byte) error {
	if len(b) > 0 && b[0] == '"' {
		return json.Unmarshal(b, &w.State)
	}
	var o struct {
		State  *string `json:"state"`
		Status *string `json:"status"`
	}
	if err := json.Unmarshal(b, &o); err != nil {
		return nil // a shape residentd does not read: no state, not a broken line
	}
	switch {
	case o.State != nil:
		w.State = *o.State
	case o.Status != nil:
		w.State = *o.Status
	}
	return nil
}

// wireContent is a content block as far as residentd reads it: its text.
// A tool call's content (an array) decodes to nothing; raw carries it.
type wireContent struct {
	Type string `json:"type"`
	Text *string
	set  bool
}

func (c *wireContent) UnmarshalJSON(b []byte) error {
	if len(b) == 0 || b[0] != '{' {
		return nil
	}
	// Every update's content decodes here, nested in its line's decoding:
	// a pooled decoder spares it a decoding state of its own, and its
	// target an allocation.
	d := contentDecoders.Get().(*contentDecoder)
	d.v = contentFields{} // a Text left from the last block would be decoded into
	err := d.lines.Decode(b, &d.v)
	v := d.v
	d.v = contentFields{}
	contentDecoders.Put(d)
	if err != nil {
		return err
	}
	c.Type, c.Text, c.set = v.Type, v.Text, true
	return nil
}

// contentFields is what wireContent reads of a content block.
type contentFields struct {
	Type string  `json:"type"`
	Text *string `json:"text"`
}

// contentDecoder is a pooled decoder for content blocks, with its target.
type contentDecoder struct {
	lines apitype.LineDecoder
	v     contentFields
}

func (u *wireUpdate) UnmarshalJSON(b []byte) error {
	type plain wireUpdate
	if err := json.Unmarshal(b, (*plain)(u)); err != nil {
		return err
	}
	if !u.plainText() {
		u.raw = append(json.RawMessage(nil), b...)
	}
	return nil
}

// plainText: a text chunk with nothing but its text, which the text says
// whole.
func (u *wireUpdate) plainText() bool {
	return (u.Kind == "agent_message_chunk" || u.Kind == "agent_thought_chunk") && u.Content.Text != nil && u.Content.Type == "text" && u.Meta == nil
}

// fromSDK types an update the SDK decoded (one that reached the SDK's
// handler rather than the pump).
func fromSDK(su sdk.SessionUpdate) (*wireUpdate, error) {
	b, err := json.Marshal(su)
	if err != nil {
		return nil, err
	}
	var u wireUpdate
	if err := json.Unmarshal(b, &u); err != nil {
		return nil, err
	}
	return &u, nil
}
