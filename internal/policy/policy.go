// Package policy owns how a binding's permission policy reaches the agent
// itself: for each agent residentd knows, which of the agent's own controls
// (its session mode, its tool rules in the session request's _meta) carry
// each policy, and, for an agent it cannot tell, what the agent runs
// without asking.
//
// An agent asks (session/request_permission) only for what it decides to
// ask about; internal/permission answers those. What it runs unasked is
// governed by its own controls, so a policy holds only where they are set.
package policy

import (
	"fmt"
	"slices"
	"strings"

	"github.com/residentd/residentd/internal/permission"
)

// Agent is who an agent says it is at initialize (ACP agentInfo).
type Agent struct {
	Name    string
	Version string
}

func (a Agent) String() string {
	switch {
	case a.Name == "":
		return "(an agent that gave no agentInfo)"
	case a.Version == "":
		return a.Name
	}
	return a.Name + " " + a.Version
}

// Advisory is what health, status and the log say of a binding whose
// agent cannot be told its policy.
const Advisory = "policy advisory for this agent: it runs some tools without asking"

// Controls are what residentd sets on an agent's sessions to carry a
// binding's policy.
type Controls struct {
	// Mode is the session mode (session/set_mode) every session must be in;
	// "" leaves the agent's own.
	Mode string
	// Meta goes as the _meta of session/new, session/load and
	// session/resume; nil sends none.
	Meta map[string]any
	// Enforced: the agent is told the whole policy, so what it runs unasked
	// is within it. When false the policy is advisory.
	Enforced bool
	// Unasked is what the agent runs without asking despite the policy,
	// where known (only when not Enforced).
	Unasked string
	// By names the controls, for the log and the docs.
	By string
}

// Kind names the agents the package knows.
type Kind string

// Kinds.
const (
	KindUnknown Kind = ""
	KindClaude  Kind = "claude-agent-acp"
	KindBuiltin Kind = "residentd-builtin"
	KindCodex   Kind = "codex-acp"
)

// KindOf recognises an agent by its agentInfo name.
func KindOf(a Agent) Kind {
	switch a.Name {
	case "@agentclientprotocol/claude-agent-acp", "@zed-industries/claude-code-acp":
		return KindClaude
	case "residentd-builtin":
		return KindBuiltin
	case "@agentclientprotocol/codex-acp":
		return KindCodex
	}
	return KindUnknown
}

// ClaudeMode is the claude-agent-acp mode in which its CLI asks before every
// tool call its rules do not allow: not "auto" (a classifier decides, 0.101's
// default), "acceptEdits" (edits in the working directory run unasked),
// "bypassPermissions" or "dontAsk".
const ClaudeMode = "default"

// ClaudeExecWrite are the claude-agent-acp tools that execute or write. Its
// CLI runs commands it judges read-only (echo, ls, cat inside the working
// directory) unasked in every mode unless a rule names the tool: an ask rule
// makes every call of it ask, a deny rule takes the tool away.
var ClaudeExecWrite = []string{"Bash", "PowerShell", "Monitor", "Edit", "MultiEdit", "Write", "NotebookEdit"}

// BuiltinMode is the built-in agent's mode in which it asks before each
// tool call ([[tool:KIND]] directives); in its default mode, "auto", it
// runs them unasked.
const BuiltinMode = "manual"

// CodexMode is the codex-acp mode that runs the Codex CLI's commands in a
// read-only sandbox and asks (session/request_permission) before anything
// leaves it: a command the model wants run outside the sandbox, an edit.
// Its default mode, "agent", lets commands write in the working directory
// unasked and has a model, not a person, review the rest.
const CodexMode = "read-only"

// For returns the controls that carry policy p to agent a.
func For(a Agent, p permission.Policy) Controls {
	if p == "" {
		p = permission.Deny
	}
	if p == permission.Allow {
		// Nothing to hold back: whatever the agent runs unasked is allowed.
		return Controls{Enforced: true, By: "nothing to enforce: the policy allows every tool"}
	}
	switch KindOf(a) {
	case KindClaude:
		return claude(p)
	case KindBuiltin:
		return Controls{Mode: BuiltinMode, Enforced: true, By: fmt.Sprintf("session mode %q (asks before every tool call); the requests are answered by the policy", BuiltinMode)}
	case KindCodex:
		// Advisory: the sandbox fails writes and what leaves it is asked,
		// but its commands run unasked and read any file
		// (TestCodexPolicy, internal/interop).
		return Controls{Mode: CodexMode, By: fmt.Sprintf("session mode %q (Codex's read-only sandbox; a command run outside it and every edit are asked, and answered by the policy)", CodexMode),
			Unasked: "shell commands in Codex's read-only sandbox: their writes fail, but they read any file, outside the binding's dir too"}
	}
	return Controls{Unasked: "unknown: residentd knows no control of this agent, which may run tools without asking"}
}

// claude is For for claude-agent-acp: its mode "default", and rules in the
// settings of _meta.claudeCode.options (the Claude Agent SDK's options, which
// both 0.49 and 0.101 pass through, on session/new, session/load and
// session/resume alike). Rules given there come on top of the user's and
// project's settings; deny and ask rules win over their allow rules.
func claude(p permission.Policy) Controls {
	rule := "ask"
	if p == permission.Deny || p == permission.ReadOnly {
		// Taken away: the model is told the tool is not available, and
		// nothing is asked (nor shown as a request).
		rule = "deny"
	}
	tools := slices.Clone(ClaudeExecWrite)
	meta := map[string]any{"claudeCode": map[string]any{"options": map[string]any{
		"settings": map[string]any{"permissions": map[string]any{rule: tools}},
	}}}
	by := fmt.Sprintf("session mode %q; _meta.claudeCode.options.settings.permissions.%s = [%s]", ClaudeMode, rule, strings.Join(tools, ", "))
	return Controls{Mode: ClaudeMode, Meta: meta, Enforced: true, By: by}
}

// CheckMode reports a mode the controls need that the agent does not list
// for the session (listed: it lists modes at all).
func (c Controls) CheckMode(available []string, listed bool) error {
	if c.Mode == "" || listed && slices.Contains(available, c.Mode) {
		return nil
	}
	if !listed {
		return fmt.Errorf("the policy needs session mode %q, and the agent lists no session modes", c.Mode)
	}
	return fmt.Errorf("the policy needs session mode %q, which the agent does not list (it lists %s)", c.Mode, strings.Join(available, ", "))
}
