package daemon_test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/residentd/residentd/apitype"
	"github.com/residentd/residentd/internal/channel"
	"github.com/residentd/residentd/internal/config"
	"github.com/residentd/residentd/internal/daemon"
	"github.com/residentd/residentd/internal/run"
	"github.com/residentd/residentd/internal/testkit"
)

// held starts a turn on ch that the built-in agent holds until release is
// called, and waits for it to reach the agent.
func held(t *testing.T, h *harness, prompts func() []string, ch, id string) (*run.Run, func()) {
	t.Helper()
	hold := filepath.Join(h.dir, "hold-"+id)
	text := "@agent " + id + " [[hold:" + hold + "]]"
	h.post(channel.Message{ID: id, Channel: ch, Author: "aiko", Body: text})
	n := len(prompts())
	r, err := h.d.Submit(apitype.TurnRequest{Channel: ch, Binding: "b-builtin", MessageID: id, Text: text})
	if err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, 30*time.Second, func() bool { return len(prompts()) > n }, testkit.Waiting("the held turn to reach the agent"))
	return r, func() {
		if err := os.WriteFile(hold, nil, 0o600); err != nil {
			t.Fatal(err)
		}
	}
}

// submitAll submits a mention per id on ch (accepted first, pushed to the
// channel after, as a desktop app that is slow to push would) and waits
// until each is queued.
func submitAll(t *testing.T, h *harness, ch string, texts map[string]string, ids ...string) []*run.Run {
	t.Helper()
	var out []*run.Run
	for _, id := range ids {
		text := "@agent " + id
		if texts[id] != "" {
			text = texts[id]
		}
		r, err := h.d.Submit(apitype.TurnRequest{Channel: ch, Binding: "b-builtin", MessageID: id, Text: text})
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, r)
	}
	for _, id := range ids {
		h.post(channel.Message{ID: id, Channel: ch, Author: "ben", Body: "@agent " + id})
	}
	return out
}

// endOf waits for r's end.
func endOf(t *testing.T, r *run.Run) (apitype.Event, error) {
	t.Helper()
	select {
	case <-ended(r):
	case <-time.After(30 * time.Second):
		t.Fatalf("run %s never ended", r.ID)
	}
	ev, err, _ := r.Result()
	return ev, err
}

// TestCoalescedMentionsAreAnsweredOnce: a coalesced turn answers a burst
// once; the key's next mention is a turn of its own that lists nothing
// else, after a burst that succeeded and after one that failed.
func TestCoalescedMentionsAreAnsweredOnce(t *testing.T) {
	h, prompts := recorded(t, func(c *config.Config) { c.Bindings[0].Bursts = config.BurstsCoalesce })
	for round, fail := range []bool{false, true, false} {
		p := fmt.Sprintf("r%d-", round)
		_, release := held(t, h, prompts, "ch", p+"hold")
		texts := map[string]string{}
		if fail {
			texts[p+"s1"] = "@agent " + p + "s1 [[fault:fail-turn]]"
		}
		burst := submitAll(t, h, "ch", texts, p+"s1", p+"s2", p+"s3")
		release()
		lead, err := endOf(t, burst[0])
		if fail != (err != nil) || !fail && len(lead.Answers) != 3 {
			t.Fatalf("round %d: the coalesced turn ended %+v %v", round, lead, err)
		}
		for _, r := range burst[1:] {
			ev, err := endOf(t, r)
			if ev.AnsweredBy != burst[0].ID && !strings.Contains(fmt.Sprint(err), burst[0].ID) {
				t.Fatalf("round %d: %s ended %+v %v, not answered by %s", round, r.ID, ev, err, burst[0].ID)
			}
		}
		n := len(prompts())
		single := h.mention("ch", "b-builtin", p+"sn", "@agent "+p+"sn")
		if single.err != nil || single.done.Answers != nil || single.done.AnsweredBy != "" {
			t.Fatalf("round %d: the next mention ended %+v %v", round, single.done, single.err)
		}
		got := prompts()
		if len(got) != n+1 || strings.Contains(got[n], "Several mentions") || strings.Contains(got[n], "- ["+p+"s") {
			t.Fatalf("round %d: the next mention's prompt lists the burst again:\n%s", round, got[len(got)-1])
		}
	}
}

// TestHeldMentionsStayOutOfBlocks: mentions the key's lane holds for a
// later turn are left out of every block before that turn, as the
// addressed message is, and are not seen until then; a coalesced prompt
// lists its mentions and does not show them as lines.
func TestHeldMentionsStayOutOfBlocks(t *testing.T) {
	ids := []string{"b1", "b2", "b3", "b4"}
	for _, mode := range []string{config.BurstsQueue, config.BurstsCoalesce, config.BurstsSteer} {
		t.Run(mode, func(t *testing.T) {
			h, prompts := recorded(t, func(c *config.Config) { c.Bindings[0].Bursts = mode })
			first, release := held(t, h, prompts, "ch", "h0")
			runs := submitAll(t, h, "ch", nil, ids...)
			if mode == config.BurstsSteer {
				testkit.WaitFor(t, 30*time.Second, func() bool { return len(steers(t, filepath.Join(h.dir, "record.jsonl"))) == len(ids) },
					testkit.Waiting("the burst to be steered into the held turn"))
			}
			before := len(prompts())
			release()
			for _, r := range append([]*run.Run{first}, runs...) {
				if _, err := endOf(t, r); err != nil {
					t.Fatalf("%s: %v", r.ID, err)
				}
			}
			// One more mention: every earlier one is seen, none is news.
			last := h.mention("ch", "b-builtin", "b5", "@agent b5")
			if last.err != nil {
				t.Fatal(last.err)
			}
			for i, p := range prompts()[before:] {
				for _, line := range blockLines(p) {
					for _, id := range ids {
						if strings.HasSuffix(line, ": @agent "+id) {
							t.Errorf("prompt %d shows mention %s as a channel line: %q", before+i, id, line)
						}
					}
				}
			}
			switch mode {
			case config.BurstsQueue:
				for i, r := range runs {
					ev, _, _ := r.Result()
					if want := len(ids) - 1 - i; ev.Context.Held != want {
						t.Errorf("%s: %d mentions held out of its block, want %d", ids[i], ev.Context.Held, want)
					}
				}
			case config.BurstsCoalesce:
				ev, _, _ := runs[0].Result()
				if len(ev.Answers) != len(ids) || ev.Context.Known != len(ids) {
					t.Errorf("the coalesced turn: answers %v, context %+v", ev.Answers, ev.Context)
				}
			}
			if last.done.Context.Lines != 0 {
				t.Errorf("the last mention's block shows %v", last.done.Context.Shown)
			}
		})
	}
}

// TestKeyOrderSurvivesARestart: the first mention in flight and four
// queued behind it when the daemon stops; after the restart the
// interrupted attempt of the first runs before the others, and the others
// in the order they were accepted, every time.
func TestKeyOrderSurvivesARestart(t *testing.T) {
	h, prompts := recorded(t)
	for round := range 4 {
		p := fmt.Sprintf("r%d-", round)
		first, release := held(t, h, prompts, "ch", p+"a1")
		queued := submitAll(t, h, "ch", nil, p+"a2", p+"a3", p+"a4", p+"a5")
		for _, r := range queued {
			testkit.WaitFor(t, 10*time.Second, func() bool { return r.Snapshot().State == apitype.RunQueued }, testkit.Waiting("the mentions to queue"))
		}
		n := len(prompts())
		h.d.Close(0) // the held turn is stopped in flight
		h.close()
		release()
		h.open()
		want := []string{p + "a1", p + "a2", p + "a3", p + "a4", p + "a5"}
		for _, id := range []string{first.ID, queued[0].ID, queued[1].ID, queued[2].ID, queued[3].ID} {
			if _, err, _ := h.ended(id).Result(); err != nil {
				t.Fatalf("round %d: %s after the restart: %v", round, id, err)
			}
		}
		var got []string
		for _, pr := range prompts()[n:] {
			got = append(got, mentionOf(pr))
		}
		if !slices.Equal(got, want) {
			t.Fatalf("round %d: answered in the order %v, want %v", round, got, want)
		}
	}
}

// mentionOf is the message id of a prompt's newest mention line.
func mentionOf(prompt string) string {
	m := propMention.FindAllStringSubmatch(prompt, -1)
	if len(m) == 0 {
		return ""
	}
	return m[len(m)-1][1]
}

// TestCancelAnEndedRun: a run cancelled before it started ends cancelled;
// cancelling it again, or any ended run, answers run_ended at once.
func TestCancelAnEndedRun(t *testing.T) {
	h, prompts := recorded(t)
	_, release := held(t, h, prompts, "ch", "c0")
	queued := submitAll(t, h, "ch", nil, "c1")[0]
	if err := h.d.Cancel(queued.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := endOf(t, queued); daemon.Code(err) != apitype.CodeCancelled {
		t.Fatalf("the cancelled queued run ended with %v", err)
	}
	for range 3 {
		if err := h.d.Cancel(queued.ID); !errors.Is(err, daemon.ErrRunEnded) {
			t.Fatalf("a second cancel: %v, want run_ended", err)
		}
	}
	release()
}
