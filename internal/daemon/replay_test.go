package daemon_test

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/residentd/residentd/internal/config"
)

// An agent that answers session/load first and replays the session's
// history after its answer, before it reads on (gemini-cli 0.61 does;
// --fault late-replay sends it when the next request arrives) restores
// the key's session without the history reaching the turn: the restored
// turn's reply is the agent's answer to that turn alone, and no agent run
// opens for the replay.
func TestLateLoadReplayStaysOutOfTheTurn(t *testing.T) {
	h := newHarness(t, func(c *config.Config) {
		c.MaxLive = 1
		c.Bindings[0].Args = append(c.Bindings[0].Args, "--fault", "late-replay")
		c.Bindings[0].RestoreMethod = config.RestoreLoad
	})
	reply(t, h.mention("ch-a", "b-builtin", "a1", "@agent first"))
	reply(t, h.mention("ch-b", "b-builtin", "b1", "@agent elsewhere")) // evicts ch-a's process
	r := h.mention("ch-a", "b-builtin", "a2", "@agent again")
	if got := reply(t, r); r.start.Shape != "restored" || got["turn"] != "2" {
		t.Fatalf("restored turn: shape %q, reply %q", r.start.Shape, r.done.Text)
	}
	if n := strings.Count(r.done.Text, "builtin turn="); n != 1 {
		t.Fatalf("the restored turn's reply %q holds %d replies: the replayed history leaked into it", r.done.Text, n)
	}
	if n := testutil.ToFloat64(h.m.AgentRuns); n != 0 {
		t.Fatalf("%v agent runs opened; the replay must open none", n)
	}
}
