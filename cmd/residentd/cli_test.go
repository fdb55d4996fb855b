package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/residentd/residentd/apitype"
	"github.com/residentd/residentd/internal/testkit"
)

func TestHelpVersionAndErrors(t *testing.T) {
	for _, c := range commands {
		if c.main != nil {
			continue // agent: below
		}
		name, synopsis := c.name, c.synopsis
		var out, errOut bytes.Buffer
		if code := run([]string{name, "--help"}, strings.NewReader(""), &out, &errOut); code != exitOK {
			t.Errorf("%s --help: exit %d, stderr %q", name, code, errOut.String())
		}
		if !strings.HasPrefix(out.String(), "Usage: residentd "+synopsis+"\n") || !strings.Contains(out.String(), "-socket") && !strings.Contains(out.String(), "Flags:") {
			t.Errorf("%s --help printed %q", name, out.String())
		}
	}
	var out, errOut bytes.Buffer
	// The hidden agent command (the built-in agent) takes --help too.
	if code := run([]string{"agent", "--help"}, strings.NewReader(""), &out, &errOut); code != exitOK || !strings.Contains(errOut.String(), "-history") {
		t.Errorf("agent --help: exit %d, stderr %q", code, errOut.String())
	}
	out.Reset()
	errOut.Reset()
	if code := run([]string{"--version"}, nil, &out, &errOut); code != exitOK || out.String() != "residentd "+version+"\n" {
		t.Errorf("--version: exit %d, %q", code, out.String())
	}

	missing := filepath.Join(t.TempDir(), "none.sock")
	cases := []struct {
		args  []string
		code  int
		want  string
		stdin string
	}{
		{[]string{"push", "--socket", missing}, exitError, `stdin line 2 is not a channel message (one JSON object per line, fields as in POST /v1/messages): created_at "monday" is not an RFC 3339 time`, "\n{\"id\":\"m1\",\"created_at\":\"monday\"}\n"},
		{[]string{"push", "--socket", missing}, exitError, `field "author" has the wrong type`, `{"id":"m1","author":7}`},
		{[]string{"cancel", "--socket", missing, "run-1"}, exitError, "is the daemon running?", ""},
		{[]string{"delete", "--socket", missing, "ch"}, exitUsage, "usage: residentd delete [flags] CHANNEL_ID MESSAGE_ID", ""},
		{[]string{"delete", "--socket", missing, "ch", "m1"}, exitError, "is the daemon running?", ""},
		{[]string{"mention", "--bogus"}, exitUsage, "see residentd mention --help", ""},
		{[]string{"mention", "--channel", "ch"}, exitUsage, "usage: residentd mention --channel ID", ""},
		{[]string{"serve", "extra"}, exitUsage, `serve takes no arguments, got "extra"`, ""},
		{[]string{"answer", "run-1"}, exitUsage, "RUN_ID REQUEST_ID OPTION_ID", ""},
		{[]string{"attach"}, exitUsage, "usage: residentd attach [flags] RUN_ID", ""},
		{[]string{"cancel"}, exitUsage, "usage: residentd cancel [flags] RUN_ID", ""},
		{[]string{"mention", "--ask", "maybe", "--channel", "ch", "hi"}, exitUsage, `--ask "maybe"`, ""},
	}
	for _, c := range cases {
		out.Reset()
		errOut.Reset()
		code := run(c.args, strings.NewReader(c.stdin), &out, &errOut)
		msg := errOut.String()
		if code != c.code || !strings.Contains(msg, c.want) {
			t.Errorf("%q: exit %d, stderr %q; want exit %d and %q", c.args, code, msg, c.code, c.want)
		}
		if strings.Contains(msg, "Go struct") || strings.Contains(msg, "time.Time") {
			t.Errorf("%q: Go type names in %q", c.args, msg)
		}
		if n := strings.Count(msg, "residentd:"); n != 1 || strings.Count(msg, "\n") != 1 {
			t.Errorf("%q: the error should be one line with one prefix: %q", c.args, msg)
		}
		if n := strings.Count(strings.ToLower(msg), "usage:"); n > 1 {
			t.Errorf("%q: usage said %d times: %q", c.args, n, msg)
		}
	}

	// version prints the binary's version and exits 0 when only the daemon
	// is not there, saying so.
	out.Reset()
	errOut.Reset()
	if code := run([]string{"version", "--socket", missing}, nil, &out, &errOut); code != exitOK || !strings.HasPrefix(out.String(), "residentd "+version+"\n") || !strings.Contains(out.String(), "daemon: not reachable on "+missing) || errOut.Len() != 0 {
		t.Errorf("version without a daemon: exit %d, stdout %q, stderr %q", code, out.String(), errOut.String())
	}
}

// askConfig binds b-ask, the built-in agent under the ask policy.
const askConfig = `{"bindings":[{"id":"b-ask","handle":"@asker","command":$EXE,"args":["agent"],"permission":"ask","supervised":true,"resident":true}]}`

// A binding whose policy is ask puts the agent's permission request to the
// person at the terminal; their answer reaches the agent through the
// daemon. Flags after the text work.
func TestMentionAsksThePerson(t *testing.T) {
	d := startDaemon(t, serveOpts{config: askConfig})

	// Push, edit and delete from the command line.
	for _, step := range []struct {
		args  []string
		stdin string
		want  string
		code  int
	}{
		{[]string{"push"}, `{"id":"m1","channel_id":"ch-ask","author":"aiko","author_kind":"user","created_at":"2026-12-01T09:00:00Z","body":"one"}`, "1 messages: 1 new, 0 edited, 0 duplicates", exitOK},
		{[]string{"push"}, `{"id":"m1","channel_id":"ch-ask","author":"aiko","author_kind":"user","created_at":"2026-12-01T09:00:00Z","body":"one, fixed"}`, "1 messages: 0 new, 1 edited, 0 duplicates", exitOK},
		{[]string{"delete", "ch-ask", "m1"}, "", "deleted m1 from ch-ask", exitOK},
		{[]string{"delete", "ch-ask", "m1"}, "", `no message "m1"`, exitError},
	} {
		d.cli(t, step.stdin, step.code, step.want, step.args...)
	}

	for _, tc := range []struct{ answer, kind string }{{"x\n1\n", "allow_once"}, {"reject_once\n", "reject_once"}} {
		p := newProc(testkit.Exe(t), []string{"mention", "--binding", "b-ask", "[[permission:edit]] fix the spec", "--channel", "ch-ask", "--ask", "yes", "--socket", d.sock}, childEnv())
		p.cmd.Stdin = strings.NewReader(tc.answer)
		p.start(t)
		code := p.wait(t, 60*time.Second)
		got := p.out.String()
		t.Logf("answer %q:\n%s", tc.answer, got)
		if code != exitOK {
			t.Fatalf("mention: exit %d\n%s", code, got)
		}
		for _, want := range []string{"the agent asks to", "1) ", "[allow_once]", "[permission ", tc.kind + ", by person]", "watermark"} {
			if !strings.Contains(got, want) {
				t.Errorf("answer %q: output lacks %q:\n%s", tc.answer, want, got)
			}
		}
		if strings.HasPrefix(tc.answer, "x") && !strings.Contains(got, `"x" is not one of the options`) {
			t.Errorf("a wrong answer was not asked again:\n%s", got)
		}
	}
}

// Session options and budgets from the command line, against a real
// daemon: set, show, refuse an unlisted value, clear; the budget event in
// mention's output, the budgets table, status, and the refusal.
func TestOptionsAndBudgetsFromTheCommandLine(t *testing.T) {
	d := startDaemon(t, serveOpts{config: `{"budgets":{"timezone":"UTC","bindings":{"b-paid":1}},
		"bindings":[{"id":"b-paid","handle":"@paid","command":$EXE,"args":["agent","--cost","0.5"],"supervised":true,"resident":true,"session_options":{"mode":"code"}}]}`})
	cli := func(want string, code int, args ...string) string {
		t.Helper()
		return d.cli(t, "", code, want, args...)
	}
	cli(`"model": "builtin-large"`, exitOK, "options", "--channel", "ch", "--binding", "b-paid", "model=builtin-large")
	out := cli(`"mode": "code"`, exitOK, "options", "--channel", "ch", "--binding", "b-paid")
	if !strings.Contains(out, `"effective"`) {
		t.Fatalf("options without arguments printed %q", out)
	}
	cli(`option "model" must be ID=VALUE`, exitUsage, "options", "--channel", "ch", "--binding", "b-paid", "model")
	cli("builtin turn=1", exitOK, "mention", "--channel", "ch", "--binding", "b-paid", "@paid one")
	cli("[budget binding b-paid: exceeded, 1 of 1 USD spent today", exitOK, "mention", "--channel", "ch", "--binding", "b-paid", "@paid two")
	cli("invalid session option", exitError, "options", "--channel", "ch", "--binding", "b-paid", "model=gpt-9")
	cli(`"options": {}`, exitOK, "options", "--channel", "ch", "--binding", "b-paid", "--clear")
	cli("budget_exceeded", exitError, "mention", "--channel", "ch", "--binding", "b-paid", "@paid three")
	table := cli("exceeded", exitOK, "budgets")
	if !strings.Contains(table, "binding  b-paid") || !strings.Contains(table, "100%") {
		t.Fatalf("budgets printed:\n%s", table)
	}
	cli("budget binding b-paid: exceeded", exitOK, "status")
}

// Health and status say which bindings can start, from a config where some
// commands are missing, a file is not executable and one is a directory;
// nothing is started to find out, and a fix shows on the next request.
func TestStatusSaysWhichBindingsCanStart(t *testing.T) {
	tmp := t.TempDir()
	noexec := filepath.Join(tmp, "agent-noexec")
	if err := os.WriteFile(noexec, []byte("#!/bin/sh\nexec true\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	d := startDaemon(t, serveOpts{config: `{"bindings":[
		{"id":"b-ok","handle":"@ok","command":$EXE,"args":["agent"]},
		{"id":"b-gone","handle":"@gone","command":"residentd-no-such-agent-xyz"},
		{"id":"b-nofile","handle":"@nofile","command":"` + filepath.Join(tmp, "nothing-here") + `"},
		{"id":"b-noexec","handle":"@noexec","command":"` + noexec + `"},
		{"id":"b-dir","handle":"@dir","command":"` + tmp + `"}]}`})
	h := d.health
	got := map[string]apitype.BindingCommand{}
	for _, b := range h.BindingCommands {
		got[b.Binding] = b
	}
	for id, want := range map[string]string{"b-builtin": "", "b-ok": "", "b-gone": `command "residentd-no-such-agent-xyz" not found on PATH`,
		"b-nofile": "does not exist", "b-noexec": "is not executable", "b-dir": "is a directory"} {
		b, ok := got[id]
		switch {
		case !ok:
			t.Errorf("health lists no binding %s: %+v", id, h.BindingCommands)
		case want == "" && (!b.Startable || b.Path == ""):
			t.Errorf("%s: %+v, want startable with its path", id, b)
		case want != "" && (b.Startable || !strings.Contains(b.Problem, want)):
			t.Errorf("%s: %+v, want not startable: %q", id, b, want)
		}
	}
	if h.Live != 0 {
		t.Fatalf("checking the bindings started %d agents", h.Live)
	}
	status := func() string {
		t.Helper()
		return d.cli(t, "", exitOK, "", "status")
	}
	out := status()
	for _, want := range []string{"binding b-gone cannot start: command \"residentd-no-such-agent-xyz\" not found on PATH",
		"binding b-noexec cannot start: " + noexec + " is not executable", "binding b-dir cannot start: " + tmp + " is a directory",
		"bindings: 2 of 6 can start their agent"} {
		if !strings.Contains(out, want) {
			t.Errorf("status printed:\n%s\nwant %q", out, want)
		}
	}
	// Checked on demand: the fixed binding counts on the next request.
	if err := os.Chmod(noexec, 0o755); err != nil {
		t.Fatal(err)
	}
	if out := status(); !strings.Contains(out, "bindings: 3 of 6 can start their agent") || strings.Contains(out, "b-noexec cannot start") {
		t.Fatalf("after chmod +x, status printed:\n%s", out)
	}
}

// attach and mention with --ask auto and standard input that is not a
// terminal (/dev/null is a character device, not a terminal) do not
// prompt: they say how to answer. A replayed request that a person
// answered is shown as asked and decided, not as waiting to be rejected;
// and attach from beyond the run's last event says there was nothing
// after it.
func TestAttachReplaysDecisions(t *testing.T) {
	devnull, err := os.Open(os.DevNull)
	if err != nil {
		t.Fatal(err)
	}
	defer devnull.Close()
	d := startDaemon(t, serveOpts{config: askConfig})
	sock := d.sock
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	type result struct {
		code     int
		out, err string
	}
	mentioned := make(chan result, 1)
	// The mention's own output says when it has read the request: answered
	// before that, the request would reach it already decided.
	var mout syncBuffer
	go func() {
		var errOut bytes.Buffer
		code := run([]string{"mention", "--socket", sock, "--binding", "b-ask", "--channel", "ch", "--run", "run-ask", "--ask", "auto", "[[permission:edit]] fix it"}, devnull, &mout, &errOut)
		mentioned <- result{code, mout.String(), errOut.String()}
	}()
	for {
		text, changed := mout.snapshot()
		if strings.Contains(text, "answer with: residentd answer run-ask ") {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("the mention never showed the request:\n%s", text)
		case m := <-mentioned:
			t.Fatalf("the mention ended before it showed the request: exit %d\n%s%s", m.code, m.out, m.err)
		case <-changed:
		}
	}
	c := dial(t, sock)
	r, err := c.Run(ctx, "run-ask")
	if err != nil || len(r.Pending) != 1 {
		t.Fatalf("run-ask while the mention shows its request: %+v, %v", r, err)
	}
	req := r.Pending[0]
	if err := c.Answer(ctx, "run-ask", req.ID, "allow"); err != nil {
		t.Fatal(err)
	}
	m := <-mentioned
	t.Logf("mention:\n%s%s", m.out, m.err)
	if m.code != exitOK || !strings.Contains(m.out, "the agent asks to") || !strings.Contains(m.out, "answer with: residentd answer run-ask "+req.ID) || strings.Contains(m.out, "answer 1-") {
		t.Fatalf("mention --ask auto with /dev/null: exit %d; want the hint and no prompt:\n%s%s", m.code, m.out, m.err)
	}

	var out, errOut bytes.Buffer
	if code := run([]string{"attach", "--socket", sock, "run-ask"}, devnull, &out, &errOut); code != exitOK {
		t.Fatalf("attach: exit %d: %s", code, errOut.String())
	}
	got := out.String()
	t.Logf("attach:\n%s", got)
	for _, want := range []string{"the agent asked to builtin edit tool (edit)", "[permission builtin edit tool: allow_once, by person]", "watermark"} {
		if !strings.Contains(got, want) {
			t.Errorf("attach lacks %q", want)
		}
	}
	for _, wrong := range []string{"without an answer", "answer with", "answer 1-", "no answer read"} {
		if strings.Contains(got, wrong) {
			t.Errorf("attach of a decided request says %q", wrong)
		}
	}

	r, err = c.Run(ctx, "run-ask")
	if err != nil {
		t.Fatal(err)
	}
	out.Reset()
	errOut.Reset()
	if code := run([]string{"attach", "--socket", sock, "--after", "99", "run-ask"}, devnull, &out, &errOut); code != exitOK || out.String() != fmt.Sprintf("nothing after seq 99: run run-ask ended (succeeded) at seq %d\n", r.LastSeq) {
		t.Fatalf("attach --after 99: exit %d, %q %q", code, out.String(), errOut.String())
	}
}

// status shows a key whose agent works in the background (ACP v2
// state_update working) as working, from the sessions listing of a real
// daemon; start fresh then ends the work and stops the process promptly
// (the agent answers session/cancel by reporting idle).
func TestStatusShowsBackgroundWork(t *testing.T) {
	d := startDaemon(t, serveOpts{})
	cli := func(args ...string) string {
		t.Helper()
		return d.cli(t, "", exitOK, "", args...)
	}
	cli("mention", "--channel", "ch-bg", "--binding", "b-builtin", "@agent [[state:1h]] work on it")
	var row string
	for _, l := range strings.Split(cli("status"), "\n") {
		if strings.HasPrefix(l, "ch-bg/b-builtin ") {
			row = l
			break // the sessions table's; the residency table's comes later
		}
	}
	if f := strings.Fields(row); len(f) < 2 || f[1] != "working" {
		t.Fatalf("status row of the key with background work: %q, want state working", row)
	}
	if out := cli("fresh", "--channel", "ch-bg", "--binding", "b-builtin"); !strings.Contains(out, "process stopped: true") {
		t.Fatalf("fresh printed %q", out)
	}
	if out := cli("status"); strings.Contains(out, "ch-bg/b-builtin ") {
		t.Fatalf("status after start fresh still lists the key:\n%s", out)
	}
}

// TestEventsFollowsTheFeed: `residentd events` prints each run's start and
// end as they come, from a position beyond the newest too, as JSON lines
// with --json, and stops cleanly when interrupted.
func TestEventsFollowsTheFeed(t *testing.T) {
	d := startDaemon(t, serveOpts{})
	d.cli(t, "", exitOK, "builtin turn=1", "mention", "--channel", "ch", "--binding", "b-builtin", "@agent one")
	for _, tt := range []struct {
		args []string
		want []string // in the output, in order, once the next turn has ended
	}{
		{[]string{"--after", "0"}, []string{"\trun_started\t", "\tturn\tch/b-builtin\t", "\trun_ended\t", "\tsucceeded\n", "\trun_started\t", "\tch2/b-builtin\tstarting\n", "\trun_ended\t", "\tch2/b-builtin\tsucceeded\n"}},
		{[]string{"--after", "9223372036854775807", "--json"}, []string{`{"event":"run_started","seq":`, `"channel_id":"ch3"`, `{"event":"run_ended",`, `"channel_id":"ch3"`, `"state":"succeeded"`}},
	} {
		ctx, cancel := context.WithCancel(context.Background())
		out := &syncBuffer{}
		done := make(chan error, 1)
		go func() {
			done <- lookup("events").exec(ctx, append(tt.args, "--socket", d.sock), strings.NewReader(""), out, io.Discard)
		}()
		// A turn after the feed is followed shows; nothing says when it is
		// followed, so turns go on until one has.
		ch := "ch" + fmt.Sprint(len(tt.args))
		deadline := time.Now().Add(60 * time.Second)
		for {
			text, changed := out.snapshot()
			if inOrder(text, tt.want) {
				break // a whole turn of ch: followed from before its start
			}
			if time.Now().After(deadline) {
				t.Fatalf("events %q printed %q, not a turn of %s", tt.args, text, ch)
			}
			d.cli(t, "", exitOK, "builtin turn=", "mention", "--channel", ch, "--binding", "b-builtin", "@agent next")
			select {
			case <-changed:
			case err := <-done:
				t.Fatalf("events %q ended: %v, after %q", tt.args, err, text)
			case <-time.After(time.Second):
			}
		}
		cancel()
		if err := <-done; err != nil {
			t.Fatalf("events %q, interrupted: %v", tt.args, err)
		}
		if text := out.String(); !inOrder(text, tt.want) {
			t.Fatalf("events %q printed %q, not %q in order", tt.args, text, tt.want)
		}
	}
}

// inOrder reports whether text holds each of want, in order.
func inOrder(text string, want []string) bool {
	for _, w := range want {
		i := strings.Index(text, w)
		if i < 0 {
			return false
		}
		text = text[i+len(w):]
	}
	return true
}
