package daemon_test

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/residentd/residentd/apitype"
	"github.com/residentd/residentd/internal/config"
	"github.com/residentd/residentd/internal/session"
	"github.com/residentd/residentd/internal/testkit"
)

// TestFreshAndShutdownEndBackgroundWork: start fresh and shutdown of a key
// whose agent works in the background (a subagent running, an agent run
// open) send session/cancel for its session, which the agent receives
// before it is stopped, and end the agent run cancelled with the reason.
func TestFreshAndShutdownEndBackgroundWork(t *testing.T) {
	for _, stop := range []string{"fresh", "shutdown"} {
		t.Run(stop, func(t *testing.T) {
			var rec string
			h := newHarness(t, func(c *config.Config) {
				c.IdleTimeout = config.Duration(time.Hour)
				rec = filepath.Join(c.StateDir, "record.jsonl")
				c.Bindings[0].Args = append(c.Bindings[0].Args, "--record", rec)
			})
			h.close()
			h.agentQuiet = time.Hour // the agent run stays open until the stop ends it
			h.open()
			first := h.mention("ch-bg", "b-builtin", "m1", "@agent [[background:1h]] [[later:10ms]] work on it")
			reply(t, first)
			native := first.done.Native
			d, feed := h.d, h.d.RunFeed()
			var agentRun string
			testkit.WaitFor(t, 20*time.Second, func() bool {
				for _, l := range feed.Read(0).Lines {
					var ev apitype.FeedEvent
					if json.Unmarshal(l, &ev) == nil && ev.Event == apitype.FeedRunStarted && ev.Kind == apitype.RunKindAgent {
						agentRun = ev.RunID
						return true
					}
				}
				return false
			}, testkit.Waiting("the agent run of the output after the prompt"))
			ar, err := d.Run(agentRun)
			if err != nil {
				t.Fatal(err)
			}
			// The run opens on the first of the agent's two chunks: the stop
			// comes once both are in, so the test asks whether they are kept.
			testkit.WaitFor(t, 20*time.Second, func() bool {
				for _, l := range ar.Read(0, false).Lines {
					if strings.Contains(string(l), "after the prompt returned") {
						return true
					}
				}
				return false
			}, testkit.Waiting("the agent's second chunk after the prompt"))
			wantCode, wantWord := apitype.CodeCancelled, "started fresh"
			switch stop {
			case "fresh":
				if _, err := h.d.Fresh(session.Key{Channel: "ch-bg", Binding: "b-builtin"}); err != nil {
					t.Fatal(err)
				}
			case "shutdown":
				wantCode, wantWord = apitype.CodeShuttingDown, "shut down"
				h.close()
			}
			var cancels []string
			for _, r := range records(t, rec) {
				if r["method"] == "session/cancel" {
					cancels = append(cancels, fmt.Sprint(r["session"], " background=", r["background"]))
				}
			}
			if want := native + " background=1"; len(cancels) != 1 || cancels[0] != want {
				t.Fatalf("session/cancel received by the agent: %q, want one: %q", cancels, want)
			}
			res, _, ok := ar.Result()
			if !ok {
				t.Fatal("the agent run is still open after the process was stopped")
			}
			if res.Event != apitype.EventError || res.Code != wantCode || !strings.Contains(res.Message, wantWord) {
				t.Fatalf("agent run ended %s %s %q, want error %s saying %q", res.Event, res.Code, res.Message, wantCode, wantWord)
			}
			if res.Text != "later output, after the prompt returned" {
				t.Fatalf("agent run text %q: what the agent said before the stop is lost", res.Text)
			}
		})
	}
}

// TestStateUpdateIsNotIdle: an agent reporting background work by ACP v2
// state_update (working) is not reaped idle and is listed working until it
// reports idle; then it is reaped.
func TestStateUpdateIsNotIdle(t *testing.T) {
	h := newHarness(t, func(c *config.Config) { c.IdleTimeout = config.Duration(50 * time.Millisecond) })
	r := h.mention("ch-st", "b-builtin", "m1", "@agent [[state:1500ms]] work on it")
	reply(t, r)
	time.Sleep(500 * time.Millisecond) // the idle time itself, not a synchronisation
	if n := h.d.ReapIdle(); n != 0 {
		t.Fatalf("the reaper stopped %d processes while the agent reported state working", n)
	}
	ss := h.d.Sessions()
	if len(ss) != 1 || ss[0].Pid != r.start.Pid || !ss[0].Working {
		t.Fatalf("sessions while the agent reported state working: %+v", ss)
	}
	waitFor(t, func() bool { h.d.ReapIdle(); return len(h.d.Sessions()) == 0 }, func() string {
		return fmt.Sprintf("the process was not reaped once the agent reported idle: %+v", h.d.Sessions())
	})
}
