package acp

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"testing"

	"github.com/residentd/residentd/apitype"
)

// thoughts is the text of the thoughts on collects.
type thoughts struct {
	mu   sync.Mutex
	text []string
}

func (th *thoughts) on(u Update) {
	if u.Kind == apitype.UpdateThought {
		th.mu.Lock()
		th.text = append(th.text, u.Text)
		th.mu.Unlock()
	}
}

func (th *thoughts) with(prefix string) string {
	th.mu.Lock()
	defer th.mu.Unlock()
	for _, s := range th.text {
		if strings.HasPrefix(s, prefix) {
			return s
		}
	}
	return ""
}

// TestElicitForm: the built-in agent's form reaches Spec.Elicit with its
// session, message and schema as the agent wrote them, and the answer
// goes back to the agent; an agent with no Spec.Elicit is told of no form
// capability, and a form it sends anyway is answered cancel.
func TestElicitForm(t *testing.T) {
	spec := builtinSpec(t)
	var (
		mu  sync.Mutex
		got []apitype.ElicitationRequest
		in  []string
	)
	spec.Elicit = func(ctx context.Context, native string, req apitype.ElicitationRequest) apitype.ElicitationAnswer {
		mu.Lock()
		got, in = append(got, req), append(in, native)
		mu.Unlock()
		return apitype.ElicitationAnswer{Action: apitype.ElicitAccept, Content: map[string]any{"env": "production", "confirm": true}}
	}
	a := start(t, spec)
	native := newSession(t, a)
	var th thoughts
	if _, err := a.Prompt(context.Background(), native, "[[elicit:deploy]]", th.on); err != nil {
		t.Fatal(err)
	}
	if s := th.with("elicit deploy"); s != `elicit deploy ok: accept confirm=true env="production"` {
		t.Errorf("the agent got %q", s)
	}
	var schema struct {
		Required []string `json:"required"`
	}
	if len(got) != 1 || in[0] != native || got[0].Message != "builtin asks: deploy" || json.Unmarshal(got[0].Schema, &schema) != nil || len(schema.Required) != 2 {
		t.Fatalf("Elicit got %+v in %q, want the form of session %s", got, in, native)
	}

	plain := start(t, builtinSpec(t))
	pn := newSession(t, plain)
	var th2 thoughts
	if _, err := plain.Prompt(context.Background(), pn, "[[elicit:deploy]]", th2.on); err != nil {
		t.Fatal(err)
	}
	if s := th2.with("elicit deploy"); s != "elicit deploy ok: cancel" {
		t.Errorf("without Spec.Elicit the agent got %q", s)
	}
}

// TestElicitReply: the answer line is a JSON-RPC response with the
// request's own id; content goes with accept only.
func TestElicitReply(t *testing.T) {
	for _, tc := range []struct {
		id   string
		ans  apitype.ElicitationAnswer
		want string
	}{
		{`7`, apitype.ElicitationAnswer{Action: "accept", Content: map[string]any{"n": 3}}, `{"jsonrpc":"2.0","id":7,"result":{"action":"accept","content":{"n":3}}}` + "\n"},
		{`"e-1"`, apitype.ElicitationAnswer{Action: "accept"}, `{"jsonrpc":"2.0","id":"e-1","result":{"action":"accept","content":{}}}` + "\n"},
		{`8`, apitype.ElicitationAnswer{Action: "decline", Content: map[string]any{"n": 3}}, `{"jsonrpc":"2.0","id":8,"result":{"action":"decline"}}` + "\n"},
	} {
		if got := string(elicitReply(json.RawMessage(tc.id), tc.ans)); got != tc.want {
			t.Errorf("reply %s", got)
		}
	}
}
