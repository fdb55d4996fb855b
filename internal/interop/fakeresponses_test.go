package interop

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// fakeResponses is a small OpenAI Responses API on 127.0.0.1, for the Codex
// CLI under codex-acp: it streams a fixed reply to every POST /v1/responses
// and records every request it gets. Each answer reports the same usage
// (codexCallUsage), so a turn's usage is a multiple of it.
type fakeResponses struct {
	fakeModel
	// scripts make the model ask for tool calls: in a turn whose user
	// message holds a script's marker, the call after the k-th tool output
	// asks for its calls[k], the one after the last output gets the reply.
	scripts []toolScript
}

// toolScript is the tool calls the fake model asks for, one after the
// other, in the turn whose user message holds marker. The n-th call of the
// i-th script has the call id call_fake_i_n.
type toolScript struct {
	marker string
	calls  []codexTool
}

// codexCallUsage is what the fake reports for each model call, as the Responses
// API does: input_tokens counts the cached ones too, output_tokens the
// reasoning ones.
var codexCallUsage = struct{ input, cached, output, reasoning int64 }{input: 1200, cached: 800, output: 30, reasoning: 12}

// codexTool is a tool call the fake model asks for: a function call
// (exec_command, with its arguments as JSON) or a custom tool call
// (apply_patch, with its input as text).
type codexTool struct {
	name string
	args map[string]any // a function call's arguments
	text string         // a custom tool call's input
}

// responsesRequest is the part of a Responses API request the tests read.
type responsesRequest struct {
	Model        string         `json:"model"`
	Stream       bool           `json:"stream"`
	Instructions string         `json:"instructions"`
	Input        []responseItem `json:"input"`
	Text         struct {
		Format *struct {
			Type string `json:"type"`
		} `json:"format"`
	} `json:"text"`
}

// responseItem is one item of a request's input: a message, a tool call or
// a tool call's output.
type responseItem struct {
	Type    string          `json:"type"`
	Role    string          `json:"role"`
	Content json.RawMessage `json:"content"`
	CallID  string          `json:"call_id"`
	Output  json.RawMessage `json:"output"`
}

// text is a message item's text parts joined by newlines.
func (it responseItem) text() string {
	var s string
	if json.Unmarshal(it.Content, &s) == nil {
		return s
	}
	var parts []struct {
		Text string `json:"text"`
	}
	_ = json.Unmarshal(it.Content, &parts)
	var out []string
	for _, p := range parts {
		out = append(out, p.Text)
	}
	return strings.Join(out, "\n")
}

// output is a tool output item's output as text (a string, or the text
// parts of a content list).
func (it responseItem) output() string {
	var s string
	if json.Unmarshal(it.Output, &s) == nil {
		return s
	}
	var parts []struct {
		Text string `json:"text"`
	}
	_ = json.Unmarshal(it.Output, &parts)
	var out []string
	for _, p := range parts {
		out = append(out, p.Text)
	}
	return strings.Join(out, "\n")
}

func (it responseItem) isOutput() bool {
	return it.Type == "function_call_output" || it.Type == "custom_tool_call_output"
}

// users is the text of the request's user messages, in order.
func (q responsesRequest) users() []string { return q.messages("user") }

// messages is the text of the request's messages of role, in order.
func (q responsesRequest) messages(role string) []string {
	var out []string
	for _, it := range q.Input {
		if it.Type == "message" && it.Role == role {
			out = append(out, it.text())
		}
	}
	return out
}

// outputs is the request's tool outputs by call id.
func (q responsesRequest) outputs() map[string]string {
	out := map[string]string{}
	for _, it := range q.Input {
		if it.isOutput() {
			out[it.CallID] = it.output()
		}
	}
	return out
}

// side reports a call the CLI makes beside the agent's turn: the title of
// a new thread, asked for as JSON by a schema.
func (q responsesRequest) side() bool {
	return q.Text.Format != nil && q.Text.Format.Type == "json_schema"
}

func newFakeResponses(t testing.TB, reply string) *fakeResponses {
	t.Helper()
	f := &fakeResponses{fakeModel: newFakeModel(reply)}
	f.srv = httptest.NewServer(http.HandlerFunc(f.serve))
	t.Cleanup(f.close)
	return f
}

// URL is the base URL of the API (…/v1) to hand the CLI; always on 127.0.0.1.
func (f *fakeResponses) URL() string { return f.srv.URL + "/v1" }

// calls returns the decoded POST /v1/responses bodies of the agent's turns
// (side calls left out) from the from-th request on, in order.
func (f *fakeResponses) calls(t testing.TB, from int) []responsesRequest {
	t.Helper()
	var out []responsesRequest
	for _, r := range f.requests()[from:] {
		if r.Method != http.MethodPost || r.Path != "/v1/responses" {
			continue
		}
		var q responsesRequest
		if err := json.Unmarshal(r.Body, &q); err != nil {
			t.Fatalf("fake Responses API: request body is not a Responses request: %v: %.200s", err, r.Body)
		}
		if !q.side() {
			out = append(out, q)
		}
	}
	return out
}

// sideCalls counts the side calls (a new thread's title) the fake has had.
func (f *fakeResponses) sideCalls() int {
	n := 0
	for _, r := range f.requests() {
		var q responsesRequest
		if json.Unmarshal(r.Body, &q) == nil && q.side() {
			n++
		}
	}
	return n
}

// turnCalls returns the turn calls whose newest user message holds marker:
// the model calls of the turn that marker's mention started.
func (f *fakeResponses) turnCalls(t testing.TB, marker string) []responsesRequest {
	t.Helper()
	var out []responsesRequest
	for _, q := range f.calls(t, 0) {
		if u := q.users(); len(u) > 0 && strings.Contains(u[len(u)-1], marker) {
			out = append(out, q)
		}
	}
	return out
}

func (f *fakeResponses) serve(w http.ResponseWriter, r *http.Request) {
	body, stall := f.record(r)

	if r.Method != http.MethodPost || r.URL.Path != "/v1/responses" {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusNotFound)
		fmt.Fprint(w, `{"error": {"type": "invalid_request_error", "message": "not served by the test's fake Responses API"}}`)
		return
	}
	var q responsesRequest
	if err := json.Unmarshal(body, &q); err != nil || !q.Stream {
		w.WriteHeader(http.StatusBadRequest)
		fmt.Fprint(w, `{"error": {"type": "invalid_request_error", "message": "the fake answers streamed requests only"}}`)
		return
	}
	if q.side() {
		f.answer(w, `{"title": "A fake title"}`)
		return
	}
	if !f.wait(r, stall) {
		return
	}
	if i, n := f.nextTool(q); i >= 0 {
		f.toolCall(w, f.scripts[i].calls[n], fmt.Sprintf("call_fake_%d_%d", i+1, n+1))
		return
	}
	f.answer(w, f.reply)
}

// nextTool is the script of q's turn and the index of the tool call the
// model asks for next in it, or -1 when it asks for none (no script's
// turn, or every call has its output). The turn is the newest user
// message and what follows it.
func (f *fakeResponses) nextTool(q responsesRequest) (script, n int) {
	last := -1
	for i, it := range q.Input {
		if it.Type == "message" && it.Role == "user" {
			last = i
		}
	}
	if last < 0 {
		return -1, 0
	}
	for _, it := range q.Input[last+1:] {
		if it.isOutput() {
			n++
		}
	}
	for i, s := range f.scripts {
		if strings.Contains(q.Input[last].text(), s.marker) && n < len(s.calls) {
			return i, n
		}
	}
	return -1, 0
}

// responseStream makes w a server-sent event stream and returns its sender: each
// event, named by its type, is written and flushed as one.
func responseStream(w http.ResponseWriter) func(ev map[string]any) {
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	fl, _ := w.(http.Flusher)
	return func(ev map[string]any) {
		b, _ := json.Marshal(ev)
		fmt.Fprintf(w, "event: %s\ndata: %s\n\n", ev["type"], b)
		if fl != nil {
			fl.Flush()
		}
	}
}

// responseCompleted is the response.completed event of response id, with the usage
// every call reports.
func responseCompleted(id string) map[string]any {
	u := codexCallUsage
	return map[string]any{"type": "response.completed", "response": map[string]any{"id": id, "status": "completed", "usage": map[string]any{
		"input_tokens": u.input, "input_tokens_details": map[string]any{"cached_tokens": u.cached},
		"output_tokens": u.output, "output_tokens_details": map[string]any{"reasoning_tokens": u.reasoning},
		"total_tokens": u.input + u.output,
	}}}
}

// answer streams text as one assistant message, in two deltas.
func (f *fakeResponses) answer(w http.ResponseWriter, text string) {
	send := responseStream(w)
	send(map[string]any{"type": "response.created", "response": map[string]any{"id": "resp_fake", "status": "in_progress"}})
	send(map[string]any{"type": "response.output_item.added", "output_index": 0, "item": map[string]any{
		"type": "message", "id": "msg_fake", "role": "assistant", "status": "in_progress", "content": []any{}}})
	half := len(text) / 2
	for _, part := range []string{text[:half], text[half:]} {
		send(map[string]any{"type": "response.output_text.delta", "item_id": "msg_fake", "output_index": 0, "content_index": 0, "delta": part})
	}
	send(map[string]any{"type": "response.output_item.done", "output_index": 0, "item": map[string]any{
		"type": "message", "id": "msg_fake", "role": "assistant", "status": "completed",
		"content": []any{map[string]any{"type": "output_text", "text": text, "annotations": []any{}}}}})
	send(responseCompleted("resp_fake"))
}

// toolCall streams a response that is one tool call, with call id id.
func (f *fakeResponses) toolCall(w http.ResponseWriter, tool codexTool, id string) {
	item := map[string]any{"type": "function_call", "id": "fc_" + id, "call_id": id, "name": tool.name, "status": "completed"}
	if tool.args != nil {
		args, _ := json.Marshal(tool.args)
		item["arguments"] = string(args)
	} else {
		item["type"], item["input"] = "custom_tool_call", tool.text
	}
	send := responseStream(w)
	send(map[string]any{"type": "response.created", "response": map[string]any{"id": "resp_fake_tool", "status": "in_progress"}})
	send(map[string]any{"type": "response.output_item.added", "output_index": 0, "item": item})
	send(map[string]any{"type": "response.output_item.done", "output_index": 0, "item": item})
	send(responseCompleted("resp_fake_tool"))
}
