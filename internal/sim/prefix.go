package sim

import (
	"fmt"
	"strings"
	"time"
)

var toolNames = []string{
	"read_file", "write_file", "edit_file", "list_directory", "glob", "grep", "run_shell", "run_tests",
	"git_status", "git_diff", "git_log", "web_fetch", "web_search", "todo_write", "task", "notebook_edit",
	"channel_history", "channel_roster", "project_activity", "ask_user",
}

// Prefix returns the stand-in for a CLI's system prompt plus its 20 tool
// definitions, cut to exactly tokens tokens of cl100k_base. It depends on
// nothing but tokens, so it is byte-identical every turn and every run.
func Prefix(tc *Tokens, tokens int) string {
	var b strings.Builder
	b.WriteString("You are a coding agent running in a terminal. You help the user with software engineering tasks: " +
		"reading code, editing files, running tests and explaining what you found. Be concise and precise. " +
		"Prefer small, reviewable changes. Never invent file contents; read them first. " +
		"When a command fails, read its output before trying again. Do not run destructive commands without being asked.\n\n" +
		"# Tools\nYou can call the following tools. Each is described by a JSON schema.\n")
	for round := 0; tc.Count(b.String()) < tokens; round++ {
		for i, name := range toolNames {
			fmt.Fprintf(&b, `{"name":%q,"description":"Tool %d of the CLI (%s): use it when the task needs it; arguments are validated against this schema and errors are returned as text.","input_schema":{"type":"object","properties":{"path":{"type":"string","description":"absolute path inside the working directory"},"limit":{"type":"integer","minimum":1,"maximum":%d},"pattern":{"type":"string"},"timeout_ms":{"type":"integer","default":%d}},"required":["path"],"additionalProperties":false}}`+"\n",
				name, i+1+round*len(toolNames), name, 100*(i+1), 1000*(i+1))
		}
	}
	ids := tc.encode(b.String())
	return tc.decode(ids[:tokens])
}

// StatusLine is the volatile line the unstable strategy puts in front of the
// system prompt: it changes every turn.
func StatusLine(at time.Time) string {
	return "Channel #backend · 6 online · branch main · turn at " + at.Format("15:04:05")
}
