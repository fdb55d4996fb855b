// Elicitation: an agent asks a person to fill in a form (ACP's
// elicitation/create). The pinned SDK decodes the request into types that
// drop its sessionId and toolCallId, so the pump takes the request line
// itself, as it takes a prompt's answer, and this file answers it: on a
// goroutine of its own, since a person may take minutes and the pump must
// go on reading.

package acp

import (
	"bytes"
	"context"
	"encoding/json"
	"sync"

	sdk "github.com/coder/acp-go-sdk"
	"go.uber.org/zap"

	"github.com/residentd/residentd/apitype"
)

// MethodElicitationCreate is the agent's request for a form.
const MethodElicitationCreate = "elicitation/create"

// methodCancelRequest is the notification by which a JSON-RPC peer
// withdraws a request it sent (the agent gave up on its form).
const methodCancelRequest = "$/cancel_request"

// ElicitFunc puts a form of session native to a person and returns the
// answer (its Action one of apitype.ElicitAccept, ElicitDecline,
// ElicitCancel). It returns when ctx ends at the latest: the agent
// withdrew the request, or exited.
type ElicitFunc func(ctx context.Context, native string, req apitype.ElicitationRequest) apitype.ElicitationAnswer

// elicitState is an Agent's forms in flight: their ids (as the agent's
// raw JSON-RPC ids) and how to withdraw each.
type elicitState struct {
	mu      sync.Mutex
	pending map[string]context.CancelFunc
}

// elicitLine is an elicitation/create request, or a $/cancel_request, as
// far as this file reads it.
type elicitLine struct {
	ID     json.RawMessage `json:"id"`
	Method string          `json:"method"`
	Params struct {
		SessionID  string          `json:"sessionId"`
		ToolCallID string          `json:"toolCallId"`
		Mode       string          `json:"mode"`
		Message    string          `json:"message"`
		Schema     json.RawMessage `json:"requestedSchema"`
		RequestID  json.RawMessage `json:"requestId"`
	} `json:"params"`
}

// intercept takes line when it is an elicitation request (or withdraws
// one) and reports whether it did; any other line goes on to the SDK. It
// also reads the initialize answer's system prompt capability
// (sysprompt.go) on its way to the SDK. Only the pump calls it.
func (a *Agent) intercept(line []byte) bool {
	if a.in != nil { // nil only for an Agent a test made by hand
		a.in.sys.sniffInit(line)
	}
	form := bytes.Contains(line, []byte(`"`+MethodElicitationCreate+`"`))
	if !form && !bytes.Contains(line, []byte(`"`+methodCancelRequest+`"`)) {
		return false
	}
	var l elicitLine
	if err := json.Unmarshal(line, &l); err != nil {
		return false
	}
	switch {
	case l.Method == MethodElicitationCreate && len(l.ID) > 0:
		a.elicitForm(l)
		return true
	case l.Method == methodCancelRequest:
		return a.withdrawForm(string(l.Params.RequestID))
	}
	return false
}

// elicitForm answers one form request on a goroutine of its own, which
// ends with the answer: the person's, or cancel once the agent withdrew
// the request or exited.
func (a *Agent) elicitForm(l elicitLine) {
	id := string(l.ID)
	ctx, cancel := context.WithCancel(context.Background())
	st := &a.elicit
	st.mu.Lock()
	if st.pending == nil {
		st.pending = map[string]context.CancelFunc{}
	}
	st.pending[id] = cancel
	st.mu.Unlock()
	native := a.sessionOf(l.Params.SessionID)
	go func() {
		defer cancel()
		go func() {
			select {
			case <-a.done:
				cancel()
			case <-ctx.Done():
			}
		}()
		ans := apitype.ElicitationAnswer{Action: apitype.ElicitCancel}
		switch {
		case l.Params.Mode != "form":
			// Only forms are advertised; a URL or a mode of the future is
			// dismissed.
			a.log.Info("elicitation of a mode not advertised; answered cancel", zap.String("mode", l.Params.Mode))
		case a.spec.Elicit != nil:
			ans = a.spec.Elicit(ctx, native, apitype.ElicitationRequest{Message: l.Params.Message, Schema: l.Params.Schema, ToolCallID: l.Params.ToolCallID})
		}
		st.mu.Lock()
		delete(st.pending, id)
		st.mu.Unlock()
		if err := a.in.writeLine(elicitReply(l.ID, ans)); err != nil {
			a.log.Debug("elicitation answer not written", zap.Error(err))
		}
	}()
}

// withdrawForm cancels the form the agent sent as request id, when it is
// one of this file's.
func (a *Agent) withdrawForm(id string) bool {
	st := &a.elicit
	st.mu.Lock()
	cancel, ok := st.pending[id]
	st.mu.Unlock()
	if ok {
		cancel()
	}
	return ok
}

// sessionOf is the session whose run a form of session id goes to: a
// subagent's form is its parent's.
func (a *Agent) sessionOf(id string) string {
	a.mu.Lock()
	defer a.mu.Unlock()
	if parent, ok := a.children[id]; ok {
		return parent
	}
	return id
}

// elicitReply is the JSON-RPC response line to form request id.
func elicitReply(id json.RawMessage, ans apitype.ElicitationAnswer) []byte {
	res := struct {
		Action  string `json:"action"`
		Content any    `json:"content,omitempty"` // an accept's, {} when empty
	}{Action: ans.Action}
	if ans.Action == apitype.ElicitAccept {
		content := ans.Content
		if content == nil {
			content = map[string]any{}
		}
		res.Content = content
	}
	line, _ := json.Marshal(struct {
		JSONRPC string          `json:"jsonrpc"`
		ID      json.RawMessage `json:"id"`
		Result  any             `json:"result"`
	}{"2.0", id, res})
	return append(line, '\n')
}

// elicitationCapability is clientCapabilities.elicitation: forms, when
// there is someone to put them to.
func elicitationCapability(f ElicitFunc) *sdk.ElicitationCapabilities {
	if f == nil {
		return nil
	}
	return &sdk.ElicitationCapabilities{Form: &sdk.ElicitationFormCapabilities{}}
}
