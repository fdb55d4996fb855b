package daemon_test

import (
	"strings"
	"testing"

	"github.com/residentd/residentd/internal/config"
)

// TestForkedThreadTakesTheSystemPrompt: a thread's first session, forked
// from its channel's (session/fork), is opened with the framing as its
// system prompt too, and its first turn carries no framing.
func TestForkedThreadTakesTheSystemPrompt(t *testing.T) {
	var rec string
	h := newHarness(t, threadScope(&rec, true), func(c *config.Config) {
		c.Bindings[0].Args = append(c.Bindings[0].Args, "--system-prompt")
	})
	h.say("ch", "c", 3)
	q1 := h.mention("ch", "b-builtin", "q1", "@agent one")
	if r := q1.done.Text; !strings.HasSuffix(r, "system=yes") || !strings.Contains(r, "framing=no") {
		t.Fatalf("the channel's cold turn: %q", r)
	}
	q2 := h.threadMention("ch", "c2", "q2", "@agent in the thread")
	if q2.err != nil || q2.done.Native == q1.done.Native || len(forks(t, rec)) != 1 {
		t.Fatalf("the thread's turn: %+v %v, forks %v", q2.done, q2.err, forks(t, rec))
	}
	if r := q2.done.Text; !strings.HasSuffix(r, "system=yes") || !strings.Contains(r, "framing=no") {
		t.Fatalf("the forked thread's first turn: %q, want its system prompt and no framing", r)
	}
}
