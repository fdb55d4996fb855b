package policy

import (
	"reflect"
	"strings"
	"testing"

	"github.com/residentd/residentd/internal/permission"
)

func TestFor(t *testing.T) {
	claude := Agent{Name: ClaudeName, Version: "0.101.0"}
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

// TestEnforcedOnlyWhereProven: the decision, by agent name, version and
// policy. A policy is enforced by the agent's own controls only for a name
// and version line a test here proves (claude-agent-acp 0.49.x and 0.101.x,
// the built-in agent's own version); every other agent and version is
// advisory, its kind's controls still set. allow holds everywhere.
func TestEnforcedOnlyWhereProven(t *testing.T) {
	const (
		enforced = "enforced"
		advisory = "advisory"
	)
	policies := []permission.Policy{"", permission.Deny, permission.ReadOnly, permission.Ask, permission.ReadOnlyAsk}
	for _, tt := range []struct {
		name, version string
		want          string
		mode          string // the controls set either way
		unasked       string // in Unasked when advisory
	}{
		{ClaudeName, "0.49.0", enforced, ClaudeMode, ""},
		{ClaudeName, "0.49.7", enforced, ClaudeMode, ""},
		{ClaudeName, "0.101.0", enforced, ClaudeMode, ""},
		{ClaudeName, "v0.101.3+build.5", enforced, ClaudeMode, ""},
		{ClaudeName, "0.49.1-beta.2", enforced, ClaudeMode, ""},
		{ClaudeName, "0.50.0", advisory, ClaudeMode, "not proven for " + ClaudeName + " 0.50.0"},
		{ClaudeName, "0.491.0", advisory, ClaudeMode, "proven: 0.49.x, 0.101.x"},
		{ClaudeName, "0.4", advisory, ClaudeMode, "not proven"},
		{ClaudeName, "1.0.0", advisory, ClaudeMode, "not proven"},
		{ClaudeName, "", advisory, ClaudeMode, "not proven"},
		{ClaudeCodeName, "0.16.2", advisory, ClaudeMode, "claude-code-acp 0.16.2 ran one unasked under deny"},
		{ClaudeCodeName, "0.49.0", advisory, ClaudeMode, "Bash echo"},
		{BuiltinName, BuiltinVersion, enforced, BuiltinMode, ""},
		{BuiltinName, "2", advisory, BuiltinMode, "not proven for residentd-builtin 2"},
		{BuiltinName, "1.5", enforced, BuiltinMode, ""},
		{BuiltinName, "10", advisory, BuiltinMode, "proven: 1.x"},
		{"gemini-cli", "0.61.0", advisory, "", "residentd knows no control"},
		{"codex-acp", "0.49.0", advisory, "", "residentd knows no control"},
		{"", "", advisory, "", "residentd knows no control"},
	} {
		for _, p := range policies {
			a := Agent{Name: tt.name, Version: tt.version}
			c := For(a, p)
			got := advisory
			if c.Enforced {
				got = enforced
			}
			if got != tt.want || c.Mode != tt.mode {
				t.Errorf("%s under %q: %s with mode %q (%+v), want %s with mode %q", a, p, got, c.Mode, c, tt.want, tt.mode)
				continue
			}
			if c.Enforced && c.Proof == "" {
				t.Errorf("%s under %q: enforced with no proof named", a, p)
			}
			if !c.Enforced && (c.Proof != "" || !strings.Contains(c.Unasked, tt.unasked)) {
				t.Errorf("%s under %q: advisory %q (proof %q), want it to say %q", a, p, c.Unasked, c.Proof, tt.unasked)
			}
			if c := For(a, permission.Allow); !c.Enforced || c.Mode != "" || c.Meta != nil {
				t.Errorf("%s under allow: %+v, want enforced with nothing set", a, c)
			}
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
