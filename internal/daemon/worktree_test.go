package daemon_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/residentd/residentd/apitype"
	"github.com/residentd/residentd/internal/config"
	"github.com/residentd/residentd/internal/daemon"
	"github.com/residentd/residentd/internal/daemontest"
	"github.com/residentd/residentd/internal/session"
	"github.com/residentd/residentd/internal/testkit"
	"github.com/residentd/residentd/internal/workspace"
)

// inRepo makes the first binding's dir a git repository of the test's own
// (*repo) with workspace ws, and records what its agent gets in *rec.
func inRepo(repo, rec *string, ws string) func(*config.Config) {
	return func(c *config.Config) {
		recordTo(rec)(c)
		c.Bindings[0].Dir, c.Bindings[0].Workspace = *repo, ws
	}
}

// sessionCwds maps each native session to the cwd of every session/new,
// session/load, session/resume and session/fork the agent got for it, in
// order ("method cwd").
func sessionCwds(t *testing.T, rec string) map[string][]string {
	t.Helper()
	out := map[string][]string{}
	for _, r := range records(t, rec) {
		switch m := r["method"].(string); m {
		case "session/new", "session/load", "session/resume", "session/fork":
			cwd, _ := r["cwd"].(string)
			out[r["session"].(string)] = append(out[r["session"].(string)], m+" "+cwd)
		}
	}
	return out
}

// promptsOf lists the text of every prompt the agent got for native.
func promptsOf(t *testing.T, rec, native string) []string {
	t.Helper()
	var out []string
	for _, r := range records(t, rec) {
		if r["method"] == "session/prompt" && r["session"] == native {
			out = append(out, r["prompt"].(string))
		}
	}
	return out
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// editAtOnce runs a turn on each channel at once, each writing notes.txt
// into its session's cwd and then holding until both have written, and
// returns the turns' results by channel.
func editAtOnce(t *testing.T, h *harness, binding string, chs ...string) map[string]result {
	t.Helper()
	gate := filepath.Join(t.TempDir(), "gate")
	var wg sync.WaitGroup
	var mu sync.Mutex
	out := map[string]result{}
	for _, ch := range chs {
		wg.Go(func() {
			r := h.turn(apitype.TurnRequest{Channel: ch, Binding: binding, Text: "@agent write your notes [[write-cwd:notes.txt]] [[hold:" + gate + "]]"})
			mu.Lock()
			out[ch] = r
			mu.Unlock()
		})
	}
	// Both turns are in flight once both agents have written (each writes
	// before it holds); then they may end.
	rec := h.cfg.Bindings[0].Args[len(h.cfg.Bindings[0].Args)-1]
	testkit.WaitFor(t, 30*time.Second, func() bool {
		data, _ := os.ReadFile(rec) // none yet before the first session
		return strings.Count(string(data), "[[hold:"+gate) == len(chs)
	}, testkit.Waiting("%d turns to be in flight at once", len(chs)))
	if err := os.WriteFile(gate, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	for ch, r := range out {
		if r.err != nil {
			t.Fatalf("%s: %v", ch, r.err)
		}
	}
	return out
}

// TestTwoChannelsEditAtOnceInTheirOwnWorktrees: with workspace worktree,
// two channels' turns editing the same file at the same time each edit
// their key's own worktree, on its own branch: neither sees the other's
// change, the repository's own working tree is untouched, each session
// opened with its worktree as cwd and was told its folder and branch in
// the channel facts, and the sessions listing shows each worktree's
// change.
func TestTwoChannelsEditAtOnceInTheirOwnWorktrees(t *testing.T) {
	repo, rec := testkit.GitRepo(t), ""
	h := newHarness(t, inRepo(&repo, &rec, workspace.Worktree))
	out := editAtOnce(t, h, "b-builtin", "ch-a", "ch-b")

	root := filepath.Join(h.dir, "worktrees", "b-builtin")
	cwds := sessionCwds(t, rec)
	for _, ch := range []string{"ch-a", "ch-b"} {
		native, wt := out[ch].done.Native, filepath.Join(root, ch)
		if got := readFile(t, filepath.Join(wt, "notes.txt")); got != "written by builtin session "+native+"\n" {
			t.Errorf("%s's notes.txt: %q, want its own session's", ch, got)
		}
		if got := cwds[native]; !slices.Equal(got, []string{"session/new " + wt}) {
			t.Errorf("%s's session requests %q, want session/new in %s", ch, got, wt)
		}
		first := promptsOf(t, rec, native)[0]
		fact := `"worktree":{"path":"` + wt + `","branch":"residentd/b-builtin/` + ch + `"}`
		if !strings.Contains(first, "Channel facts: ") || !strings.Contains(first, fact) {
			t.Errorf("%s's cold prompt does not carry the fact %s:\n%s", ch, fact, first)
		}
		if st := testkit.Git(t, wt, "status", "--porcelain"); st != "?? notes.txt\n" {
			t.Errorf("git status in %s's worktree: %q, want its one change", ch, st)
		}
	}
	if st := testkit.Git(t, repo, "status", "--porcelain"); st != "" {
		t.Errorf("git status of the binding's dir: %q, want nothing: the agents worked in their worktrees", st)
	}
	list := testkit.Git(t, repo, "worktree", "list", "--porcelain")
	for _, ch := range []string{"ch-a", "ch-b"} {
		if !strings.Contains(list, "worktree "+filepath.Join(root, ch)+"\n") || !strings.Contains(list, "branch refs/heads/residentd/b-builtin/"+ch+"\n") {
			t.Errorf("git worktree list does not show %s's:\n%s", ch, list)
		}
	}
	rows := map[string]*apitype.Worktree{}
	for _, s := range h.d.Sessions() {
		rows[s.Channel] = s.Worktree
	}
	for _, ch := range []string{"ch-a", "ch-b"} {
		w := rows[ch]
		if w == nil || w.Path != filepath.Join(root, ch) || w.Changes != 1 || !slices.Equal(w.Changed, []string{"?? notes.txt"}) || w.Repository != repo {
			t.Errorf("%s's row in the sessions listing: %+v", ch, w)
		}
	}
	if all := h.d.Worktrees(""); len(all) != 2 || len(h.d.Worktrees("ch-a")) != 1 {
		t.Errorf("worktrees listed: %+v", all)
	}
}

// TestSharedChannelsEditOneWorkingTree: with workspace shared (the
// default), the same two turns edit the binding's dir itself: one
// notes.txt, the last writer's, in the repository's own status.
func TestSharedChannelsEditOneWorkingTree(t *testing.T) {
	repo, rec := testkit.GitRepo(t), ""
	h := newHarness(t, inRepo(&repo, &rec, ""))
	out := editAtOnce(t, h, "b-builtin", "ch-a", "ch-b")
	got := readFile(t, filepath.Join(repo, "notes.txt"))
	if got != "written by builtin session "+out["ch-a"].done.Native+"\n" && got != "written by builtin session "+out["ch-b"].done.Native+"\n" {
		t.Fatalf("notes.txt in the shared dir: %q", got)
	}
	if st := testkit.Git(t, repo, "status", "--porcelain"); st != "?? notes.txt\n" {
		t.Fatalf("git status of the shared dir: %q", st)
	}
	for _, s := range h.d.Sessions() {
		if s.Worktree != nil {
			t.Fatalf("a shared binding's session lists a worktree: %+v", s.Worktree)
		}
	}
	if n := strings.Count(testkit.Git(t, repo, "worktree", "list"), "\n"); n != 1 {
		t.Fatalf("a shared binding made worktrees: %d listed", n)
	}
}

// TestWorktreeOutlivesEvictionsAndRestarts: a key's session is reopened
// in the worktree it opened in, after a capacity eviction and after a
// daemon restart, and its facts do not change (no "Channel facts
// changed" line): every request for the session carries the same cwd.
func TestWorktreeOutlivesEvictionsAndRestarts(t *testing.T) {
	repo, rec := testkit.GitRepo(t), ""
	h := newHarness(t, inRepo(&repo, &rec, workspace.Worktree), func(c *config.Config) { c.MaxLive = 1 })
	a := h.mention("ch-a", "b-builtin", "a1", "@agent first [[write-cwd:a.txt]]")
	if a.err != nil {
		t.Fatal(a.err)
	}
	native := a.done.Native
	if r := h.mention("ch-b", "b-builtin", "b1", "@agent evict a"); r.err != nil {
		t.Fatal(r.err)
	}
	if r := h.mention("ch-a", "b-builtin", "a2", "@agent again"); r.err != nil || r.done.Shape != "restored" || r.done.Native != native {
		t.Fatalf("after the eviction: %+v %v", r.done, r.err)
	}
	h.restart()
	r := h.mention("ch-a", "b-builtin", "a3", "@agent after the restart [[write-cwd:b.txt]]")
	if r.err != nil || r.done.Shape != "restored" || r.done.Native != native {
		t.Fatalf("after the restart: %+v %v", r.done, r.err)
	}
	wt := filepath.Join(h.dir, "worktrees", "b-builtin", "ch-a")
	reqs := sessionCwds(t, rec)[native]
	if len(reqs) != 3 || !strings.HasPrefix(reqs[0], "session/new ") {
		t.Fatalf("ch-a's session requests %q, want a new one and two reopenings", reqs)
	}
	for _, q := range reqs {
		if !strings.HasSuffix(q, " "+wt) {
			t.Errorf("request %q for ch-a's session is not in its worktree %s", q, wt)
		}
	}
	for i, p := range promptsOf(t, rec, native)[1:] {
		if strings.Contains(p, "Channel facts changed") {
			t.Errorf("prompt %d of ch-a says the facts changed:\n%s", i+2, p)
		}
	}
	if st := testkit.Git(t, wt, "status", "--porcelain"); st != "?? a.txt\n?? b.txt\n" {
		t.Fatalf("ch-a's worktree after the restart: %q", st)
	}
}

// TestFreshKeepsTheWorktreeAndNeverResetsChanges: start fresh keeps the
// key's worktree (the next session opens there again, its change still
// there); a reset of a worktree with uncommitted changes, across a daemon
// restart, is refused with the files and touches nothing (the process and
// the session stay); once they are committed the reset removes the
// folder, keeps the branch with the commit, and the key's next session
// gets a new worktree from HEAD.
func TestFreshKeepsTheWorktreeAndNeverResetsChanges(t *testing.T) {
	repo, rec := testkit.GitRepo(t), ""
	h := newHarness(t, inRepo(&repo, &rec, workspace.Worktree))
	k := session.Key{Channel: "ch", Binding: "b-builtin"}
	wt := filepath.Join(h.dir, "worktrees", "b-builtin", "ch")
	// Not a channel message: a later block would show it, and the agent
	// would write again.
	first := h.turn(apitype.TurnRequest{Channel: "ch", Binding: "b-builtin", Text: "@agent draft [[write-cwd:draft.txt]]"})
	if first.err != nil {
		t.Fatal(first.err)
	}
	if had, err := h.d.Fresh(k); err != nil || !had {
		t.Fatalf("fresh: %v %v", had, err)
	}
	second := h.mention("ch", "b-builtin", "m2", "@agent again")
	if second.err != nil || second.done.Shape != "cold" || second.done.Native == first.done.Native {
		t.Fatalf("after start fresh: %+v %v", second.done, second.err)
	}
	if got := sessionCwds(t, rec)[second.done.Native]; !slices.Equal(got, []string{"session/new " + wt}) {
		t.Fatalf("the session after start fresh opened %q, want in the kept worktree", got)
	}
	if _, err := os.Stat(filepath.Join(wt, "draft.txt")); err != nil {
		t.Fatalf("start fresh lost the worktree's change: %v", err)
	}

	h.restart()
	if r := h.mention("ch", "b-builtin", "m3", "@agent restored"); r.err != nil || r.done.Shape != "restored" {
		t.Fatalf("after the restart: %+v %v", r.done, r.err)
	}
	pid := h.d.Sessions()[0].Pid
	_, err := h.d.FreshKey(k, true)
	if !errors.Is(err, workspace.ErrUncommitted) || daemon.Code(err) != apitype.CodeWorktreeHasChanges || !strings.Contains(err.Error(), "?? draft.txt") || !strings.Contains(err.Error(), wt) {
		t.Fatalf("reset with an uncommitted change: %v (code %s)", err, daemon.Code(err))
	}
	if got := readFile(t, filepath.Join(wt, "draft.txt")); !strings.HasPrefix(got, "written by builtin session ") {
		t.Fatalf("the refused reset touched draft.txt: %q", got)
	}
	if ss := h.d.Sessions(); len(ss) != 1 || ss[0].Pid != pid {
		t.Fatalf("the refused reset stopped the key's process: %+v (pid was %d)", ss, pid)
	}
	if r := h.mention("ch", "b-builtin", "m4", "@agent still here"); r.err != nil || r.done.Shape != "warm" {
		t.Fatalf("the turn after a refused reset: %+v %v", r.done, r.err)
	}

	testkit.Git(t, wt, "add", "draft.txt")
	testkit.Git(t, wt, "commit", "-q", "-m", "the agent's draft")
	out, err := h.d.FreshKey(k, true)
	if err != nil {
		t.Fatal(err)
	}
	w := out.Worktree
	if !out.StoppedProcess || w == nil || !w.Removed || w.Path != wt || !strings.HasPrefix(w.BranchKept, "residentd/b-builtin/ch.reset-") {
		t.Fatalf("reset: %+v %+v", out, w)
	}
	if _, err := os.Stat(wt); err == nil {
		t.Fatal("the reset left the worktree's folder")
	}
	if log := testkit.Git(t, repo, "log", "--format=%s", w.BranchKept); !strings.Contains(log, "the agent's draft") {
		t.Fatalf("the kept branch: %q", log)
	}
	third := h.mention("ch", "b-builtin", "m5", "@agent anew")
	if third.err != nil || third.done.Shape != "cold" {
		t.Fatalf("after the reset: %+v %v", third.done, third.err)
	}
	if _, err := os.Stat(filepath.Join(wt, "draft.txt")); err == nil {
		t.Fatal("the new worktree holds the old branch's draft: it was not made from HEAD")
	}
	if head, base := strings.TrimSpace(testkit.Git(t, repo, "rev-parse", "HEAD")), h.d.Worktrees("ch")[0].Base; base != head {
		t.Fatalf("the new worktree's base %s, want HEAD %s", base, head)
	}
}

// TestWorktreeSparesOpenNoSessionAhead: a worktree binding's spare opens
// no session ahead (its cwd would be the binding's dir): the cold turn
// that takes it opens the key's session in the key's worktree, and no
// session ever opens in the binding's dir.
func TestWorktreeSparesOpenNoSessionAhead(t *testing.T) {
	repo, rec := testkit.GitRepo(t), ""
	h := newHarness(t, inRepo(&repo, &rec, workspace.Worktree), func(c *config.Config) {
		one := 1
		c.Bindings[0].Spare, c.Bindings[0].SpareAtStart = &one, true
	})
	spare := h.nextSpare()
	r := h.mention("ch", "b-builtin", "m1", "@agent on the spare")
	if r.err != nil {
		t.Fatal(r.err)
	}
	if ss := h.d.Sessions(); len(ss) != 1 || ss[0].Pid != spare.pid {
		t.Fatalf("the turn did not take the spare %d: %+v", spare.pid, ss)
	}
	wt := filepath.Join(h.dir, "worktrees", "b-builtin", "ch")
	for native, reqs := range sessionCwds(t, rec) {
		for _, q := range reqs {
			if !strings.HasSuffix(q, " "+wt) {
				t.Errorf("session %s: %q, want every session in the key's worktree", native, q)
			}
		}
	}
	if got := sessionCwds(t, rec)[r.done.Native]; len(got) != 1 {
		t.Fatalf("the turn's session: %q", got)
	}
}

// TestThreadWorktreeBranchesFromItsChannel: a thread key gets its own
// worktree, branched from its channel key's branch head; its first
// session, forked from the channel's, opens there and is told so.
func TestThreadWorktreeBranchesFromItsChannel(t *testing.T) {
	repo, rec := testkit.GitRepo(t), ""
	h := newHarness(t, threadScope(&rec, true), func(c *config.Config) {
		c.Bindings[0].Dir, c.Bindings[0].Workspace = repo, workspace.Worktree
	})
	if r := h.mention("ch", "b-builtin", "root", "@agent start [[write-cwd:plan.txt]]"); r.err != nil {
		t.Fatal(r.err)
	}
	chWT := filepath.Join(h.dir, "worktrees", "b-builtin", "ch")
	testkit.Git(t, chWT, "add", "plan.txt")
	testkit.Git(t, chWT, "commit", "-q", "-m", "the plan")
	head := strings.TrimSpace(testkit.Git(t, chWT, "rev-parse", "HEAD"))
	r := h.threadMention("ch", "root", "t1", "@agent in the thread")
	if r.err != nil || r.done.Shape != "restored" {
		t.Fatalf("thread's first turn: %+v %v", r.done, r.err)
	}
	thWT := filepath.Join(h.dir, "worktrees", "b-builtin", "ch+root")
	if got := sessionCwds(t, rec)[r.done.Native]; !slices.Equal(got, []string{"session/fork " + thWT}) {
		t.Fatalf("the thread's session: %q, want forked in %s", got, thWT)
	}
	if base := strings.TrimSpace(testkit.Git(t, thWT, "rev-parse", "HEAD")); base != head {
		t.Fatalf("the thread's worktree is at %s, want its channel's head %s", base, head)
	}
	if b := strings.TrimSpace(testkit.Git(t, thWT, "branch", "--show-current")); b != "residentd/b-builtin/ch+root" {
		t.Fatalf("the thread's branch: %q", b)
	}
	p := promptsOf(t, rec, r.done.Native)[0]
	if !strings.Contains(p, "Channel facts changed: ") || !strings.Contains(p, `"path":"`+thWT+`"`) {
		t.Fatalf("the thread's first prompt does not tell it its worktree:\n%s", p)
	}
}

// TestWorktreeFolderGoneAtStartup: a worktree folder removed by hand
// while the daemon was down: the startup sweep prunes its record and the
// key's saved session opened there, so the key's next turn opens a new
// session (cold, the conversation replayed) in a worktree made again on
// its branch, with the branch's commits.
func TestWorktreeFolderGoneAtStartup(t *testing.T) {
	repo, rec := testkit.GitRepo(t), ""
	h := newHarness(t, inRepo(&repo, &rec, workspace.Worktree))
	first := h.mention("ch", "b-builtin", "m1", "@agent work")
	if first.err != nil {
		t.Fatal(first.err)
	}
	wt := filepath.Join(h.dir, "worktrees", "b-builtin", "ch")
	if err := os.WriteFile(filepath.Join(wt, "work.txt"), []byte("committed work\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	testkit.Git(t, wt, "add", "work.txt")
	testkit.Git(t, wt, "commit", "-q", "-m", "work")
	h.close()
	if err := os.RemoveAll(wt); err != nil {
		t.Fatal(err)
	}
	h.open()
	if n, err := h.st.NativeID(session.Key{Channel: "ch", Binding: "b-builtin"}); err != nil || n != "" {
		t.Fatalf("the saved session opened in the gone worktree: %q %v", n, err)
	}
	r := h.mention("ch", "b-builtin", "m2", "@agent again")
	if r.err != nil || r.done.Shape != "cold" || r.done.Native == first.done.Native {
		t.Fatalf("after the startup sweep: %+v %v", r.done, r.err)
	}
	if got := readFile(t, filepath.Join(wt, "work.txt")); got != "committed work\n" {
		t.Fatalf("the worktree made again lacks the branch's commit: %q", got)
	}
	if got := sessionCwds(t, rec)[r.done.Native]; !slices.Equal(got, []string{"session/new " + wt}) {
		t.Fatalf("the new session: %q", got)
	}
}

// TestRemovedBindingLeavesOnlyChangedWorktrees: a reload that removes a
// worktree binding removes its keys' worktrees once their processes have
// stopped, those without uncommitted changes; one with changes stays, in
// the listing as binding_removed, also across a restart, until its
// changes are gone, when the next startup removes it.
func TestRemovedBindingLeavesOnlyChangedWorktrees(t *testing.T) {
	dir, repo := t.TempDir(), testkit.GitRepo(t)
	file := filepath.Join(dir, "config.json")
	keep, err := daemontest.Builtin("b-builtin", dir)
	if err != nil {
		t.Fatal(err)
	}
	wt, err := daemontest.Builtin("b-wt", dir)
	if err != nil {
		t.Fatal(err)
	}
	wt.Dir, wt.Workspace = repo, workspace.Worktree
	write := func(bs ...config.Binding) {
		t.Helper()
		data, err := json.Marshal(config.Config{Bindings: bs})
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(file, data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write(keep, wt)
	load := daemontest.FileLoader(file, dir)
	c, err := load()
	if err != nil {
		t.Fatal(err)
	}
	h := daemontest.New(t, c, daemontest.Options{Reload: load, ConfigFile: file})
	ctx := context.Background()
	for _, r := range []apitype.TurnRequest{
		{Channel: "ch-clean", Binding: "b-wt", Text: "@agent look"},
		{Channel: "ch-dirty", Binding: "b-wt", Text: "@agent [[write-cwd:notes.txt]]"},
	} {
		if res := h.Turn(ctx, r); res.Err != nil {
			t.Fatal(res.Err)
		}
	}
	root := filepath.Join(dir, "worktrees", "b-wt")
	clean, dirty := filepath.Join(root, "ch-clean"), filepath.Join(root, "ch-dirty")

	write(keep)
	if _, err := h.Reload(); err != nil {
		t.Fatal(err)
	}
	left := func(d *daemontest.Daemon) []apitype.Worktree {
		t.Helper()
		// The clean one goes off the reload's path, its record last.
		testkit.WaitFor(t, 30*time.Second, func() bool { return len(d.Worktrees("")) == 1 }, testkit.Waiting("one worktree left"))
		return d.Worktrees("")
	}
	if w := left(h)[0]; w.Path != dirty || !w.BindingRemoved || w.Changes != 1 {
		t.Fatalf("left after the reload: %+v", w)
	}
	if _, err := os.Stat(clean); err == nil {
		t.Fatalf("the clean worktree %s stays", clean)
	}
	if got := readFile(t, filepath.Join(dirty, "notes.txt")); !strings.HasPrefix(got, "written by builtin session ") {
		t.Fatalf("the removed binding's uncommitted change: %q", got)
	}
	if b := testkit.Git(t, repo, "branch", "--list", "residentd/b-wt/ch-clean"); b != "" {
		t.Fatalf("the clean worktree's branch, with no commit of its own, stays: %q", b)
	}

	// A restart without the binding: the sweep leaves it (it still has
	// its change), and removes it once it has none.
	if err := h.Close(); err != nil {
		t.Fatal(err)
	}
	c2, err := load()
	if err != nil {
		t.Fatal(err)
	}
	h2, err := daemontest.Start(c2, daemontest.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if w := left(h2)[0]; w.Path != dirty || !w.BindingRemoved {
		t.Fatalf("left after a restart: %+v", w)
	}
	if err := h2.Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(dirty, "notes.txt")); err != nil {
		t.Fatal(err)
	}
	h3 := daemontest.New(t, c2, daemontest.Options{})
	if got := h3.Worktrees(""); len(got) != 0 {
		t.Fatalf("worktrees after the startup sweep: %+v", got)
	}
	if _, err := os.Stat(dirty); err == nil {
		t.Fatal("the startup sweep left the removed binding's clean worktree")
	}
	if n := strings.Count(testkit.Git(t, repo, "worktree", "list"), "\n"); n != 1 {
		t.Fatalf("git worktree list after the sweep:\n%s", testkit.Git(t, repo, "worktree", "list"))
	}
}
