package api

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/residentd/residentd/apitype"
	"github.com/residentd/residentd/client"
	"github.com/residentd/residentd/internal/config"
	"github.com/residentd/residentd/internal/testkit"
)

// Context fidelity through the socket: what the built-in agent is sent,
// read from its own record of every prompt.

// recordedEnv is an env whose built-in agent records every prompt.
func recordedEnv(t *testing.T, tweak ...func(*config.Config)) (*env, func() []string) {
	t.Helper()
	var rec string
	e := newEnv(t, append([]func(*config.Config){func(c *config.Config) {
		rec = filepath.Join(c.StateDir, "record.jsonl")
		c.Bindings[0].Args = append(c.Bindings[0].Args, "--record", rec)
	}}, tweak...)...)
	return e, func() []string {
		t.Helper()
		var out []string
		for _, p := range testkit.Records[struct{ Prompt string }](t, rec, "session/prompt") {
			out = append(out, p.Prompt)
		}
		return out
	}
}

var fidelityT0 = time.Date(2026, 12, 3, 9, 0, 0, 0, time.UTC)

// line is a user's channel message posted sec seconds after fidelityT0.
func line(id, body string, sec int) apitype.Message {
	return apitype.Message{ID: id, Channel: "ch", Author: "aiko", AuthorKind: apitype.AuthorUser, CreatedAt: fidelityT0.Add(time.Duration(sec) * time.Second), Body: body}
}

func (e *env) push(t *testing.T, msgs ...apitype.Message) apitype.MessagesResponse {
	t.Helper()
	res, err := e.c.PutMessages(context.Background(), msgs)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

func (e *env) ask(t *testing.T, id string) apitype.Event {
	t.Helper()
	done, err := e.c.Turn(context.Background(), apitype.TurnRequest{Channel: "ch", Binding: "b-builtin", MessageID: id, Text: "@agent " + id}, nil)
	if err != nil {
		t.Fatalf("turn %s: %v", id, err)
	}
	if done.Context == nil {
		t.Fatalf("turn %s: no context report", id)
	}
	return done
}

// block returns the channel lines and the pointer of a prompt's block.
func block(prompt string) (lines []string, pointer string) {
	for _, l := range strings.Split(prompt, "\n") {
		switch {
		case strings.HasPrefix(l, "- ["):
			lines = append(lines, l)
		case strings.Contains(l, "not shown here"):
			pointer = l
		}
	}
	return lines, pointer
}

func burst(from, n, sec int) []apitype.Message {
	var out []apitype.Message
	for i := range n {
		out = append(out, line(fmt.Sprintf("b%02d", from+i), fmt.Sprintf("burst line %d", from+i), sec+i))
	}
	return out
}

// An edit of a seen message arriving inside a burst of more than twelve
// newer lines is shown, marked (edited); one that arrived before such a
// burst is counted as an edit in the pointer, and channel_history returns
// its edited body.
func TestEditUnderABurstReachesTheSession(t *testing.T) {
	e, prompts := recordedEnv(t)
	e.push(t, line("m1", "the flake is in refund_spec", 1), line("m2", "retry count is 3", 2))
	if done := e.ask(t, "q1"); done.Context.Lines != 2 {
		t.Fatalf("first turn: %+v", done.Context)
	}

	e.push(t, burst(0, 4, 100)...)
	e.push(t, line("m2", "retry count is 5, not 3", 2))
	e.push(t, burst(4, 10, 104)...)
	done := e.ask(t, "q2")
	c := done.Context
	lines, pointer := block(prompts()[1])
	if c.Edited != 1 || !slices.Contains(c.Shown, "m2") || c.Lines != 12 || c.DroppedBound != 3 || c.DroppedBoundEdits != 0 ||
		!slices.Contains(lines, "- [user] aiko (edited): retry count is 5, not 3") {
		t.Fatalf("edit inside a burst: context %+v\nlines %q", c, lines)
	}
	if !strings.HasPrefix(pointer, "(3 earlier messages not shown here;") {
		t.Fatalf("pointer %q", pointer)
	}

	e.push(t, line("m1", "the flake is in refund_spec, fixed in #412", 1))
	e.push(t, burst(20, 13, 200)...)
	done = e.ask(t, "q3")
	c = done.Context
	lines, pointer = block(prompts()[2])
	if c.DroppedBound != 2 || c.DroppedBoundEdits != 1 || c.Edited != 0 || slices.Contains(c.Shown, "m1") {
		t.Fatalf("edit before a burst: context %+v\nlines %q", c, lines)
	}
	if pointer != "(2 earlier messages not shown here, 1 of them edited since you last heard of it; channel_history has them.)" {
		t.Fatalf("pointer %q", pointer)
	}
	hist, _, err := e.inbox.History("ch", "", "", 100)
	if err != nil {
		t.Fatal(err)
	}
	if i := slices.IndexFunc(hist, func(m apitype.HistoryMessage) bool { return m.ID == "m1" }); i < 0 || hist[i].Body != "the flake is in refund_spec, fixed in #412" || !hist[i].Edited {
		t.Fatalf("channel_history does not return the edited m1: %+v", hist)
	}
	// Nothing comes back: the next turn has no block.
	if done := e.ask(t, "q4"); done.Context.Lines != 0 || done.Context.Header != "none" {
		t.Fatalf("fourth turn: %+v", done.Context)
	}
}

// A person whose name is the agent's handle is shown; the agent's own post
// is left out without a word but counted in done.context, and channel
// history still has it.
func TestOwnPostsOnlyByWhatTheDaemonKnows(t *testing.T) {
	e, prompts := recordedEnv(t)
	namesake := line("p1", "I am a person called @agent", 1)
	namesake.Author = "@agent"
	own := line("o1", "a reply the agent posted", 2)
	own.Author, own.AuthorKind = "@agent", apitype.AuthorAgent
	byBinding := line("o2", "another, under its display name", 3)
	byBinding.Author, byBinding.BindingID = "Resident Agent", "b-builtin"
	e.push(t, namesake, own, byBinding)
	done := e.ask(t, "q1")
	lines, _ := block(prompts()[0])
	if done.Context.OwnOmitted != 2 || !slices.Equal(done.Context.Shown, []string{"p1"}) || !slices.Equal(lines, []string{"- [user] @agent: I am a person called @agent"}) {
		t.Fatalf("context %+v lines %q", done.Context, lines)
	}
	if strings.Contains(prompts()[0], "a reply the agent posted") {
		t.Fatal("the block mentions the agent's own post")
	}
	hist, _, err := e.inbox.History("ch", "", "", 10)
	if err != nil || len(hist) != 3 {
		t.Fatalf("channel_history %+v, %v; want all three posts", hist, err)
	}
}

// A resident binding that is not supervised keeps its process and a
// watermark: its live session never gets a line it was already shown.
func TestUnsupervisedResidentKeepsAWatermark(t *testing.T) {
	e, prompts := recordedEnv(t, func(c *config.Config) { c.Bindings[0].Supervised = false })
	seen := map[string]string{} // line -> the turn that showed it
	var native string
	for i := range 3 {
		e.push(t, line(fmt.Sprintf("a%d", i), fmt.Sprintf("line a%d", i), 10*i), line(fmt.Sprintf("b%d", i), fmt.Sprintf("line b%d", i), 10*i+1))
		id := fmt.Sprintf("q%d", i)
		done := e.ask(t, id)
		wantShape, wantHeader := "warm", "new"
		if i == 0 {
			wantShape, wantHeader, native = "cold", "snapshot", done.Native
		}
		if done.Shape != wantShape || done.Native != native || done.Context.Header != wantHeader || done.Context.Lines != 2 || done.Watermark != apitype.WatermarkCommitted {
			t.Fatalf("turn %d: shape %s native %s header %s watermark %s context %+v", i, done.Shape, done.Native, done.Context.Header, done.Watermark, done.Context)
		}
		lines, _ := block(prompts()[i])
		for _, l := range lines {
			if was, dup := seen[l]; dup {
				t.Fatalf("turn %s shows %q again (shown in %s)", id, l, was)
			}
			seen[l] = id
		}
	}
	sessions, err := e.c.Sessions(context.Background())
	if err != nil || len(sessions) != 1 {
		t.Fatalf("sessions %+v, %v; want the one kept process", sessions, err)
	}
}

// "(edited)" only where the session saw an earlier version: not on a
// message edited before any session saw it, and not for two versions of
// one id in one push, which are one message, its last version.
func TestEditedOnlyWhereTheSessionSawAnEarlierVersion(t *testing.T) {
	e, prompts := recordedEnv(t)
	e.push(t, line("m1", "first thought", 1))
	e.push(t, line("m1", "second thought", 1))
	if res := e.push(t, line("m2", "draft", 2), line("m2", "final", 2)); res != (apitype.MessagesResponse{Added: 1, Edited: 1}) {
		t.Fatalf("two versions in one push: %+v", res)
	}
	done := e.ask(t, "q1")
	lines, _ := block(prompts()[0])
	if want := []string{"- [user] aiko: second thought", "- [user] aiko: final"}; !slices.Equal(lines, want) || done.Context.Edited != 0 || done.Context.Lines != 2 {
		t.Fatalf("first sight: lines %q context %+v", lines, done.Context)
	}
	// Seen now: the next version is an edit.
	e.push(t, line("m2", "final, really", 2))
	done = e.ask(t, "q2")
	lines, _ = block(prompts()[1])
	if !slices.Equal(lines, []string{"- [user] aiko (edited): final, really"}) || done.Context.Edited != 1 {
		t.Fatalf("an edit of a seen message: lines %q context %+v", lines, done.Context)
	}
	hist, _, err := e.inbox.History("ch", "", "", 10)
	if err != nil || len(hist) != 2 {
		t.Fatalf("history %+v, %v", hist, err)
	}
}

// A run listing is always true: starting before it waits and again once it
// has left its queue, queued (with its reason and place) only while it
// waits, never queued without a reason.
func TestRunStartingBetweenQueueAndStarted(t *testing.T) {
	e := newEnv(t, func(c *config.Config) {
		// The agent takes far longer to start than the test: every run
		// stays between its queue and started until it is cancelled.
		c.Bindings[0].Args = append(c.Bindings[0].Args, "--fault", "slow-start", "--slow", "10m")
		c.Bindings[0].SessionOptions = nil
	})
	ctx := context.Background()
	listed := func(id string) apitype.Run {
		t.Helper()
		runs, err := e.c.Runs(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range runs {
			if r.ID == id {
				return r
			}
		}
		t.Fatalf("run %s not listed in %+v", id, runs)
		return apitype.Run{}
	}
	first, err := e.c.Submit(ctx, apitype.TurnRequest{Channel: "ch", Binding: "b-builtin", Text: "@agent one"})
	if err != nil {
		t.Fatal(err)
	}
	second, err := e.c.Submit(ctx, apitype.TurnRequest{Channel: "ch", Binding: "b-builtin", Text: "@agent two"})
	if err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, 30*time.Second, func() bool { return listed(second.ID).State == apitype.RunQueued },
		testkit.Waiting("the second run to queue behind the first"))
	if r := listed(second.ID); r.QueueReason != apitype.QueueKeyBusy || r.QueuePosition != 1 {
		t.Fatalf("queued run %+v", r)
	}
	if r := listed(first.ID); r.State != apitype.RunStarting || r.QueueReason != "" || r.QueuePosition != 0 || r.StartedAt != nil {
		t.Fatalf("the first run, its agent starting: %+v", r)
	}
	if err := e.c.Cancel(ctx, first.ID); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, 30*time.Second, func() bool { return listed(second.ID).State != apitype.RunQueued },
		testkit.Waiting("the second run to leave its queue"))
	if r := listed(second.ID); r.State != apitype.RunStarting || r.QueueReason != "" || r.QueuePosition != 0 {
		t.Fatalf("the second run, out of its queue: %+v", r)
	}
	if r := listed(first.ID); r.State != apitype.RunCancelled {
		t.Fatalf("the first run after cancel: %+v", r)
	}
	if err := e.c.Cancel(ctx, second.ID); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, 30*time.Second, func() bool { return listed(second.ID).State == apitype.RunCancelled },
		testkit.Waiting("the second run to end cancelled"))
	// Listed as cancelled, it is ended: a second cancel says so at once.
	for _, id := range []string{second.ID, second.ID, first.ID} {
		if err := e.c.Cancel(ctx, id); !client.IsCode(err, apitype.CodeRunEnded) {
			t.Fatalf("cancel %s again: %v, want run_ended", id, err)
		}
	}
}
