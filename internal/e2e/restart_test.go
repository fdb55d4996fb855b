package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/residentd/residentd/apitype"
	"github.com/residentd/residentd/client"
	"github.com/residentd/residentd/internal/testkit"
)

// recorded starts the daemon with a binding "b-rec" whose built-in agent
// records every prompt in n.state/record.jsonl; env is added to the
// daemon's environment.
func (n *node) recorded(env []string, args ...string) {
	n.t.Helper()
	cfg := map[string]any{"bindings": []map[string]any{{
		"id": "b-rec", "handle": "@agent", "runtime": "cli:builtin", "command": bin,
		"args":     []string{"agent", "--state", filepath.Join(n.state, "agent"), "--record", filepath.Join(n.state, "record.jsonl")},
		"resident": true, "supervised": true,
	}}}
	data, err := json.Marshal(cfg)
	if err != nil {
		n.t.Fatal(err)
	}
	path := filepath.Join(n.state, "config.json")
	if err := os.WriteFile(path, data, 0o600); err != nil {
		n.t.Fatal(err)
	}
	n.env = env
	n.start(append([]string{"--config", path}, args...)...)
}

var lastMention = regexp.MustCompile(`"message_id":"([^"]*)"`)

// prompts counts the prompts the agent received per mention: the message
// id of a prompt's newest mention line (each run of these tests answers
// its own message).
func (n *node) prompts() map[string]int {
	n.t.Helper()
	out := map[string]int{}
	for _, rec := range testkit.Records[struct{ Prompt string }](n.t, filepath.Join(n.state, "record.jsonl"), "session/prompt") {
		if m := lastMention.FindAllStringSubmatch(rec.Prompt, -1); len(m) > 0 {
			out[m[len(m)-1][1]]++
		}
	}
	return out
}

// waitPrompted waits until the agent has received a prompt for the
// mention with message id id.
func (n *node) waitPrompted(id string) {
	n.t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for n.prompts()[id] == 0 {
		if time.Now().After(deadline) {
			n.t.Fatalf("mention %s never reached the agent", id)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// events follows run id to its end and returns every event.
func (n *node) events(id string) []apitype.Event {
	n.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var evs []apitype.Event
	last, err := n.c.Follow(ctx, id, 0, func(ev apitype.Event) { evs = append(evs, ev) })
	if err != nil && last.Event == "" {
		n.t.Fatalf("follow %s: %v", id, err)
	}
	return evs
}

func kinds(evs []apitype.Event) string {
	var k []string
	for _, ev := range evs {
		if ev.Event == apitype.EventStarted || ev.Event == apitype.EventInterrupted {
			k = append(k, fmt.Sprintf("%s/%d", ev.Event, ev.Attempt))
			continue
		}
		if ev.Event != apitype.EventUpdate {
			k = append(k, ev.Event)
		}
	}
	return strings.Join(k, " ")
}

// TestSIGKILLAtEachStepOfATurn kills a real daemon (SIGKILL) at each step
// of a turn, restarts it and checks that the run is answered, that its
// agent was prompted at most once per attempt, that an attempt in flight
// ended interrupted and was retried, and that resubmitting the run id
// returns the run instead of starting a second turn.
func TestSIGKILLAtEachStepOfATurn(t *testing.T) {
	for _, tt := range []struct {
		step     string
		attempts int // attempts the run took
		prompts  int // prompts its agent received
	}{
		// Its key free, the run is accepted as started (one record): killed
		// before its prompt, it was in flight, ends attempt 1 interrupted and
		// is prompted once, as attempt 2. A run accepted behind another
		// (queued, never started) runs as attempt 1: see mid-prompt.
		{"accepted", 2, 1},
		{"started", 2, 1},    // attempt 1 recorded started, killed before its prompt
		{"mid-prompt", 2, 2}, // attempt 1 prompted, the agent working
		{"answered", 2, 2},   // the agent answered, nothing committed
		{"committed", 1, 1},  // the turn and the run's end in the state file
	} {
		t.Run(tt.step, func(t *testing.T) {
			n := newNode(t)
			hold := filepath.Join(n.state, "hold")
			var env []string
			if tt.step != "mid-prompt" {
				env = []string{"RESIDENTD_CRASH_AT=" + tt.step}
			}
			n.recorded(env)
			n.post("ch", "q1", "q2")
			req := apitype.TurnRequest{Channel: "ch", Binding: "b-rec", MessageID: "q1", RunID: "run-" + tt.step, Text: "@agent look"}
			if tt.step == "mid-prompt" {
				req.Text = "@agent look [[hold:" + hold + "]]"
			}
			ctx := context.Background()
			_, serr := n.c.Submit(ctx, req)
			queued := apitype.TurnRequest{Channel: "ch", Binding: "b-rec", MessageID: "q2", RunID: "run-queued", Text: "@agent and this"}
			if tt.step == "mid-prompt" {
				if serr != nil {
					t.Fatal(serr)
				}
				n.waitPrompted(req.MessageID)
				// A second mention waits behind the first.
				if r, err := n.c.Submit(ctx, queued); err != nil || (r.State != apitype.RunQueued && r.State != apitype.RunStarting) {
					t.Fatalf("second mention: %+v %v", r, err)
				}
				if err := n.cmd.Process.Signal(syscall.SIGKILL); err != nil {
					t.Fatal(err)
				}
			}
			n.cmd.Wait()
			if ws, ok := n.cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || ws.Signal() != syscall.SIGKILL {
				t.Fatalf("the daemon was not killed: %v (submit: %v)", n.cmd.ProcessState, serr)
			}
			if err := os.WriteFile(hold, nil, 0o600); err != nil {
				t.Fatal(err)
			}

			n.recorded(nil)
			evs := n.events(req.RunID)
			if last := evs[len(evs)-1]; last.Event != apitype.EventDone || !strings.HasPrefix(last.Text, "builtin turn=") {
				t.Fatalf("run after the restart ended %+v (events %s)", last, kinds(evs))
			}
			k := kinds(evs)
			if tt.attempts == 2 && !strings.Contains(k, "interrupted/1") || !strings.Contains(k, fmt.Sprintf("started/%d", tt.attempts)) {
				t.Fatalf("events %s, want attempt %d", k, tt.attempts)
			}
			run, err := n.c.Run(ctx, req.RunID)
			if err != nil || run.State != apitype.RunSucceeded || run.Attempt != tt.attempts {
				t.Fatalf("run: state %s attempt %d, want succeeded after %d (%v)", run.State, run.Attempt, tt.attempts, err)
			}
			// The app retries blindly: the same mention, the same run.
			again, err := n.c.Submit(ctx, req)
			if err != nil || again.ID != req.RunID || again.State != apitype.RunSucceeded {
				t.Fatalf("resubmitted: %+v %v", again, err)
			}
			if _, err := n.c.Submit(ctx, apitype.TurnRequest{Channel: "ch", Binding: "b-rec", RunID: req.RunID, Text: "@agent another"}); !client.IsCode(err, apitype.CodeRunInUse) {
				t.Fatalf("the run id for another mention: %v", err)
			}
			if tt.step == "mid-prompt" {
				if evs := n.events(queued.RunID); evs[len(evs)-1].Event != apitype.EventDone || strings.Contains(kinds(evs), "interrupted") {
					t.Fatalf("queued run after the restart: %s", kinds(evs))
				}
			}
			got := n.prompts()
			if got[req.MessageID] != tt.prompts {
				t.Fatalf("run %s prompted %d times, want %d (%v)", req.RunID, got[req.MessageID], tt.prompts, got)
			}
			if tt.step == "mid-prompt" && got[queued.MessageID] != 1 {
				t.Fatalf("the queued run was prompted %d times", got[queued.MessageID])
			}
			n.cmd.Process.Signal(syscall.SIGTERM)
			n.cmd.Wait()
		})
	}
}

// TestSIGTERMKeepsRuns: a clean stop with a turn in flight past the grace
// and one queued behind it; after the restart the queued one runs once and
// the one in flight runs again as its second attempt.
func TestSIGTERMKeepsRuns(t *testing.T) {
	n := newNode(t)
	hold := filepath.Join(n.state, "hold")
	n.recorded(nil, "--shutdown-grace", "500ms")
	n.post("ch", "q1", "q2")
	ctx := context.Background()
	first := apitype.TurnRequest{Channel: "ch", Binding: "b-rec", MessageID: "q1", RunID: "run-held", Text: "@agent look [[hold:" + hold + "]]"}
	if _, err := n.c.Submit(ctx, first); err != nil {
		t.Fatal(err)
	}
	n.waitPrompted(first.MessageID)
	second := apitype.TurnRequest{Channel: "ch", Binding: "b-rec", MessageID: "q2", RunID: "run-next", Text: "@agent and this"}
	if _, err := n.c.Submit(ctx, second); err != nil {
		t.Fatal(err)
	}
	if err := n.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := n.cmd.Wait(); err != nil {
		t.Fatalf("clean stop: %v", err)
	}
	if err := os.WriteFile(hold, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	n.recorded(nil)
	for _, tt := range []struct {
		id       string
		attempts int
	}{{first.RunID, 2}, {second.RunID, 1}} {
		evs := n.events(tt.id)
		if evs[len(evs)-1].Event != apitype.EventDone {
			t.Fatalf("%s after the restart: %s", tt.id, kinds(evs))
		}
		if run, err := n.c.Run(ctx, tt.id); err != nil || run.Attempt != tt.attempts {
			t.Fatalf("%s: attempt %d, want %d (%v)", tt.id, run.Attempt, tt.attempts, err)
		}
	}
	if got := n.prompts(); got[first.MessageID] != 2 || got[second.MessageID] != 1 {
		t.Fatalf("prompts %v", got)
	}
	n.cmd.Process.Signal(syscall.SIGTERM)
	n.cmd.Wait()
}

// TestShippedBinaryHasNoCrashPoints: the switch the restart tests kill the
// daemon with is in a binary built with -tags crashpoints only.
func TestShippedBinaryHasNoCrashPoints(t *testing.T) {
	plain := filepath.Join(t.TempDir(), "residentd")
	if out, err := exec.Command("go", "build", "-o", plain, "github.com/residentd/residentd/cmd/residentd").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	for path, want := range map[string]bool{plain: false, bin: true} {
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if got := bytes.Contains(data, []byte("RESIDENTD_CRASH_AT")); got != want {
			t.Errorf("%s holds the crash switch: %v, want %v", path, got, want)
		}
	}
}
