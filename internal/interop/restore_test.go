package interop

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/residentd/residentd/apitype"
	"github.com/residentd/residentd/internal/config"
	"github.com/residentd/residentd/internal/session"
	"github.com/residentd/residentd/internal/testkit"
)

// TestClaude0101GivenUpRestoreKeepsTheSession: claude-agent-acp 0.101
// says nothing while it reopens a session, so with a restore_timeout far
// below its start-up both ways are given up: each process is stopped (none
// is left), the turn goes cold on a third, and the saved session is set
// aside. With a restore_timeout it can meet, the key's next restore
// resumes the set-aside session, which still holds the first exchange, and
// its first turn carries the exchange the stand-in answered.
func TestClaude0101GivenUpRestoreKeepsTheSession(t *testing.T) {
	t.Parallel()
	api := newFakeAPI(t, "Looked into it.")
	home := t.TempDir()
	h := newHarnessCfg(t, nil, claude0101Binding(t, home, api.env()))
	ctx := testCtx(t)
	k := session.Key{Channel: "ch", Binding: "b-claude"}

	first := h.mention(ctx, "ch", "b-claude", "q1", "@claude FIRST-MARK look at the refund spec")
	if first.err != nil || first.done.Shape != "cold" {
		t.Fatalf("first turn: %v, shape %q", first.err, first.done.Shape)
	}
	saved := first.done.Native
	transcript := filepath.Join(home, ".claude", "projects", "*", saved+".jsonl")
	testkit.WaitFor(t, 30*time.Second, func() bool {
		m, _ := filepath.Glob(transcript)
		return len(m) > 0
	}, testkit.Waiting("claude-agent-acp to write its transcript %s", transcript))

	h.close()
	h.cfg.RestoreTimeout = config.Duration(200 * time.Millisecond)
	h.open()
	r := h.mention(ctx, "ch", "b-claude", "q2", "@claude SECOND-MARK and the webhook retry?")
	if r.err != nil || r.done.Shape != "cold" || r.done.Native == saved {
		t.Fatalf("turn with the restore given up: %v, shape %q native %s", r.err, r.done.Shape, r.done.Native)
	}
	var evs []apitype.Event
	var given []int
	for _, ev := range r.updates {
		if ev.Event != apitype.EventRestoring {
			continue
		}
		evs = append(evs, ev)
		if ev.Result == apitype.RestoreTimeout {
			given = append(given, ev.Pid)
		}
	}
	for _, ev := range evs {
		t.Logf("restoring %s %s pid %d %s %s", ev.Method, ev.Native, ev.Pid, ev.Result, ev.SetAside)
	}
	if len(given) != 2 || given[0] == given[1] || evs[len(evs)-1].Method != "new" || evs[len(evs)-1].SetAside != saved {
		t.Fatalf("restoring events %+v: want resume and load each given up on a process of its own, then new with %s set aside", evs, saved)
	}
	var left []int
	for _, p := range given {
		left = append(left, descendants(p)...)
	}
	if alive := waitGone(left, 10*time.Second); len(alive) > 0 {
		t.Fatalf("processes of the given-up restores still run: %v (%s)", alive, cmdline(alive[0]))
	}
	if a, ok, err := h.st.Aside(k); !ok || err != nil || a.Native != saved {
		t.Fatalf("set aside %+v %v %v, want %s", a, ok, err, saved)
	}

	h.close()
	h.cfg.RestoreTimeout = 0 // the default, 60 s
	h.cfg.SetDefaults()
	h.open()
	calls := len(api.requests())
	back := h.mention(ctx, "ch", "b-claude", "q3", "@claude THIRD-MARK so what now?")
	if back.err != nil || back.done.Shape != "restored" || back.done.Native != saved {
		t.Fatalf("turn after the fault: %v, shape %q native %s; want %s restored", back.err, back.done.Shape, back.done.Native, saved)
	}
	s := h.d.Sessions()
	if len(s) != 1 || s[0].Restore == nil || s[0].Restore.CaughtUp != 2 {
		t.Fatalf("listing %+v, want the set-aside session caught up on 2 turns", s)
	}
	// The model call of the third turn: the session's own history holds the
	// first mention; the newest user message carries the catch-up (the
	// stand-in's exchange) and the third.
	var main *messagesRequest
	for _, c := range api.calls(calls) {
		if n := len(c.Messages); n > 0 && strings.Contains(c.Messages[n-1].text(), "THIRD-MARK") {
			main = &c
		}
	}
	if main == nil {
		t.Fatal("no model call carried the third mention")
	}
	var history strings.Builder
	for _, m := range main.Messages[:len(main.Messages)-1] {
		history.WriteString(m.text())
	}
	newest := main.Messages[len(main.Messages)-1].text()
	if !strings.Contains(history.String(), "FIRST-MARK") || strings.Contains(history.String(), "SECOND-MARK") ||
		!strings.Contains(newest, "another session answered these turns") || !strings.Contains(newest, "SECOND-MARK") {
		t.Fatalf("the resumed session's model call:\nhistory %q\nnewest %q", history.String(), newest)
	}
	if n, _ := h.st.NativeID(k); n != saved {
		t.Fatalf("the key's native id is %s, want %s again", n, saved)
	}
}
