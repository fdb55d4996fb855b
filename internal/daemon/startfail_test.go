package daemon_test

import (
	"strings"
	"testing"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/residentd/residentd/apitype"
	"github.com/residentd/residentd/internal/config"
	"github.com/residentd/residentd/internal/daemon"
)

// TestStartFailureShowsStderr: a turn whose agent cannot start — it exits
// at initialize, or answers session/new with an error that does not say
// why ("process exited with code 1", as claude-agent-acp's) — fails
// with the agent's last stderr lines in the run's error and the log, the
// value of the binding's variable taken out wherever it appears.
func TestStartFailureShowsStderr(t *testing.T) {
	t.Parallel()
	const secret = "s3cret-token-value"
	stderr := []string{"--stderr", "builtin: configured with BUILTIN_TOKEN=" + secret, "--stderr", "builtin: token " + secret}
	h := newHarness(t, func(c *config.Config) {
		for id, fault := range map[string]string{"b-init": "exit-initialize", "b-new": "fail-new"} {
			b := testBinding(t, id, c.StateDir, append(stderr, "--fault", fault)...)
			b.Env["BUILTIN_TOKEN"] = secret
			c.Bindings = append(c.Bindings, b)
		}
	})
	core, logs := observer.New(zap.InfoLevel)
	h.log = zap.New(core)
	h.restart()
	for _, tt := range []struct{ binding, code, cause string }{
		{"b-init", apitype.CodeAgentCrashed, "builtin: fault exit-initialize, exiting 3"},
		{"b-new", apitype.CodeAgentFailed, "builtin: fault fail-new: the session cannot start here (the cause, on stderr only)"},
	} {
		r := h.turn(apitype.TurnRequest{Channel: "ch", Binding: tt.binding, Text: "@agent hi"})
		want := `stderr tail: "builtin: configured with BUILTIN_TOKEN=[redacted]\nbuiltin: token [redacted]\n` + tt.cause + `"`
		if r.err == nil || daemon.Code(r.err) != tt.code || !strings.Contains(r.err.Error(), want) || strings.Contains(r.err.Error(), secret) {
			t.Errorf("%s: %v (code %q), want %s carrying %s", tt.binding, r.err, daemon.Code(r.err), tt.code, want)
		}
		logged := false
		for _, e := range logs.FilterMessage("turn failed before it started").All() {
			if err, _ := e.ContextMap()["error"].(string); strings.Contains(err, want) && strings.Contains(err, tt.binding) {
				logged = true
			}
			if strings.Contains(e.ContextMap()["error"].(string), secret) {
				t.Errorf("the log has the binding's secret: %v", e.ContextMap())
			}
		}
		if !logged {
			t.Errorf("%s: no log line with the stderr tail", tt.binding)
		}
	}
}
