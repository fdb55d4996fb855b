package interop

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// fakeAPI is a small Anthropic Messages API on 127.0.0.1: it streams a fixed
// reply to every POST /v1/messages and records every request it gets.
type fakeAPI struct {
	fakeModel
	// tool, when set, makes the model ask for one tool call in the turn
	// whose user message holds tool.marker; the model's next call (carrying
	// the tool's result) gets the reply.
	tool *toolUse
	// tools, when set, makes the model ask for these tool calls one after
	// the other in the turn whose user message holds tools[0].marker: the
	// call after the k-th tool result asks for tools[k], the one after the
	// last result gets the reply.
	tools []toolUse
	// later, when set, answers a call whose newest user message holds
	// later.marker with later.reply (an agent's own turn after background
	// work ended, say).
	later *laterReply
	// sized reports a call's input tokens as a quarter of its body's bytes,
	// so the context in use grows with the conversation as a real model's
	// does (the agent's usage_update reads it); otherwise 12 a call.
	sized bool
}

// toolUse is the tool call the fake model asks for.
type toolUse struct {
	marker string
	name   string
	input  map[string]any
}

// laterReply is the fake model's answer to a later call.
type laterReply struct {
	marker, reply string
}

// apiRequest is one recorded request.
type apiRequest struct {
	Method, Path string
	Body         []byte
}

// messagesRequest is the part of a Messages API request the tests read.
type messagesRequest struct {
	Model    string          `json:"model"`
	Stream   bool            `json:"stream"`
	System   json.RawMessage `json:"system"`
	Messages []apiMessage    `json:"messages"`
}

type apiMessage struct {
	Role    string          `json:"role"`
	Content json.RawMessage `json:"content"`
}

// text flattens a message's content (a string or an array of blocks) into
// its text blocks joined by newlines.
// toolResults returns the content of the message's tool_result blocks.
func (m apiMessage) toolResults() []string {
	var blocks []struct {
		Type    string          `json:"type"`
		Content json.RawMessage `json:"content"`
		IsError bool            `json:"is_error"`
	}
	if json.Unmarshal(m.Content, &blocks) != nil {
		return nil
	}
	var out []string
	for _, b := range blocks {
		if b.Type == "tool_result" {
			out = append(out, fmt.Sprintf("is_error=%v %s", b.IsError, b.Content))
		}
	}
	return out
}

func (m apiMessage) text() string {
	var s string
	if json.Unmarshal(m.Content, &s) == nil {
		return s
	}
	var blocks []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
	_ = json.Unmarshal(m.Content, &blocks)
	var parts []string
	for _, b := range blocks {
		if b.Type == "text" {
			parts = append(parts, b.Text)
		}
	}
	return strings.Join(parts, "\n")
}

func newFakeAPI(t testing.TB, reply string) *fakeAPI {
	t.Helper()
	f := &fakeAPI{fakeModel: newFakeModel(reply)}
	f.srv = httptest.NewServer(http.HandlerFunc(f.serve))
	t.Cleanup(f.close)
	return f
}

// URL is the base URL to hand the agent; always on 127.0.0.1.
func (f *fakeAPI) URL() string { return f.srv.URL }

// env is the environment that points claude at f, with a dummy key.
func (f *fakeAPI) env() map[string]string {
	return map[string]string{"ANTHROPIC_BASE_URL": f.URL(), "ANTHROPIC_API_KEY": "dummy"}
}

// modelCalls returns the decoded POST /v1/messages bodies whose messages
// mention marker, in order: the agent's own turns, not side calls such as
// title generation that may not carry the user's words.
func (f *fakeAPI) modelCalls(t *testing.T, marker string) []messagesRequest {
	t.Helper()
	var out []messagesRequest
	for _, r := range f.requests() {
		if r.Method != http.MethodPost || r.Path != "/v1/messages" {
			continue
		}
		var m messagesRequest
		if err := json.Unmarshal(r.Body, &m); err != nil {
			t.Fatalf("fake API: request body is not a Messages request: %v: %.200s", err, r.Body)
		}
		for _, msg := range m.Messages {
			if strings.Contains(msg.text(), marker) {
				out = append(out, m)
				break
			}
		}
	}
	return out
}

// calls returns the decoded POST /v1/messages bodies from the from-th
// request on, in order (those that do not decode are left out).
func (f *fakeAPI) calls(from int) []messagesRequest {
	var out []messagesRequest
	for _, r := range f.requests()[from:] {
		var m messagesRequest
		if r.Method == http.MethodPost && r.Path == "/v1/messages" && json.Unmarshal(r.Body, &m) == nil {
			out = append(out, m)
		}
	}
	return out
}

func (f *fakeAPI) serve(w http.ResponseWriter, r *http.Request) {
	body, stall := f.record(r)

	switch {
	case r.Method == http.MethodPost && r.URL.Path == "/v1/messages/count_tokens":
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `{"input_tokens": 42}`)
	case r.Method == http.MethodPost && r.URL.Path == "/v1/messages":
		if !f.wait(r, stall) {
			return
		}
		var req messagesRequest
		_ = json.Unmarshal(body, &req)
		in := 12
		if f.sized {
			in = len(body) / 4
		}
		f.message(w, req, in)
	case r.Method == http.MethodGet && strings.HasPrefix(r.URL.Path, "/v1/models"):
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `{"data": [], "has_more": false, "first_id": null, "last_id": null}`)
	case r.Method == http.MethodHead || r.Method == http.MethodGet && r.URL.Path == "/":
		w.WriteHeader(http.StatusOK)
	default:
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusNotFound)
		fmt.Fprint(w, `{"type": "error", "error": {"type": "not_found_error", "message": "not served by the test's fake API"}}`)
	}
}

// message answers a Messages call, streamed as server-sent events when asked.
func (f *fakeAPI) message(w http.ResponseWriter, req messagesRequest, in int) {
	model := req.Model
	if model == "" {
		model = "claude-fake"
	}
	tools := f.tools
	if f.tool != nil {
		tools = []toolUse{*f.tool}
	}
	if len(tools) > 0 && req.Stream {
		asked, answered := false, 0
		for _, m := range req.Messages {
			asked = asked || m.Role == "user" && strings.Contains(m.text(), tools[0].marker)
			answered += len(m.toolResults())
		}
		if asked && answered < len(tools) {
			f.toolCall(w, model, tools[answered], answered+1)
			return
		}
	}
	reply := f.reply
	if f.later != nil && len(req.Messages) > 0 {
		if last := req.Messages[len(req.Messages)-1]; last.Role == "user" && strings.Contains(string(last.Content), f.later.marker) {
			reply = f.later.reply
		}
	}
	if !req.Stream {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{
			"id": "msg_fake", "type": "message", "role": "assistant", "model": model,
			"content":     []map[string]any{{"type": "text", "text": reply}},
			"stop_reason": "end_turn", "stop_sequence": nil,
			"usage": map[string]any{"input_tokens": in, "output_tokens": 7},
		})
		return
	}
	w.Header().Set("Cache-Control", "no-cache")
	send := eventStream(w)
	send("message_start", map[string]any{"type": "message_start", "message": map[string]any{
		"id": "msg_fake", "type": "message", "role": "assistant", "model": model, "content": []any{},
		"stop_reason": nil, "stop_sequence": nil,
		"usage": map[string]any{"input_tokens": in, "output_tokens": 1, "cache_read_input_tokens": 0, "cache_creation_input_tokens": 0},
	}})
	send("content_block_start", map[string]any{"type": "content_block_start", "index": 0, "content_block": map[string]any{"type": "text", "text": ""}})
	// Two deltas, so the reply reaches the client as more than one chunk.
	half := len(reply) / 2
	for _, part := range []string{reply[:half], reply[half:]} {
		send("content_block_delta", map[string]any{"type": "content_block_delta", "index": 0, "delta": map[string]any{"type": "text_delta", "text": part}})
	}
	send("content_block_stop", map[string]any{"type": "content_block_stop", "index": 0})
	send("message_delta", map[string]any{"type": "message_delta", "delta": map[string]any{"stop_reason": "end_turn", "stop_sequence": nil}, "usage": map[string]any{"output_tokens": 7}})
	send("message_stop", map[string]any{"type": "message_stop"})
}

// eventStream makes w a server-sent event stream and returns its sender:
// each event is written and flushed as one.
func eventStream(w http.ResponseWriter) func(event string, data any) {
	w.Header().Set("Content-Type", "text/event-stream")
	fl, _ := w.(http.Flusher)
	return func(event string, data any) {
		b, _ := json.Marshal(data)
		fmt.Fprintf(w, "event: %s\ndata: %s\n\n", event, b)
		if fl != nil {
			fl.Flush()
		}
	}
}

// toolCall streams a reply that is one tool_use block, the n-th of the turn.
func (f *fakeAPI) toolCall(w http.ResponseWriter, model string, tool toolUse, n int) {
	send := eventStream(w)
	input, _ := json.Marshal(tool.input)
	send("message_start", map[string]any{"type": "message_start", "message": map[string]any{
		"id": "msg_fake_tool", "type": "message", "role": "assistant", "model": model, "content": []any{},
		"stop_reason": nil, "stop_sequence": nil,
		"usage": map[string]any{"input_tokens": 12, "output_tokens": 1, "cache_read_input_tokens": 0, "cache_creation_input_tokens": 0},
	}})
	send("content_block_start", map[string]any{"type": "content_block_start", "index": 0, "content_block": map[string]any{"type": "tool_use", "id": fmt.Sprintf("toolu_fake_%d", n), "name": tool.name, "input": map[string]any{}}})
	send("content_block_delta", map[string]any{"type": "content_block_delta", "index": 0, "delta": map[string]any{"type": "input_json_delta", "partial_json": string(input)}})
	send("content_block_stop", map[string]any{"type": "content_block_stop", "index": 0})
	send("message_delta", map[string]any{"type": "message_delta", "delta": map[string]any{"stop_reason": "tool_use", "stop_sequence": nil}, "usage": map[string]any{"output_tokens": 9}})
	send("message_stop", map[string]any{"type": "message_stop"})
}
