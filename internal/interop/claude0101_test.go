package interop

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/residentd/residentd/apitype"
	"github.com/residentd/residentd/internal/config"
	"github.com/residentd/residentd/internal/permission"
	"github.com/residentd/residentd/internal/testkit"
)

// runIDOf is the run_id of a feed line.
func runIDOf(line string) string {
	var ev apitype.FeedEvent
	_ = json.Unmarshal([]byte(line), &ev)
	return ev.RunID
}

// TestClaude0101BackgroundTaskFollowUp: claude-agent-acp 0.101's model runs
// a shell command in the background (run_in_background); the turn ends
// while it runs; the reaper (a short idle timeout) leaves the process
// alone while the agent works; when the command finishes the agent's own
// follow-up turn arrives as an agent run on the feed, with its text.
func TestClaude0101BackgroundTaskFollowUp(t *testing.T) {
	t.Parallel()
	api := newFakeAPI(t, "Started it in the background.")
	api.tool = &toolUse{marker: "BG-PLEASE", name: "Bash", input: map[string]any{
		"command": "sleep 4; echo residentd-bg-done", "description": "A slow background job", "run_in_background": true}}
	api.later = &laterReply{marker: "task-notification", reply: "The background job is done: residentd-bg-done."}
	b := claude0101Binding(t, t.TempDir(), api.env())
	b.Permission = permission.Allow
	b.Dir = t.TempDir()
	h := newHarnessCfg(t, func(c *config.Config) { c.IdleTimeout = config.Duration(time.Second) }, b)
	ctx := testCtx(t)
	feed := h.d.RunFeed()
	from := feed.Last()
	var pid int
	done, err := h.d.Turn(ctx, apitype.TurnRequest{Channel: "ch", Binding: "b-claude", Text: "@claude run the slow job BG-PLEASE"}, func(ev apitype.Event) {
		if ev.Event == apitype.EventStarted {
			pid = ev.Pid
		}
	})
	if err != nil {
		t.Fatalf("turn: %v", err)
	}
	t.Logf("turn done: %q", done.Text)
	var agentRun string
	testkit.WaitFor(t, 45*time.Second, func() bool {
		for _, l := range feed.Read(from).Lines {
			if strings.Contains(string(l), `"run_ended"`) && strings.Contains(string(l), `"kind":"agent"`) {
				r, err := h.d.Run(runIDOf(string(l)))
				if err != nil {
					continue
				}
				if res, _, ok := r.Result(); ok && strings.Contains(res.Text, "residentd-bg-done") {
					agentRun = r.ID
					return true
				}
			}
		}
		return false
	}, testkit.Waiting("the agent's follow-up turn as an agent run"))
	// The follow-up came from the turn's own process: the reaper (idle
	// timeout 1s, the task 4s) left it alone while the task ran.
	r, _ := h.d.Run(agentRun)
	var started apitype.Event
	for _, l := range r.Read(0, false).Lines {
		if ev := decodeEvent(t, l); ev.Event == apitype.EventStarted {
			started = ev
		}
	}
	if started.Pid != pid || pid == 0 {
		t.Fatalf("the agent run came from pid %d, the turn ran in %d: the process was replaced", started.Pid, pid)
	}
	if n := testutil.ToFloat64(h.m.Evictions.WithLabelValues("idle")); n != 0 {
		t.Fatalf("%v idle evictions while the background task ran", n)
	}
}

func decodeEvent(t *testing.T, line []byte) apitype.Event {
	t.Helper()
	var ev apitype.Event
	if err := json.Unmarshal(line, &ev); err != nil {
		t.Fatal(err)
	}
	return ev
}
