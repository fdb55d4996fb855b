package daemon_test

import (
	"fmt"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/residentd/residentd/internal/config"
	"github.com/residentd/residentd/internal/session"
)

// closes reads the session ids the built-in agent was asked to close, from
// its --record file.
func closes(t *testing.T, path string) []string {
	t.Helper()
	var out []string
	for _, rec := range records(t, path) {
		if rec["method"] == "session/close" {
			s, _ := rec["session"].(string)
			out = append(out, s)
		}
	}
	return out
}

// TestSessionCloseBeforeEveryStop: whatever stops a process (start fresh,
// the idle reaper, a capacity eviction, shutdown), an agent that
// advertises session/close is asked to close its session first, once; one
// that does not is never asked.
func TestSessionCloseBeforeEveryStop(t *testing.T) {
	for _, advertised := range []bool{true, false} {
		for _, stop := range []string{"fresh", "idle", "capacity", "shutdown"} {
			t.Run(fmt.Sprintf("close=%v/%s", advertised, stop), func(t *testing.T) {
				var rec string
				h := newHarness(t, func(c *config.Config) {
					c.MaxLive = 1
					c.IdleTimeout = config.Duration(time.Hour)
					if stop == "idle" {
						c.IdleTimeout = config.Duration(200 * time.Millisecond)
					}
					rec = filepath.Join(c.StateDir, "record.jsonl")
					c.Bindings[0].Args = append(c.Bindings[0].Args, "--record", rec)
					if !advertised {
						c.Bindings[0].Args = append(c.Bindings[0].Args, "--no-close")
					}
				})
				first := h.mention("ch-a", "b-builtin", "m1", "@agent hello")
				reply(t, first)
				native := first.done.Native
				want := "ch-a/b-builtin " + stop
				switch stop {
				case "fresh":
					if _, err := h.d.Fresh(session.Key{Channel: "ch-a", Binding: "b-builtin"}); err != nil {
						t.Fatal(err)
					}
				case "idle":
					waitFor(t, func() bool { return slices.Contains(h.evictions(), want) }, func() string {
						return fmt.Sprintf("the idle agent was never reaped: evictions %q", h.evictions())
					})
				case "capacity":
					reply(t, h.mention("ch-b", "b-builtin", "m2", "@agent hello"))
				case "shutdown":
					h.close()
				}
				if !slices.Contains(h.evictions(), want) {
					t.Fatalf("evictions %q, want %q", h.evictions(), want)
				}
				got := closes(t, rec)
				switch {
				case advertised && !slices.Equal(got, []string{native}):
					t.Fatalf("session/close calls %q before the %s stop, want one for %s", got, stop, native)
				case !advertised && len(got) != 0:
					t.Fatalf("session/close sent to an agent that does not advertise it: %q", got)
				}
			})
		}
	}
}
