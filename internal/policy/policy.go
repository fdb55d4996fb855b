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
	// Enforced: the agent is told the whole policy and a test in this
	// repository proves its controls hold it (Proof), so what it runs
	// unasked is within it. When false the policy is advisory, even where
	// Mode and Meta are set: residentd sets what it knows of the agent's
	// controls, and claims nothing of them.
	Enforced bool
	// Unasked is what the agent runs without asking despite the policy,
	// where known, or why the policy is not known to hold (only when not
	// Enforced).
	Unasked string
	// By names the controls, for the log and the docs.
	By string
	// Proof names the test that proves the controls for this agent's name
	// and version (only when Enforced, and the policy is not allow).
	Proof string
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

// KindOf recognises an agent by its agentInfo name: which controls
// residentd knows for it (whether they are proven is ProofOf's).
func KindOf(a Agent) Kind {
	switch a.Name {
	case ClaudeName, ClaudeCodeName:
		return KindClaude
	case BuiltinName:
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

// Proven is an agent, by its agentInfo name and a range of versions,
// whose controls a test in this repository proves to carry every policy.
type Proven struct {
	Name string
	// Version is a release line: "0.49" is 0.49 and every 0.49.x; "1" is
	// 1 and every 1.x (the built-in agent gives "1").
	Version string
	Test    string // the test that proves it, for the log and the docs
}

// Proofs are the agents whose controls are proven, and by which test. An
// agent not listed here, or of a version outside its line, is advisory
// whatever controls residentd sets on it: claude-agent-acp's rules are
// measured by TestClaudePolicy for 0.49 and 0.101 only, and the older
// claude-code-acp (@zed-industries) ran a Bash echo unasked under deny with
// the same controls set (measured with 0.16.2).
var Proofs = []Proven{
	{Name: ClaudeName, Version: "0.49", Test: "TestClaudePolicy (internal/interop)"},
	{Name: ClaudeName, Version: "0.101", Test: "TestClaudePolicy (internal/interop)"},
	{Name: BuiltinName, Version: BuiltinVersion, Test: "TestPolicyModeAfterRestore (internal/daemon)"},
}

// The agentInfo names the package knows.
const (
	ClaudeName     = "@agentclientprotocol/claude-agent-acp"
	ClaudeCodeName = "@zed-industries/claude-code-acp" // claude-agent-acp's predecessor
	BuiltinName    = "residentd-builtin"
	// BuiltinVersion is the version the built-in agent gives.
	BuiltinVersion = "1"
)

// ProofOf returns the proof that covers agent a, if any.
func ProofOf(a Agent) (Proven, bool) {
	for _, p := range Proofs {
		if p.Name == a.Name && inLine(a.Version, p.Version) {
			return p, true
		}
	}
	return Proven{}, false
}

// inLine reports whether version v is of release line line: its dotted
// numbers begin with line's ("0.49.2" and "0.49.0-beta.1" are of "0.49",
// "0.491.0" is not), or equal it where line has as many numbers as v.
func inLine(v, line string) bool {
	if v == "" || line == "" {
		return false
	}
	core, _, _ := strings.Cut(strings.TrimPrefix(v, "v"), "+") // build metadata says nothing of the release
	if core == line {
		return true
	}
	return strings.HasPrefix(core, line+".") || strings.HasPrefix(core, line+"-")
}

// provenLines lists the proven versions of the agent named name.
func provenLines(name string) string {
	var out []string
	for _, p := range Proofs {
		if p.Name == name {
			out = append(out, p.Version+".x")
		}
	}
	return strings.Join(out, ", ")
}

// For returns the controls that carry policy p to agent a: what residentd
// sets on its sessions, and whether a test proves they hold (Enforced).
// An agent of a kind residentd knows gets its kind's controls whatever
// its version; only a proven name and version is Enforced.
func For(a Agent, p permission.Policy) Controls {
	if p == "" {
		p = permission.Deny
	}
	if p == permission.Allow {
		// Nothing to hold back: whatever the agent runs unasked is allowed.
		return Controls{Enforced: true, By: "nothing to enforce: the policy allows every tool"}
	}
	var c Controls
	switch KindOf(a) {
	case KindClaude:
		c = claude(p)
	case KindBuiltin:
		c = Controls{Mode: BuiltinMode, By: fmt.Sprintf("session mode %q (asks before every tool call); the requests are answered by the policy", BuiltinMode)}
	case KindCodex:
		// Advisory whatever its version: the sandbox fails writes and what
		// leaves it is asked, but its commands run unasked and read any
		// file (TestCodexPolicy, internal/interop).
		return Controls{Mode: CodexMode, By: fmt.Sprintf("session mode %q (Codex's read-only sandbox; a command run outside it and every edit are asked, and answered by the policy)", CodexMode),
			Unasked: "shell commands in Codex's read-only sandbox: their writes fail, but they read any file, outside the binding's dir too"}
	default:
		return Controls{Unasked: "unknown: residentd knows no control of this agent, which may run tools without asking"}
	}
	if proof, ok := ProofOf(a); ok {
		c.Enforced, c.Proof = true, proof.Test
		return c
	}
	switch {
	case a.Name == ClaudeCodeName:
		c.Unasked = fmt.Sprintf("commands it judges safe (a Bash echo): claude-code-acp 0.16.2 ran one unasked under deny with these controls set (%s); only %s %s are proven", c.By, ClaudeName, provenLines(ClaudeName))
	default:
		c.Unasked = fmt.Sprintf("not proven for %s: residentd sets %s, but no test here proves them for this version (proven: %s)", a, c.By, provenLines(a.Name))
	}
	return c
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
	return Controls{Mode: ClaudeMode, Meta: meta, By: by}
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
