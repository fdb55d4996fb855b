package interop

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/residentd/residentd/apitype"
	"github.com/residentd/residentd/internal/config"
	"github.com/residentd/residentd/internal/metrics"
	"github.com/residentd/residentd/internal/permission"
)

// policyTool is one tool call the fake model asks for in the policy test.
type policyTool struct {
	name string
	// ran says whether the tool ran, from its result and its effect.
	ran func(result string, workdir string) bool
}

// outcome is what became of one tool call: "ran", "refused" (asked, and
// the policy or a person said no) or "blocked" (the agent would not run
// it, unasked); asked says whether it reached residentd as a request, and
// person whether as a permission_request event.
type outcome struct {
	What   string
	Asked  bool
	Person bool
}

func (o outcome) String() string {
	s := o.What
	if o.Person {
		s += " (asked a person)"
	} else if o.Asked {
		s += " (asked, the policy answered)"
	} else {
		s += " (unasked)"
	}
	return s
}

// TestClaudePolicy: with claude-agent-acp 0.49 and 0.101 against a fake model
// that asks, in one turn, for a Bash echo, a Bash that writes a file, a Read
// inside the working directory and a Read outside it, each policy holds as
// docs/AGENTS.md's table says: checked by each command's effect and by the
// tool results the model's next request carries, and under ask every
// execution reaches the stream as a permission request (the person allows
// the echo and rejects the rest).
//
// Not parallel: its six claude-agent-acp sessions would crowd the other
// tests' out of their time limits on a small machine.
func TestClaudePolicy(t *testing.T) {
	want := map[permission.Policy][4]string{
		permission.Deny:     {"blocked (unasked)", "blocked (unasked)", "ran (unasked)", "refused (asked, the policy answered)"},
		permission.ReadOnly: {"blocked (unasked)", "blocked (unasked)", "ran (unasked)", "refused (asked, the policy answered)"},
		permission.Ask:      {"ran (asked a person)", "refused (asked a person)", "ran (unasked)", "refused (asked a person)"},
	}
	var mu sync.Mutex
	table := map[string][4]string{}
	t.Cleanup(func() {
		mu.Lock()
		defer mu.Unlock()
		for _, k := range []string{"0.49/deny", "0.49/read-only", "0.49/ask", "0.101/deny", "0.101/read-only", "0.101/ask"} {
			if r, ok := table[k]; ok {
				t.Logf("| %s | %s | %s | %s | %s |", k, r[0], r[1], r[2], r[3])
			}
		}
	})
	for _, version := range []string{"0.49", "0.101"} {
		for _, pol := range []permission.Policy{permission.Deny, permission.ReadOnly, permission.Ask} {
			t.Run(version+"/"+string(pol), func(t *testing.T) {
				got := claudePolicyTurn(t, version, pol)
				mu.Lock()
				table[version+"/"+string(pol)] = got
				mu.Unlock()
				if got != want[pol] {
					t.Fatalf("claude-agent-acp %s under %s: echo, write, read inside, read outside:\n got  %q\n want %q", version, pol, got, want[pol])
				}
			})
		}
	}
}

func claudePolicyTurn(t *testing.T, version string, pol permission.Policy) [4]string {
	api := newFakeAPI(t, "Done with the tools.")
	workdir := t.TempDir()
	outsideDir := t.TempDir()
	made := filepath.Join(workdir, "made-by-bash")
	if err := os.WriteFile(filepath.Join(workdir, "in.txt"), []byte("inside-content"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(outsideDir, "out.txt"), []byte("outside-content"), 0o644); err != nil {
		t.Fatal(err)
	}
	const marker = "TOOLS-PLEASE"
	api.tools = []toolUse{
		{marker: marker, name: "Bash", input: map[string]any{"command": "echo hi-from-bash", "description": "Say hi"}},
		{marker: marker, name: "Bash", input: map[string]any{"command": "touch " + made, "description": "Make a file"}},
		{marker: marker, name: "Read", input: map[string]any{"file_path": filepath.Join(workdir, "in.txt")}},
		{marker: marker, name: "Read", input: map[string]any{"file_path": filepath.Join(outsideDir, "out.txt")}},
	}
	env := api.env()
	var b config.Binding
	if version == "0.49" {
		b = claudeBinding(t, t.TempDir(), env)
	} else {
		b = claude0101Binding(t, t.TempDir(), env)
	}
	b.Permission, b.Dir = pol, workdir
	h := newHarness(t, b)
	ctx := testCtx(t)
	asked := map[string]bool{}   // tool call ids put to a person
	decided := map[string]bool{} // tool titles the policy answered
	_, err := h.d.Turn(ctx, apitype.TurnRequest{Channel: "ch", Binding: "b-claude", Text: "@claude use the tools " + marker}, func(ev apitype.Event) {
		switch ev.Event {
		case apitype.EventPermissionRequest:
			p := ev.Permission
			asked[p.ToolCall.Title] = true
			answer := "reject_once"
			if strings.Contains(p.ToolCall.Title, "echo hi-from-bash") {
				answer = "allow_once"
			}
			answerWith(t, h, ev.RunID, p, answer)
		case apitype.EventPermissionDecision:
			if ev.Decision.DecidedBy == apitype.DecidedByPolicy {
				decided[ev.Decision.Tool] = true
			}
		}
	})
	if err != nil {
		t.Fatalf("turn: %v", err)
	}
	// The versions this test proves are reported as enforced: no advisory.
	for _, p := range h.d.Status().PolicyAdvisories {
		if p.Binding == "b-claude" {
			t.Errorf("claude-agent-acp %s under %s reported advisory: %+v", version, pol, p)
		}
	}
	calls := api.modelCalls(t, marker)
	if len(calls) == 0 {
		t.Fatal("the model was never called")
	}
	results := calls[len(calls)-1].toolResultsByID()
	if len(results) != 4 {
		t.Fatalf("the model's last request carries %d tool results, want 4: %q", len(results), results)
	}
	var got [4]string
	_, statErr := os.Stat(made)
	for i, tt := range []struct {
		id, title, effect string
		ran               bool
	}{
		{"toolu_fake_1", "echo hi-from-bash", "hi-from-bash", false},
		{"toolu_fake_2", "touch " + made, "", statErr == nil},
		{"toolu_fake_3", "in.txt", "inside-content", false},
		{"toolu_fake_4", "out.txt", "outside-content", false},
	} {
		res := results[tt.id]
		o := outcome{}
		ran := tt.ran || tt.effect != "" && strings.Contains(res, tt.effect) && !strings.HasPrefix(res, "is_error=true")
		if tt.effect == "" && !tt.ran && strings.HasPrefix(res, "is_error=false") {
			ran = true // the touch reported success yet left no file
		}
		for title := range asked {
			if strings.Contains(title, tt.title) {
				o.Asked, o.Person = true, true
			}
		}
		for title := range decided {
			if strings.Contains(title, tt.title) {
				o.Asked = true
			}
		}
		switch {
		case ran:
			o.What = "ran"
		case o.Asked && strings.Contains(res, "refused permission"):
			o.What = "refused"
		case strings.Contains(res, "No such tool available"):
			o.What = "blocked"
		default:
			o.What = "failed: " + res
		}
		got[i] = o.String()
	}
	t.Logf("tool results the model saw: %q", results)
	// Every tool call is counted once, by kind and by what became of it:
	// a Bash the deny rules took away is refused by the agent (nothing
	// ran), not counted as run.
	counted := map[string]float64{}
	for _, kind := range []string{"execute", "read"} {
		for _, o := range metrics.ToolOutcomes {
			if n := testutil.ToFloat64(h.m.ToolCalls.WithLabelValues("b-claude", kind, o)); n != 0 {
				counted[kind+"/"+o] = n
			}
		}
	}
	wantCounted := map[permission.Policy]map[string]float64{
		permission.Deny:     {"execute/refused_by_agent": 2, "read/ran": 1, "read/refused_by_policy": 1},
		permission.ReadOnly: {"execute/refused_by_agent": 2, "read/ran": 1, "read/refused_by_policy": 1},
		permission.Ask:      {"execute/asked_allowed": 1, "execute/asked_rejected": 1, "read/ran": 1, "read/asked_rejected": 1},
	}[pol]
	if !reflect.DeepEqual(counted, wantCounted) {
		t.Errorf("residentd_agent_tool_calls_total by kind/outcome = %v, want %v", counted, wantCounted)
	}
	return got
}

// toolResultsByID returns the request's tool results by tool_use_id, each
// as "is_error=B CONTENT".
func (m messagesRequest) toolResultsByID() map[string]string {
	out := map[string]string{}
	for _, msg := range m.Messages {
		var blocks []struct {
			Type      string          `json:"type"`
			ToolUseID string          `json:"tool_use_id"`
			Content   json.RawMessage `json:"content"`
			IsError   bool            `json:"is_error"`
		}
		if json.Unmarshal(msg.Content, &blocks) != nil {
			continue
		}
		for _, b := range blocks {
			if b.Type == "tool_result" {
				out[b.ToolUseID] = fmt.Sprintf("is_error=%v %s", b.IsError, b.Content)
			}
		}
	}
	return out
}
