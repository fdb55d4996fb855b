package daemon_test

import (
	"testing"
	"time"

	"github.com/residentd/residentd/internal/config"
)

// TestBackgroundLimitPerBinding: an ACP v2 agent's listed background work
// keeps its process from the idle reaper; a binding's own
// background_limit bounds that, past which the process is idle again and
// reaped, while a binding without one keeps the daemon's (2 h).
func TestBackgroundLimitPerBinding(t *testing.T) {
	clock := &testClock{t: time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC)}
	h := newHarnessAt(t, clock.now, func(c *config.Config) {
		c.IdleTimeout = config.Duration(time.Minute)
		c.Bindings[0].Protocol = "2"
		limited := testBinding(t, "b-limited", c.StateDir)
		limited.Protocol, limited.BackgroundLimit = "2", config.Duration(1)
		c.Bindings = append(c.Bindings, limited)
	})
	for _, b := range []string{"b-builtin", "b-limited"} {
		reply(t, h.mention("ch-"+b, b, "m-"+b, "@agent [[bg:terminal:1h]] build it"))
	}
	// Both seen working now (the limit counts from then); an hour on,
	// both past the idle timeout and still listing their terminal, only
	// b-limited past its background_limit.
	for _, s := range h.d.Sessions() {
		if !s.Working {
			t.Fatalf("not working with a terminal listed: %+v", s)
		}
	}
	clock.set(clock.now().Add(time.Hour))
	if n := h.d.ReapIdle(); n != 1 {
		t.Fatalf("the reaper stopped %d processes, want the one past its binding's background_limit", n)
	}
	ss := h.d.Sessions()
	if len(ss) != 1 || ss[0].Binding != "b-builtin" || !ss[0].Working || len(ss[0].Background) != 1 || ss[0].Background[0].Type != "terminal" {
		t.Fatalf("sessions after the reap: %+v", ss)
	}
}
