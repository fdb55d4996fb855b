package policy

import (
	"reflect"
	"strings"
	"testing"

	"github.com/residentd/residentd/internal/permission"
)

func TestFor(t *testing.T) {
	claude := Agent{Name: "@agentclientprotocol/claude-agent-acp", Version: "0.101.0"}
	rules := func(c Controls) map[string]any {
		return c.Meta["claudeCode"].(map[string]any)["options"].(map[string]any)["settings"].(map[string]any)["permissions"].(map[string]any)
	}
	for _, tt := range []struct {
		p    permission.Policy
		rule string
	}{
		{"", "deny"}, {permission.Deny, "deny"}, {permission.ReadOnly, "deny"},
		{permission.Ask, "ask"}, {permission.ReadOnlyAsk, "ask"},
	} {
		c := For(claude, tt.p)
		if !c.Enforced || c.Mode != ClaudeMode || len(rules(c)) != 1 || !reflect.DeepEqual(rules(c)[tt.rule], ClaudeExecWrite) {
			t.Errorf("claude-agent-acp under %q: %+v, want mode %q and %s rules for %v", tt.p, c, ClaudeMode, tt.rule, ClaudeExecWrite)
		}
	}
	if c := For(claude, permission.Allow); !c.Enforced || c.Mode != "" || c.Meta != nil {
		t.Errorf("allow sets %+v, want nothing", c)
	}
	if c := For(Agent{Name: "residentd-builtin", Version: "1"}, permission.Deny); !c.Enforced || c.Mode != BuiltinMode || c.Meta != nil {
		t.Errorf("built-in agent under deny: %+v", c)
	}
	codex := Agent{Name: "@agentclientprotocol/codex-acp", Version: "2.6.0"}
	for _, p := range []permission.Policy{permission.Deny, permission.ReadOnly, permission.Ask, permission.ReadOnlyAsk} {
		if c := For(codex, p); c.Enforced || c.Mode != CodexMode || c.Meta != nil || c.Unasked == "" {
			t.Errorf("codex-acp under %q: %+v, want mode %q, advisory with what it runs unasked", p, c, CodexMode)
		}
	}
	if c := For(codex, permission.Allow); !c.Enforced || c.Mode != "" {
		t.Errorf("codex-acp under allow: %+v, want nothing set", c)
	}
	for _, a := range []Agent{{}, {Name: "gemini-cli", Version: "0.61"}} {
		if c := For(a, permission.Deny); c.Enforced || c.Mode != "" || c.Meta != nil || c.Unasked == "" {
			t.Errorf("%s under deny: %+v, want advisory with nothing set", a, c)
		}
	}
}

func TestCheckMode(t *testing.T) {
	c := Controls{Mode: "default"}
	if err := c.CheckMode([]string{"auto", "default"}, true); err != nil {
		t.Errorf("listed mode refused: %v", err)
	}
	if err := c.CheckMode([]string{"auto"}, true); err == nil || !strings.Contains(err.Error(), "it lists auto") {
		t.Errorf("unlisted mode: %v", err)
	}
	if err := c.CheckMode(nil, false); err == nil || !strings.Contains(err.Error(), "lists no session modes") {
		t.Errorf("no modes: %v", err)
	}
	if err := (Controls{}).CheckMode(nil, false); err != nil {
		t.Errorf("no mode needed: %v", err)
	}
}
