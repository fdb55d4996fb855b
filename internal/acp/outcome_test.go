package acp

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/residentd/residentd/apitype"
	"github.com/residentd/residentd/internal/permission"
)

// TestToolCallOutcome: what became of a call is the answer to its
// permission request when it asked, else its last status.
func TestToolCallOutcome(t *testing.T) {
	for _, tt := range []struct {
		c    ToolCallSeen
		want string
	}{
		{ToolCallSeen{Status: "completed"}, ToolRan},
		{ToolCallSeen{Status: "failed"}, ToolFailed},
		{ToolCallSeen{Status: "failed", Unavailable: true}, ToolRefusedByAgent},
		{ToolCallSeen{Status: "in_progress"}, ToolUnfinished},
		{ToolCallSeen{}, ToolUnfinished},
		{ToolCallSeen{Asked: true}, ToolUnfinished},
		{ToolCallSeen{Asked: true, Decision: DecisionAllowed, DecidedBy: apitype.DecidedByPolicy, Status: "failed"}, ToolAllowedByPolicy},
		{ToolCallSeen{Asked: true, Decision: DecisionRejected, DecidedBy: apitype.DecidedByPolicy, Status: "failed"}, ToolRefusedByPolicy},
		{ToolCallSeen{Asked: true, Decision: DecisionAllowed, DecidedBy: DecidedByAsk, Status: "completed"}, ToolAskedAllowed},
		{ToolCallSeen{Asked: true, Decision: DecisionRejected, DecidedBy: DecidedByAsk}, ToolAskedRejected},
	} {
		if got := tt.c.Outcome(); got != tt.want {
			t.Errorf("%+v: outcome %q, want %q", tt.c, got, tt.want)
		}
	}
}

// TestToolCallOutcomesOfATurn: the built-in agent's own tools, in its
// default mode (nothing asked): one its rules take away (--deny-tool)
// fails as claude-agent-acp's do, "No such tool available", and is
// refused by the agent; a read of a file that is not there failed; an
// edit ran. A permission request the policy allows is allowed by it; one
// it puts to a person is answered by Ask.
func TestToolCallOutcomesOfATurn(t *testing.T) {
	spec := builtinSpec(t, "--deny-tool", "execute")
	spec.Permission = permission.ReadOnlyAsk
	spec.Ask = func(ctx context.Context, native string, tc apitype.ToolCall, options []apitype.PermissionOption) string {
		return "reject"
	}
	a := start(t, spec)
	native := newSession(t, a)
	missing := filepath.Join(t.TempDir(), "missing.txt")
	for _, tt := range []struct{ prompt, want string }{
		{"[[tool:execute]] [[tool:read:" + missing + "]] [[tool:edit]]", "tool-1 execute refused_by_agent, tool-2 read failed, tool-3 edit ran"},
		{"[[permission:read]]", "call-1 read allowed_by_policy"},
		{"[[permission:execute]]", "call-1 execute asked_rejected"},
	} {
		res, err := a.Prompt(context.Background(), native, tt.prompt, nil)
		if err != nil {
			t.Fatalf("Prompt %q: %v", tt.prompt, err)
		}
		var got []string
		for _, c := range res.ToolCalls {
			got = append(got, c.ID+" "+c.Kind+" "+c.Outcome())
		}
		if strings.Join(got, ", ") != tt.want {
			t.Errorf("%s: tool calls %q, want %q", tt.prompt, strings.Join(got, ", "), tt.want)
		}
	}
}
