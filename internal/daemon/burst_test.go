package daemon_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/residentd/residentd/apitype"
	"github.com/residentd/residentd/internal/channel"
	"github.com/residentd/residentd/internal/config"
	"github.com/residentd/residentd/internal/run"
	"github.com/residentd/residentd/internal/testkit"
)

// A burst of six mentions while the key's turn runs, under each bursts
// mode: queue answers each in its own turn, in order; coalesce answers
// the six in one turn whose prompt lists each, whose done lists all six,
// and each of the others' runs ends pointing at it; steer puts each into
// the running turn (the built-in agent records each steer), whose done
// lists them, and each ends pointing at it.
func TestBurstOfSix(t *testing.T) {
	for _, mode := range []string{config.BurstsQueue, config.BurstsCoalesce, config.BurstsSteer} {
		t.Run(mode, func(t *testing.T) {
			h, prompts := recorded(t, func(c *config.Config) { c.Bindings[0].Bursts = mode })
			hold := filepath.Join(h.dir, "hold")
			h.post(channel.Message{ID: "m0", Channel: "ch", Author: "aiko", Body: "@agent first [[hold:" + hold + "]]"})
			first, err := h.d.Submit(apitype.TurnRequest{Channel: "ch", Binding: "b-builtin", MessageID: "m0", Text: "@agent first [[hold:" + hold + "]]"})
			if err != nil {
				t.Fatal(err)
			}
			testkit.WaitFor(t, 30*time.Second, func() bool {
				_, err := os.Stat(filepath.Join(h.dir, "record.jsonl"))
				return err == nil && len(prompts()) == 1
			}, testkit.Waiting("the first turn to reach the agent"))
			authors := []string{"carla", "ben", "carla", "dana", "ben", "carla"}
			var burst []*run.Run
			for i, a := range authors {
				id := fmt.Sprintf("b%d", i+1)
				text := fmt.Sprintf("@agent burst part %d", i+1)
				h.post(channel.Message{ID: id, Channel: "ch", Author: a, Body: text})
				r, err := h.d.Submit(apitype.TurnRequest{Channel: "ch", Binding: "b-builtin", MessageID: id, Text: text})
				if err != nil {
					t.Fatal(err)
				}
				burst = append(burst, r)
			}
			if mode == config.BurstsSteer {
				testkit.WaitFor(t, 30*time.Second, func() bool { return len(steers(t, filepath.Join(h.dir, "record.jsonl"))) == 6 },
					testkit.Waiting("the burst to be steered into the first turn"))
			} else {
				testkit.WaitFor(t, 30*time.Second, func() bool {
					for _, r := range burst {
						if r.Snapshot().State != apitype.RunQueued {
							return false
						}
					}
					return true
				}, testkit.Waiting("the burst to queue behind the first turn"))
			}
			if err := os.WriteFile(hold, nil, 0o600); err != nil {
				t.Fatal(err)
			}
			ends := make([]apitype.Event, len(burst))
			for i, r := range burst {
				select {
				case <-ended(r):
				case <-time.After(30 * time.Second):
					t.Fatalf("run %d never ended", i+1)
				}
				ev, err, _ := r.Result()
				if err != nil {
					t.Fatalf("run %d: %v", i+1, err)
				}
				ends[i] = ev
			}
			firstEv, err, _ := first.Result()
			if err != nil || (mode != config.BurstsSteer) != (firstEv.Answers == nil) {
				t.Fatalf("the first turn: %+v %v", firstEv, err)
			}
			got := prompts()
			switch mode {
			case config.BurstsQueue:
				if len(got) != 7 {
					t.Fatalf("%d prompts, want 7 (one per mention)", len(got))
				}
				for i, ev := range ends {
					if ev.AnsweredBy != "" || ev.Answers != nil || !strings.Contains(ev.Text, fmt.Sprintf("mention=b%d", i+1)) {
						t.Fatalf("run %d ended %+v", i+1, ev)
					}
				}
			case config.BurstsCoalesce:
				if len(got) != 2 {
					t.Fatalf("%d prompts, want 2 (the first turn, then the burst as one)", len(got))
				}
				lead := ends[0]
				if len(lead.Answers) != 6 || lead.AnsweredBy != "" || !strings.HasPrefix(lead.Text, "builtin turn=2") {
					t.Fatalf("the answering run ended %+v", lead)
				}
				for i, a := range lead.Answers {
					if a.RunID != burst[i].ID || a.MessageID != fmt.Sprintf("b%d", i+1) {
						t.Fatalf("answers[%d] = %+v", i, a)
					}
				}
				for i, ev := range ends[1:] {
					if ev.Event != apitype.EventDone || ev.AnsweredBy != burst[0].ID || ev.Text != "" {
						t.Fatalf("run %d ended %+v, want a pointer to %s", i+2, ev, burst[0].ID)
					}
				}
				p := got[1]
				for i, a := range authors {
					want := fmt.Sprintf("- [b%d] %s: @agent burst part %d", i+1, a, i+1)
					if strings.Count(p, want) != 1 {
						t.Fatalf("the coalesced prompt does not list %q once:\n%s", want, p)
					}
				}
			case config.BurstsSteer:
				if len(got) != 1 || !strings.HasSuffix(firstEv.Text, " steered=6") {
					t.Fatalf("%d prompts (want 1), the running turn answered %q", len(got), firstEv.Text)
				}
				if len(firstEv.Answers) != 7 || firstEv.Answers[0].RunID != first.ID {
					t.Fatalf("the running turn's answers %+v", firstEv.Answers)
				}
				listed := map[string]bool{}
				for _, a := range firstEv.Answers[1:] {
					listed[a.RunID+"/"+a.MessageID] = true
				}
				st := strings.Join(steers(t, filepath.Join(h.dir, "record.jsonl")), "\n")
				for i, ev := range ends {
					if ev.Event != apitype.EventDone || ev.AnsweredBy != first.ID || !listed[burst[i].ID+"/"+fmt.Sprintf("b%d", i+1)] {
						t.Fatalf("run %d ended %+v, want a pointer to %s", i+1, ev, first.ID)
					}
					want := fmt.Sprintf("- [b%d] %s: @agent burst part %d", i+1, authors[i], i+1)
					if strings.Count(st, want) != 1 {
						t.Fatalf("the agent was not steered %q once:\n%s", want, st)
					}
				}
			}
		})
	}
}

// steers reads the mentions the built-in agent was steered, from its
// --record file.
func steers(t *testing.T, path string) []string {
	t.Helper()
	var out []string
	for _, r := range testkit.Records[struct{ Prompt string }](t, path, "_session/steering") {
		out = append(out, r.Prompt)
	}
	return out
}

// ended returns a channel closed once r has ended.
func ended(r *run.Run) <-chan struct{} {
	ch := make(chan struct{})
	go func() {
		defer close(ch)
		for {
			changed := r.Wait() // before the check: a change in between closes it
			if _, _, ok := r.Result(); ok {
				return
			}
			<-changed
		}
	}()
	return ch
}
