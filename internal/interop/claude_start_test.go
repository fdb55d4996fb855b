package interop

import (
	"os"
	"strings"
	"testing"

	"github.com/residentd/residentd/apitype"
	"github.com/residentd/residentd/internal/config"
)

// TestClaudeStartFailureShowsStderr: claude-agent-acp run as root with
// IS_SANDBOX set to anything but 1 fails session/new. The turn's error
// carries what the agent said: 0.101 the cause in its error and its last
// stderr lines (its session/create log); 0.49 only "Claude Code process
// exited with code 1", and it wrote nothing to stderr (the Claude Agent
// SDK discards its CLI's stderr unless DEBUG_CLAUDE_AGENT_SDK is set),
// which the error says.
func TestClaudeStartFailureShowsStderr(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("claude-agent-acp fails its session/new this way only when run as root")
	}
	for _, tt := range []struct{ version, want string }{
		{"0.49", `Claude Code process exited with code 1"}; the agent wrote nothing to stderr`},
		{"0.101", `--dangerously-skip-permissions cannot be used with root/sudo privileges`},
	} {
		version := tt.version
		t.Run(version, func(t *testing.T) {
			api := newFakeAPI(t, "never asked")
			env := api.env()
			env["IS_SANDBOX"] = "yes"
			var b config.Binding
			if version == "0.49" {
				b = claudeBinding(t, t.TempDir(), env)
			} else {
				b = claude0101Binding(t, t.TempDir(), env)
			}
			h := newHarness(t, b)
			_, err := h.d.Turn(testCtx(t), apitype.TurnRequest{Channel: "ch", Binding: "b-claude", Text: "@claude hi"}, nil)
			if err == nil {
				t.Fatal("session/new worked as root with IS_SANDBOX=yes")
			}
			t.Logf("the turn's error: %v", err)
			if !strings.Contains(err.Error(), tt.want) || strings.Contains(err.Error(), "IS_SANDBOX=yes") {
				t.Fatalf("the turn's error %v, want it to say %q", err, tt.want)
			}
			if version == "0.101" && !strings.Contains(err.Error(), `stderr tail: "[session/create]`) {
				t.Fatalf("the turn's error carries no stderr tail: %v", err)
			}
		})
	}
}
