package daemon_test

import (
	"fmt"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/residentd/residentd/apitype"
	"github.com/residentd/residentd/internal/channel"
	"github.com/residentd/residentd/internal/config"
	"github.com/residentd/residentd/internal/daemon"
	"github.com/residentd/residentd/internal/delivery"
	"github.com/residentd/residentd/internal/session"
)

// recorded is a harness whose built-in agent records every prompt.
func recorded(t *testing.T, tweak ...func(*config.Config)) (*harness, func() []string) {
	t.Helper()
	var rec string
	h := newHarness(t, append([]func(*config.Config){func(c *config.Config) {
		rec = filepath.Join(c.StateDir, "record.jsonl")
		c.Bindings[0].Args = append(c.Bindings[0].Args, "--record", rec)
	}}, tweak...)...)
	return h, func() []string { return prompts(t, rec) }
}

// blockLines returns the channel lines of a prompt's newest user turn.
func blockLines(prompt string) []string {
	var out []string
	for _, l := range strings.Split(delivery.NewestTurn(prompt), "\n") {
		if strings.HasPrefix(l, "- [") {
			out = append(out, l)
		}
	}
	return out
}

var pointerRE = regexp.MustCompile(`\((\d+) earlier messages? not shown here`)

// pointer returns the number in a prompt's "N earlier messages" footer, 0
// when there is none.
func pointer(prompt string) int {
	m := pointerRE.FindAllStringSubmatch(prompt, -1)
	if len(m) == 0 {
		return 0
	}
	var n int
	fmt.Sscan(m[len(m)-1][1], &n)
	return n
}

// The recipe: x1 and the mention xm at T, a turn; then x2 at
// T and x3 at T+1, a second turn. Both x2 and x3 reach the session.
func TestTieWithWatermarkIsNotLost(t *testing.T) {
	h, got := recorded(t)
	at := time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)
	h.post(channel.Message{ID: "x1", Channel: "ch", Author: "aiko", Body: "x1 body", CreatedAt: at},
		channel.Message{ID: "xm", Channel: "ch", Author: "ben", Body: "@agent first", CreatedAt: at})
	reply(t, h.turn(apitype.TurnRequest{Channel: "ch", Binding: "b-builtin", MessageID: "xm", Text: "@agent first"}))
	h.post(channel.Message{ID: "x2", Channel: "ch", Author: "aiko", Body: "x2 body", CreatedAt: at},
		channel.Message{ID: "x3", Channel: "ch", Author: "aiko", Body: "x3 body", CreatedAt: at.Add(time.Second)},
		channel.Message{ID: "ym", Channel: "ch", Author: "ben", Body: "@agent second", CreatedAt: at.Add(2 * time.Second)})
	r := h.turn(apitype.TurnRequest{Channel: "ch", Binding: "b-builtin", MessageID: "ym", Text: "@agent second"})
	reply(t, r)
	lines := blockLines(got()[1])
	if strings.Join(lines, "|") != "- [user] aiko: x2 body|- [user] aiko: x3 body" {
		t.Fatalf("second block: %q", lines)
	}
	// A late message with an older created_at is news too.
	h.post(channel.Message{ID: "old", Channel: "ch", Author: "carla", Body: "posted offline", CreatedAt: at.Add(-time.Hour)},
		channel.Message{ID: "zm", Channel: "ch", Author: "ben", Body: "@agent third", CreatedAt: at.Add(3 * time.Second)})
	reply(t, h.turn(apitype.TurnRequest{Channel: "ch", Binding: "b-builtin", MessageID: "zm", Text: "@agent third"}))
	if lines := blockLines(got()[2]); strings.Join(lines, "|") != "- [user] carla: posted offline" {
		t.Fatalf("third block: %q", lines)
	}
}

// The previous mention is the last payload, not news: turns without new
// channel lines send no block at all.
func TestPreviousMentionDoesNotComeBack(t *testing.T) {
	h, got := recorded(t)
	h.say("ch", "a", 2)
	for i := 1; i <= 4; i++ {
		r := h.mention("ch", "b-builtin", fmt.Sprintf("q%d", i), fmt.Sprintf("@agent question %d", i))
		reply(t, r)
		if i > 1 && (r.done.Context.Header != "none" || r.done.Context.Lines != 0) {
			t.Fatalf("turn %d: context %+v", i, r.done.Context)
		}
	}
	for i, p := range got()[1:] {
		if l := blockLines(p); len(l) != 0 {
			t.Fatalf("turn %d got a block: %q", i+2, l)
		}
	}
	// A mention the app pushes only after its turn is not news either.
	reply(t, h.turn(apitype.TurnRequest{Channel: "ch", Binding: "b-builtin", MessageID: "late", Text: "@agent pushed later"}))
	h.post(channel.Message{ID: "late", Channel: "ch", Author: "carla", Body: "@agent pushed later"})
	r := h.mention("ch", "b-builtin", "q9", "@agent next")
	if reply(t, r); r.done.Context.Lines != 0 {
		t.Fatalf("the late-pushed mention came back: %+v %q", r.done.Context, blockLines(got()[5]))
	}
}

// A 40-message burst then a mention: 12 shown, and the pointer counts the
// other 28, not only the rows of a fetch window.
func TestPointerCountsTheWholeBurst(t *testing.T) {
	h, got := recorded(t)
	reply(t, h.mention("ch", "b-builtin", "q1", "@agent first"))
	h.say("ch", "burst", 40)
	r := h.mention("ch", "b-builtin", "q2", "@agent what did I miss?")
	reply(t, r)
	p := got()[1]
	if len(blockLines(p)) != 12 || pointer(p) != 28 || r.done.Context.DroppedBound != 28 {
		t.Fatalf("lines %d pointer %d context %+v", len(blockLines(p)), pointer(p), r.done.Context)
	}
	// The 28 are in channel_history, and the next turn does not repeat them.
	hist, _, err := h.inbox.History("ch", "", "burst13", 100)
	if err != nil || len(hist) != 13 || hist[0].ID != "q1" || hist[1].ID != "burst1" {
		t.Fatalf("history before burst13: %d rows %v", len(hist), err)
	}
	r = h.mention("ch", "b-builtin", "q3", "@agent and now?")
	if reply(t, r); r.done.Context.Lines != 0 {
		t.Fatalf("counted messages came back: %+v", r.done.Context)
	}
}

// A root the session saw in the channel is left out of its thread's first
// block, and a root shown in a thread is not shown again in the channel.
func TestThreadRootShownOnce(t *testing.T) {
	h, got := recorded(t)
	h.post(channel.Message{ID: "root", Channel: "ch", Author: "aiko", Body: "deploy failed"})
	reply(t, h.mention("ch", "b-builtin", "q1", "@agent look"))
	if l := blockLines(got()[0]); len(l) != 1 || !strings.Contains(l[0], "deploy failed") {
		t.Fatalf("main block: %q", l)
	}
	h.post(channel.Message{ID: "t1", Channel: "ch", ThreadRoot: "root", Author: "ben", Body: "same on staging"})
	root := "root"
	h.post(channel.Message{ID: "tq", Channel: "ch", ThreadRoot: "root", Author: "ben", Body: "@agent why?"})
	r := h.turn(apitype.TurnRequest{Channel: "ch", Binding: "b-builtin", MessageID: "tq", ThreadRoot: &root, Text: "@agent why?"})
	reply(t, r)
	if l := blockLines(got()[1]); strings.Join(l, "|") != "- [user] ben: same on staging" {
		t.Fatalf("thread block repeats the root: %q", l)
	}
	// Another root, first seen in its thread, then a main mention.
	h.post(channel.Message{ID: "root2", Channel: "ch", Author: "aiko", Body: "second incident"},
		channel.Message{ID: "u1", Channel: "ch", ThreadRoot: "root2", Author: "ben", Body: "details"})
	root2 := "root2"
	reply(t, h.turn(apitype.TurnRequest{Channel: "ch", Binding: "b-builtin", MessageID: "uq", ThreadRoot: &root2, Text: "@agent and this?"}))
	if l := blockLines(got()[2]); len(l) != 2 {
		t.Fatalf("second thread block: %q", l)
	}
	r = h.mention("ch", "b-builtin", "q2", "@agent anything else?")
	if reply(t, r); r.done.Context.Lines != 0 {
		t.Fatalf("the root shown in its thread came back in the channel: %q", blockLines(got()[3]))
	}
	// An unknown root is refused by name.
	nope := "no-such-root"
	if r := h.turn(apitype.TurnRequest{Channel: "ch", Binding: "b-builtin", Text: "@agent ?", ThreadRoot: &nope}); daemon.Code(r.err) != apitype.CodeUnknownThread || !strings.Contains(r.err.Error(), `"no-such-root"`) {
		t.Fatalf("unknown root: %v", r.err)
	}
	// Replies whose root is not pushed yet (or was trimmed) still make a thread.
	h.post(channel.Message{ID: "o1", Channel: "ch", ThreadRoot: "orphan-root", Author: "ben", Body: "reply first"})
	orphan := "orphan-root"
	if r := h.turn(apitype.TurnRequest{Channel: "ch", Binding: "b-builtin", Text: "@agent ?", ThreadRoot: &orphan}); r.err != nil || r.done.Context.Lines != 1 {
		t.Fatalf("thread without its root: %v %+v", r.err, r.done.Context)
	}
}

// An edit of a message the session saw is shown once more, marked; a
// deleted message is never shown; the same body again is a duplicate.
func TestEditsAndDeletes(t *testing.T) {
	h, got := recorded(t)
	h.post(channel.Message{ID: "m1", Channel: "ch", Author: "aiko", Body: "the fix is in a.go"},
		channel.Message{ID: "m2", Channel: "ch", Author: "aiko", Body: "secret pasted by mistake"})
	reply(t, h.mention("ch", "b-builtin", "q1", "@agent one"))
	at := clock.t
	res, err := h.inbox.PutMessages([]channel.Message{
		{ID: "m1", Channel: "ch", Author: "aiko", AuthorKind: "user", CreatedAt: at, Body: "the fix is in b.go"},
		{ID: "q1", Channel: "ch", Author: "carla", AuthorKind: "user", CreatedAt: at, Body: "@agent one"},
	})
	if err != nil || res != (apitype.MessagesResponse{Edited: 1, Duplicates: 1}) {
		t.Fatalf("edit push: %+v %v", res, err)
	}
	h.post(channel.Message{ID: "m3", Channel: "ch", Author: "aiko", Body: "also deleted"})
	for _, id := range []string{"m2", "m3"} {
		if err := h.inbox.DeleteMessage("ch", id); err != nil {
			t.Fatal(err)
		}
	}
	r := h.mention("ch", "b-builtin", "q2", "@agent two")
	reply(t, r)
	if l := blockLines(got()[1]); strings.Join(l, "|") != "- [user] aiko (edited): the fix is in b.go" || r.done.Context.Edited != 1 {
		t.Fatalf("block after edit and deletes: %q %+v", l, r.done.Context)
	}
	r = h.mention("ch", "b-builtin", "q3", "@agent three")
	if reply(t, r); r.done.Context.Lines != 0 {
		t.Fatalf("the edit came back: %q", blockLines(got()[2]))
	}
	hist, _, _ := h.inbox.History("ch", "", "", 10)
	for _, m := range hist {
		if m.ID == "m2" || m.ID == "m3" {
			t.Fatalf("channel_history returns deleted %s", m.ID)
		}
	}
	// A new session's snapshot shows the edited body, unmarked (this session
	// never saw an earlier version), and not the deleted.
	if _, err := h.d.Fresh(session.Key{Channel: "ch", Binding: "b-builtin"}); err != nil {
		t.Fatal(err)
	}
	reply(t, h.mention("ch", "b-builtin", "q4", "@agent four"))
	snap := strings.Join(blockLines(got()[3]), "|")
	if !strings.Contains(snap, "aiko: the fix is in b.go") || strings.Contains(snap, "(edited)") || strings.Contains(snap, "secret") || strings.Contains(snap, "also deleted") {
		t.Fatalf("snapshot: %q", snap)
	}
}

// The agent's own posts are left out in every form a chat app sends: the
// handle with or without "@", in any case, marked as an agent's post, or
// marked with the binding. A person's post is shown whatever its name.
func TestOwnPostForms(t *testing.T) {
	h, got := recorded(t)
	h.post(
		channel.Message{ID: "o1", Channel: "ch", Author: "@agent", AuthorKind: channel.KindAgent, Body: "own: exact handle"},
		channel.Message{ID: "o2", Channel: "ch", Author: "agent", AuthorKind: channel.KindAgent, Body: "own: no @"},
		channel.Message{ID: "o3", Channel: "ch", Author: "Agent", AuthorKind: channel.KindAgent, Body: "own: other case"},
		channel.Message{ID: "u2", Channel: "ch", Author: "Agent", AuthorKind: channel.KindUser, Body: "a person named Agent"},
		channel.Message{ID: "u3", Channel: "ch", Author: "@agent", AuthorKind: channel.KindUser, Body: "a person named like the handle"},
		channel.Message{ID: "o4", Channel: "ch", Author: "Resident Agent", AuthorKind: channel.KindAgent, BindingID: "b-builtin", Body: "own: display name and binding"},
		channel.Message{ID: "x1", Channel: "ch", Author: "Codex", AuthorKind: channel.KindAgent, BindingID: "b-codex", Body: "another agent"},
		channel.Message{ID: "u1", Channel: "ch", Author: "agentina", Body: "a person"},
	)
	r := h.mention("ch", "b-builtin", "q1", "@agent hi")
	reply(t, r)
	block := strings.Join(blockLines(got()[0]), "|")
	if strings.Contains(block, "own:") || !strings.Contains(block, "another agent") || !strings.Contains(block, "a person") || !strings.Contains(block, "a person named Agent") || !strings.Contains(block, "[user] @agent: a person named like the handle") || r.done.Context.OwnOmitted != 4 {
		t.Fatalf("block %q context %+v", block, r.done.Context)
	}
}

// Control characters are shown, never dropped, and bidi overrides cannot
// re-order a line.
func TestControlCharactersVisible(t *testing.T) {
	h, got := recorded(t)
	h.post(channel.Message{ID: "m1", Channel: "ch", Author: "mallory", Body: "ding\a \u202Egnp.exe\u202C done"})
	reply(t, h.mention("ch", "b-builtin", "q1", "@agent hi"))
	l := blockLines(got()[0])
	if len(l) != 1 || l[0] != "- [user] mallory: ding␇ <U+202E>gnp.exe<U+202C> done" {
		t.Fatalf("line %q", l)
	}
}

// A cold replay after 10 turns: the brief once, earlier turns compact, and
// a snapshot that repeats nothing the replay holds.
func TestColdReplayIsLean(t *testing.T) {
	off := false
	h, got := recorded(t, func(c *config.Config) { c.Bindings[0].Restore = &off })
	for i := 1; i <= 10; i++ {
		h.say("ch", fmt.Sprintf("t%d-", i), 2)
		reply(t, h.mention("ch", "b-builtin", fmt.Sprintf("q%d", i), fmt.Sprintf("@agent question %d", i)))
	}
	h.restart()
	r := h.mention("ch", "b-builtin", "q11", "@agent question 11")
	reply(t, r)
	all := got()
	cold := all[len(all)-1]
	if r.done.Shape != "cold" {
		t.Fatalf("shape %s", r.done.Shape)
	}
	if n := strings.Count(cold, delivery.DefaultBrief); n != 1 {
		t.Fatalf("the cold replay carries the brief %d times", n)
	}
	for i := 1; i <= 11; i++ {
		if n := strings.Count(cold, fmt.Sprintf("@agent question %d\"", i)); n != 1 {
			t.Fatalf("mention %d appears %d times in the replay", i, n)
		}
	}
	lines := blockLines(cold)
	for _, l := range lines {
		if n := strings.Count(cold, l); n != 1 {
			t.Fatalf("line %q appears %d times", l, n)
		}
	}
	if len(lines) != 12 || r.done.Context.DroppedBound != 8 || r.done.Context.Known != 11 {
		t.Fatalf("snapshot: %d lines, context %+v", len(lines), r.done.Context)
	}
	t.Logf("cold replay after 10 turns: %d bytes (~%d tokens), brief once, %d snapshot lines, %d mentions known", len(cold), (len(cold)+3)/4, len(lines), r.done.Context.Known)
}

// A successful turn stores its exchange, moves every watermark it staged
// and records its run's end in one write transaction, whatever the block
// showed. One more records the run before the prompt, accepted and started
// at once (its key was free), so a restart neither loses nor repeats it.
func TestTurnIsOneCommit(t *testing.T) {
	h := newHarness(t)
	// Cold: the run accepted and started, then the turn with the new
	// native id in its one commit, which carries the agent's record (for
	// the leftover sweep; a crash before it is covered by the agent's mark)
	// and who the binding's agent is (for the next daemon start's policy
	// report).
	h.post(channel.Message{ID: "m0", Channel: "ch", Author: "aiko", Body: "before the first mention"},
		channel.Message{ID: "q1", Channel: "ch", Author: "carla", Body: "@agent first"})
	before := h.st.Commits()
	first := h.turn(apitype.TurnRequest{Channel: "ch", Binding: "b-builtin", MessageID: "q1", Text: "@agent first"})
	if reply(t, first); first.done.Shape != "cold" || first.done.Context.Lines != 1 {
		t.Fatalf("first turn: %+v", first.done)
	}
	if n := h.st.Commits() - before; n != 2 {
		t.Fatalf("cold turn: %d commits, want 2", n)
	}
	if native, _ := h.st.NativeID(session.Key{Channel: "ch", Binding: "b-builtin"}); native == "" {
		t.Fatal("the cold turn did not save its native session id")
	}
	root := "r1"
	for _, step := range []struct {
		name string
		push []channel.Message
		req  apitype.TurnRequest
	}{
		{"warm, nothing new", nil, apitype.TurnRequest{Channel: "ch", Binding: "b-builtin", MessageID: "q2", Text: "@agent again"}},
		{"warm, new lines and the mention", []channel.Message{{ID: "m1", Channel: "ch", Author: "aiko", Body: "news"}, {ID: "q3", Channel: "ch", Author: "carla", Body: "@agent and?"}},
			apitype.TurnRequest{Channel: "ch", Binding: "b-builtin", MessageID: "q3", Text: "@agent and?"}},
		{"thread: its watermark and the root's mark for the channel", []channel.Message{{ID: "r1", Channel: "ch", Author: "aiko", Body: "root"}, {ID: "t1", Channel: "ch", ThreadRoot: "r1", Author: "ben", Body: "reply"}},
			apitype.TurnRequest{Channel: "ch", Binding: "b-builtin", MessageID: "tq", ThreadRoot: &root, Text: "@agent in thread"}},
	} {
		if len(step.push) > 0 {
			h.post(step.push...)
		}
		before := h.st.Commits()
		r := h.turn(step.req)
		reply(t, r)
		if n := h.st.Commits() - before; n != 2 || r.done.Shape != "warm" {
			t.Fatalf("%s: %d commits (shape %s), want 2", step.name, n, r.done.Shape)
		}
	}
	// A failed warm turn writes only its run: accepted and started, then
	// ended with what the turn cost.
	before = h.st.Commits()
	if r := h.turn(apitype.TurnRequest{Channel: "ch", Binding: "b-builtin", MessageID: "qf", Text: "@agent [[fault:fail-turn]]"}); r.err == nil {
		t.Fatal("the fault turn succeeded")
	}
	if n := h.st.Commits() - before; n != 2 {
		t.Fatalf("a failed turn made %d commits, want 2", n)
	}
	// A failed cold turn keeps its agent record and its native id, so the
	// session it opened can still be restored, and its run: accepted and
	// started, then its end with the native id and the agent record.
	before = h.st.Commits()
	if r := h.turn(apitype.TurnRequest{Channel: "ch2", Binding: "b-builtin", MessageID: "qf2", Text: "@agent [[fault:fail-turn]]"}); r.err == nil || r.start.Shape != "cold" {
		t.Fatalf("the cold fault turn: shape %q err %v", r.start.Shape, r.err)
	}
	if n := h.st.Commits() - before; n != 2 {
		t.Fatalf("a failed cold turn made %d commits, want 2", n)
	}
	if native, _ := h.st.NativeID(session.Key{Channel: "ch2", Binding: "b-builtin"}); native == "" {
		t.Fatal("a failed cold turn lost its native session id")
	}
}

// A mention in a thread whose root is itself a reply works.
func TestNestedThreadTurn(t *testing.T) {
	h, _ := recorded(t)
	h.post(channel.Message{ID: "r", Channel: "ch", Author: "aiko", Body: "root"},
		channel.Message{ID: "x", Channel: "ch", ThreadRoot: "r", Author: "ben", Body: "reply that starts a sub-thread"},
		channel.Message{ID: "y", Channel: "ch", ThreadRoot: "x", Author: "ben", Body: "sub-reply"})
	x := "x"
	r := h.turn(apitype.TurnRequest{Channel: "ch", Binding: "b-builtin", MessageID: "q", ThreadRoot: &x, Text: "@agent ?"})
	if reply(t, r); r.done.Context.Lines != 2 {
		t.Fatalf("sub-thread block: %+v", r.done.Context)
	}
}

// A new process gets a replayed mention in the version its turn answered:
// an edit made afterwards is news to it, shown once.
func TestEditOfReplayedMentionReachesANewProcess(t *testing.T) {
	off := false
	h, got := recorded(t, func(c *config.Config) { c.Bindings[0].Restore = &off })
	reply(t, h.mention("ch", "b-builtin", "q1", "@agent deploy to staging"))
	h.post(channel.Message{ID: "q1", Channel: "ch", Author: "carla", Body: "@agent deploy to PRODUCTION", CreatedAt: clock.t})
	h.restart()
	reply(t, h.mention("ch", "b-builtin", "q2", "@agent status?"))
	reply(t, h.mention("ch", "b-builtin", "q3", "@agent and now?"))
	all := got()
	if n := strings.Count(strings.Join(all[1:], "\n"), "(edited): @agent deploy to PRODUCTION"); n != 1 {
		t.Fatalf("the edit of q1 reached the new process %d times:\n%s", n, strings.Join(blockLines(all[1]), "\n"))
	}
}

// A deleted mention is not replayed to a new process.
func TestDeletedMentionIsNotReplayed(t *testing.T) {
	off := false
	h, got := recorded(t, func(c *config.Config) { c.Bindings[0].Restore = &off })
	reply(t, h.mention("ch", "b-builtin", "q1", "@agent the password is hunter2"))
	if err := h.inbox.DeleteMessage("ch", "q1"); err != nil {
		t.Fatal(err)
	}
	h.restart()
	r := h.mention("ch", "b-builtin", "q2", "@agent status?")
	reply(t, r)
	all := got()
	if r.done.Shape != "cold" || strings.Contains(all[len(all)-1], "hunter2") {
		t.Fatalf("shape %s; the deleted mention was replayed:\n%s", r.done.Shape, all[len(all)-1])
	}
}
