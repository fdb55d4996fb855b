package interop

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/residentd/residentd/apitype"
	"github.com/residentd/residentd/internal/config"
	"github.com/residentd/residentd/internal/permission"
)

// TestClaude0101Elicitation: the fake model calls claude-agent-acp 0.101's
// AskUserQuestion tool; the agent, told at initialize that residentd
// takes forms, asks it as an elicitation (a oneOf single-select and its
// free-text companion); the form reaches the run's stream; an answer
// outside the options is refused against the form; the accepted answer,
// by the mention's author (the binding's approvers: author), reaches the
// model as the tool's result. Over ACP v1 and v2 alike.
func TestClaude0101Elicitation(t *testing.T) {
	t.Parallel()
	for _, protocol := range []string{"1", "auto"} {
		t.Run("protocol="+protocol, func(t *testing.T) {
			t.Parallel()
			claudeElicits(t, protocol)
		})
	}
}

// claudeElicits is TestClaude0101Elicitation over protocol (auto: v2).
func claudeElicits(t *testing.T, protocol string) {
	api := newFakeAPI(t, "Deploying to staging.")
	api.tool = &toolUse{marker: "ASK-PLEASE", name: "AskUserQuestion", input: map[string]any{
		"questions": []any{map[string]any{
			"question": "Which environment should I deploy to?", "header": "Env", "multiSelect": false,
			"options": []any{
				map[string]any{"label": "staging", "description": "the test cluster"},
				map[string]any{"label": "production", "description": "the real one"},
			},
		}},
	}}
	env := api.env()
	if protocol == "auto" {
		env["CLAUDE_AGENT_ACP_PROTOCOL"] = "auto"
	}
	b := claude0101Binding(t, t.TempDir(), env)
	b.Permission = permission.Ask
	b.Approvers = config.Approvers{Mode: config.ApproversAuthor}
	b.Protocol = protocol
	tap := t.TempDir()
	h := newHarness(t, tapped(t, b, tap))
	ctx := testCtx(t)
	var (
		asked    *apitype.ElicitationRequest
		answered *apitype.ElicitationAnswer
	)
	done, err := h.d.Turn(ctx, apitype.TurnRequest{Channel: "ch", Binding: "b-claude", Author: "u-ana", Text: "@claude deploy it ASK-PLEASE"}, func(ev apitype.Event) {
		switch ev.Event {
		case apitype.EventElicitationRequest:
			asked = ev.Elicitation
			bad := apitype.ElicitationAnswer{Action: apitype.ElicitAccept, Content: map[string]any{"question_0": "moon"}, AnsweredBy: "u-ana"}
			if err := h.d.AnswerElicitation(ev.RunID, ev.Elicitation.ID, bad); err == nil || !strings.Contains(err.Error(), "not one of") {
				t.Errorf("an answer outside the options: %v", err)
			}
			good := apitype.ElicitationAnswer{Action: apitype.ElicitAccept, Content: map[string]any{"question_0": "staging"}, AnsweredBy: "u-ana"}
			if err := h.d.AnswerElicitation(ev.RunID, ev.Elicitation.ID, good); err != nil {
				t.Errorf("answer: %v", err)
			}
		case apitype.EventElicitationAnswer:
			answered = ev.Elicited
		case apitype.EventPermissionRequest:
			t.Errorf("AskUserQuestion came as a permission request: %+v", ev.Permission)
		}
	})
	if err != nil {
		t.Fatalf("turn: %v", err)
	}
	if asked == nil {
		t.Fatal("no elicitation_request reached the stream")
	}
	t.Logf("form: %q %s", asked.Message, asked.Schema)
	if asked.Message != "Which environment should I deploy to?" || !strings.Contains(string(asked.Schema), `"question_0"`) || asked.ToolCallID == "" {
		t.Errorf("elicitation request %+v", asked)
	}
	if answered == nil || answered.Action != apitype.ElicitAccept || answered.AnsweredBy != "u-ana" {
		t.Errorf("elicitation_answer %+v", answered)
	}
	var result string
	for _, call := range api.modelCalls(t, "ASK-PLEASE") {
		for _, m := range call.Messages {
			for _, tr := range m.toolResults() {
				result = tr
			}
		}
	}
	t.Logf("tool result: %s; reply %q", result, done.Text)
	if !strings.Contains(result, "staging") || strings.Contains(result, "is_error=true") {
		t.Errorf("the model got the tool result %q; want the answer staging", result)
	}
	if protocol == "auto" {
		for _, msgs := range tapRecords(t, tap) {
			v2Negotiated(t, msgs)
		}
	}
}

// TestCodexElicitation: in Codex's plan collaboration mode (the session
// option collaboration_mode) the fake model calls request_user_input;
// codex-acp 2.6 asks it as an elicitation, which reaches the run's stream;
// the person's answer reaches the model as the tool's output. Over ACP v1
// and v2 alike.
func TestCodexElicitation(t *testing.T) {
	t.Parallel()
	for _, protocol := range []string{"1", "2"} {
		t.Run("protocol="+protocol, func(t *testing.T) {
			t.Parallel()
			codexElicits(t, protocol)
		})
	}
}

// codexElicits is TestCodexElicitation over protocol.
func codexElicits(t *testing.T, protocol string) {
	h, api := codexHarness(t, "Deploying to staging.", func(b *config.Binding) {
		b.SessionOptions = map[string]string{"collaboration_mode": "plan"}
		b.Protocol = protocol
	})
	api.scripts = []toolScript{{marker: "ASK-PLEASE", calls: []codexTool{{name: "request_user_input", args: map[string]any{
		"questions": []any{map[string]any{"id": "env", "header": "Env", "question": "Which environment should I deploy to?",
			"options": []any{map[string]any{"label": "staging", "description": "the test cluster"}, map[string]any{"label": "production", "description": "the real one"}}}},
	}}}}}
	ctx := testCtx(t)
	var asked *apitype.ElicitationRequest
	done, err := h.d.Turn(ctx, apitype.TurnRequest{Channel: "ch", Binding: "b-codex", Author: "u-ana", Text: "@codex deploy it ASK-PLEASE"}, func(ev apitype.Event) {
		if ev.Event == apitype.EventElicitationRequest {
			asked = ev.Elicitation
			t.Logf("form: %q %s", ev.Elicitation.Message, ev.Elicitation.Schema)
			var schema struct {
				Properties map[string]json.RawMessage `json:"properties"`
			}
			_ = json.Unmarshal(ev.Elicitation.Schema, &schema)
			content := map[string]any{}
			for name := range schema.Properties {
				if name == "env" {
					content[name] = "staging"
				}
			}
			if err := h.d.AnswerElicitation(ev.RunID, ev.Elicitation.ID, apitype.ElicitationAnswer{Action: apitype.ElicitAccept, Content: content, AnsweredBy: "u-ana"}); err != nil {
				t.Errorf("answer: %v", err)
			}
		}
	})
	if err != nil {
		t.Fatalf("turn: %v", err)
	}
	if asked == nil {
		t.Fatal("no elicitation_request reached the stream")
	}
	var outputs []string
	for _, q := range api.turnCalls(t, "ASK-PLEASE") {
		for _, o := range q.outputs() {
			outputs = append(outputs, o)
		}
	}
	t.Logf("tool outputs: %q; reply %q", outputs, done.Text)
	if !strings.Contains(strings.Join(outputs, "\n"), "staging") {
		t.Errorf("the model got %q; want the answer staging", outputs)
	}
}
