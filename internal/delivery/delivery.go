// Package delivery owns the text a turn sends: the replay, the newest user
// turn, the mention's user turn with its brief, and the channel-context block.
package delivery

import (
	"strings"

	"github.com/residentd/residentd/internal/session"
)

// BuildPrompt flattens the whole conversation for a process that remembers
// nothing (a cold start). Each turn becomes "User: <text>" or
// "Assistant: <text>"; turns are separated by one blank line. System and tool
// turns are skipped (the framing is sent separately, tool output is the
// agent's own business). Multi-line text keeps its lines as they are; only the
// first line carries the prefix. Roles other than assistant/system/tool are
// rendered as User, matching LatestUserTurn.
//
// Example:
//
//	User: find the flaky spec
//
//	Assistant: it is refund_spec.rb
//	line two of the reply
func BuildPrompt(conv []session.Turn) string {
	var b strings.Builder
	for _, t := range conv {
		var prefix string
		switch t.Role {
		case session.RoleSystem, session.RoleTool:
			continue
		case session.RoleAssistant:
			prefix = "Assistant: "
		default:
			prefix = "User: "
		}
		if b.Len() > 0 {
			b.WriteString("\n\n")
		}
		b.WriteString(prefix)
		b.WriteString(t.Text)
	}
	return b.String()
}

// LatestUserTurn returns the text of the last turn that is not from the
// assistant, the system or a tool: all a warm process needs, since it already
// remembers everything before it. It returns "" when there is none.
func LatestUserTurn(conv []session.Turn) string {
	for i := len(conv) - 1; i >= 0; i-- {
		switch conv[i].Role {
		case session.RoleAssistant, session.RoleSystem, session.RoleTool:
			continue
		}
		return conv[i].Text
	}
	return ""
}
