package workspace

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/residentd/residentd/internal/child"
	"github.com/residentd/residentd/internal/session"
	"github.com/residentd/residentd/internal/testkit"
)

func TestMain(m *testing.M) { testkit.Main(m) }

// memRecords keeps records in memory, as the store does in its file.
type memRecords struct {
	mu sync.Mutex
	m  map[session.Key]Record
}

func newMem() *memRecords { return &memRecords{m: map[session.Key]Record{}} }

func (s *memRecords) Worktree(k session.Key) (Record, bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r, ok := s.m[k]
	r.Sessions = slices.Clone(r.Sessions)
	return r, ok, nil
}

func (s *memRecords) PutWorktree(r Record) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	r.Sessions = slices.Clone(r.Sessions)
	s.m[r.Key()] = r
	return nil
}

func (s *memRecords) ForgetWorktree(k session.Key) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.m, k)
	return nil
}

func (s *memRecords) Worktrees() ([]Record, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []Record
	for _, r := range s.m {
		out = append(out, r)
	}
	return out, nil
}

// run runs git in dir for the test, bounded, as a person would, and
// returns its output.
func run(t *testing.T, dir string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "git", append([]string{"-C", dir, "-c", "init.defaultBranch=main"}, args...)...)
	cmd.Env = append(gitEnv(), "GIT_AUTHOR_NAME=Ann", "GIT_AUTHOR_EMAIL=ann@example.com", "GIT_COMMITTER_NAME=Ann", "GIT_COMMITTER_EMAIL=ann@example.com")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("git %v in %s: %v\n%s", args, dir, err, out)
	}
	return string(out)
}

// newRepo is a git repository with one commit (README).
func newRepo(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "repo")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	run(t, dir, "init", "-q")
	write(t, filepath.Join(dir, "README"), "hello\n")
	run(t, dir, "add", "README")
	run(t, dir, "commit", "-q", "-m", "first")
	return dir
}

func write(t *testing.T, path, body string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
}

func newManager(t *testing.T) (*Manager, *memRecords) {
	t.Helper()
	rec := newMem()
	return New(Options{Root: filepath.Join(t.TempDir(), "worktrees"), Records: rec}), rec
}

var ctx = context.Background()

// TestNames: every key's branch is a valid branch name, and no two keys,
// however their ids are spelled, share a branch or a folder.
func TestNames(t *testing.T) {
	ids := []string{"ch", "ch.x", ".", "..", "a.lock", "@", "a@{1}", "a/b", "a+b", "a%2Fb", "a b", "ü", "A", "%41", "a_b", "-x", "x~1^2:?*[\\",
		strings.Repeat("long", 40), strings.Repeat("long", 40) + "!", strings.Repeat("é", 60)}
	branches, folders := map[string]session.Key{}, map[string]session.Key{}
	for _, b := range []string{"b-claude", "b.x"} {
		for _, ch := range ids {
			for _, th := range []string{"", "m1", "a+b", "ch"} {
				k := session.Key{Channel: ch, Binding: b, Thread: th}
				br, f := Branch(k), Folder("/w", k)
				if prev, dup := branches[br]; dup {
					t.Fatalf("keys %v and %v share branch %q", prev, k, br)
				}
				if prev, dup := folders[f]; dup {
					t.Fatalf("keys %v and %v share folder %q", prev, k, f)
				}
				branches[br], folders[f] = k, k
				if rel, err := filepath.Rel("/w", f); err != nil || strings.Count(rel, "/") != 1 || strings.Contains(rel, "..") {
					t.Fatalf("folder %q of %v is not two names under the root", f, k)
				}
				for _, name := range strings.Split(br, "/") {
					if len(name) > 120 {
						t.Fatalf("branch %q of %v has a name of %d bytes", br, k, len(name))
					}
				}
			}
		}
	}
	// One git call for them all: check-ref-format takes one name a call,
	// so a for loop in sh.
	var script strings.Builder
	for br := range branches {
		fmt.Fprintf(&script, "git check-ref-format --branch '%s' >/dev/null || echo 'refused: %s'\n", br, br)
	}
	sctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	out, err := exec.CommandContext(sctx, "sh", "-c", script.String()).CombinedOutput()
	if err != nil || len(out) > 0 {
		t.Fatalf("git check-ref-format: %v\n%s", err, out)
	}
	if got := Branch(session.Key{Channel: "ch-backend", Binding: "b-claude", Thread: "m020"}); got != "residentd/b-claude/ch-backend+m020" {
		t.Fatalf("thread branch %q", got)
	}
	if got := Folder("/s/worktrees", session.Key{Channel: "team.web", Binding: "b-claude"}); got != "/s/worktrees/b-claude/team%2Eweb" {
		t.Fatalf("folder %q", got)
	}
}

// TestCheckRepo: a dir gives worktrees only when it is the top of a git
// working tree with a commit; the error says what to do.
func TestCheckRepo(t *testing.T) {
	repo := newRepo(t)
	if err := CheckRepo(repo); err != nil {
		t.Fatalf("a repository with a commit: %v", err)
	}
	sub := filepath.Join(repo, "sub")
	if err := os.Mkdir(sub, 0o700); err != nil {
		t.Fatal(err)
	}
	empty := filepath.Join(t.TempDir(), "empty")
	if err := os.Mkdir(empty, 0o700); err != nil {
		t.Fatal(err)
	}
	run(t, empty, "init", "-q")
	for _, tc := range []struct{ dir, want string }{
		{t.TempDir(), "run git init there"},
		{sub, "not its top; set dir to"},
		{empty, "has no commit yet"},
		{"relative/dir", "must be an absolute path"},
	} {
		err := CheckRepo(tc.dir)
		if !errors.Is(err, ErrNotRepository) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("CheckRepo(%s) = %v, want ErrNotRepository saying %q", tc.dir, err, tc.want)
		}
	}
}

// TestEnsureGivesEachKeyItsOwnWorktree: two keys of one repository get two
// worktrees on two branches; a change in one is not in the other's status
// nor in the repository's; a key asked again gets the same worktree; a
// thread key's branch starts at its channel key's branch head.
func TestEnsureGivesEachKeyItsOwnWorktree(t *testing.T) {
	repo := newRepo(t)
	m, _ := newManager(t)
	a, b := session.Key{Channel: "ch-a", Binding: "b-claude"}, session.Key{Channel: "ch-b", Binding: "b-claude"}
	ra, err := m.Ensure(ctx, a, repo)
	if err != nil {
		t.Fatal(err)
	}
	rb, err := m.Ensure(ctx, b, repo)
	if err != nil {
		t.Fatal(err)
	}
	if ra.Path == rb.Path || ra.Branch == rb.Branch || ra.Path != Folder(m.Root(), a) || ra.Branch != Branch(a) {
		t.Fatalf("records %+v and %+v", ra, rb)
	}
	head := strings.TrimSpace(run(t, repo, "rev-parse", "HEAD"))
	if ra.Base != head || rb.Base != head {
		t.Fatalf("bases %s %s, want HEAD %s", ra.Base, rb.Base, head)
	}
	list := run(t, repo, "worktree", "list", "--porcelain")
	for _, r := range []Record{ra, rb} {
		if !strings.Contains(list, "worktree "+r.Path+"\n") || !strings.Contains(list, "branch refs/heads/"+r.Branch+"\n") {
			t.Fatalf("git worktree list does not show %s on %s:\n%s", r.Path, r.Branch, list)
		}
	}
	write(t, filepath.Join(ra.Path, "README"), "changed by a\n")
	if files, err := m.Status(ctx, ra); err != nil || !slices.Equal(files, []string{" M README"}) {
		t.Fatalf("status of a: %q, %v", files, err)
	}
	if files, err := m.Status(ctx, rb); err != nil || len(files) != 0 {
		t.Fatalf("status of b: %q, %v; a's change leaked", files, err)
	}
	if st := run(t, repo, "status", "--porcelain"); st != "" {
		t.Fatalf("the repository's own status: %q", st)
	}
	again, err := m.Ensure(ctx, a, repo)
	if err != nil || again.Path != ra.Path || again.Base != ra.Base {
		t.Fatalf("Ensure again: %+v, %v; want %+v", again, err, ra)
	}

	// The channel key commits; its thread's worktree starts there.
	run(t, ra.Path, "commit", "-q", "-am", "a's work")
	aHead := strings.TrimSpace(run(t, ra.Path, "rev-parse", "HEAD"))
	th := session.Key{Channel: "ch-a", Binding: "b-claude", Thread: "m7"}
	rt, err := m.Ensure(ctx, th, repo)
	if err != nil {
		t.Fatal(err)
	}
	if rt.Base != aHead || rt.Branch != "residentd/b-claude/ch-a+m7" {
		t.Fatalf("thread worktree %+v, want base %s (its channel's head)", rt, aHead)
	}
	// A thread whose channel has no branch yet starts at HEAD.
	rt2, err := m.Ensure(ctx, session.Key{Channel: "ch-c", Binding: "b-claude", Thread: "m8"}, repo)
	if err != nil || rt2.Base != head {
		t.Fatalf("thread of a channel without a worktree: %+v, %v; want base %s", rt2, err, head)
	}
	// Another repository for a key that has a worktree: refused.
	if _, err := m.Ensure(ctx, a, newRepo(t)); err == nil || !strings.Contains(err.Error(), "--reset-worktree") {
		t.Fatalf("Ensure in another repository: %v", err)
	}
}

// TestEnsureIsSerializedPerRepository: keys that start at once all get
// their worktree, made one at a time: a post-checkout hook that notes
// when another checkout of the repository runs beside it never does.
func TestEnsureIsSerializedPerRepository(t *testing.T) {
	repo := newRepo(t)
	m, rec := newManager(t)
	dir := t.TempDir()
	busy, overlaps := filepath.Join(dir, "busy"), filepath.Join(dir, "overlaps")
	hook := filepath.Join(repo, ".git", "hooks", "post-checkout")
	write(t, hook, "#!/bin/sh\nif ! mkdir "+busy+" 2>/dev/null; then echo overlap >> "+overlaps+"; exit 0; fi\nsleep 0.1\nrmdir "+busy+"\n")
	if err := os.Chmod(hook, 0o700); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for i := range 8 {
		wg.Go(func() {
			_, err := m.Ensure(ctx, session.Key{Channel: "ch-" + strconv.Itoa(i), Binding: "b"}, repo)
			errs <- err
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
	recs, _ := rec.Worktrees()
	if n := strings.Count(run(t, repo, "worktree", "list"), "\n"); len(recs) != 8 || n != 9 {
		t.Fatalf("%d records, %d worktrees listed; want 8 and 9 (the repository's own)", len(recs), n)
	}
	if b, err := os.ReadFile(overlaps); err == nil {
		t.Fatalf("checkouts of one repository ran at once: %q", b)
	}
}

// TestEnsureRemakesAFolderRemovedByHand: a worktree folder removed by hand
// is made again at its path on its branch, with the branch's commits.
func TestEnsureRemakesAFolderRemovedByHand(t *testing.T) {
	repo := newRepo(t)
	m, _ := newManager(t)
	k := session.Key{Channel: "ch", Binding: "b"}
	r, err := m.Ensure(ctx, k, repo)
	if err != nil {
		t.Fatal(err)
	}
	write(t, filepath.Join(r.Path, "work.txt"), "committed\n")
	run(t, r.Path, "add", "work.txt")
	run(t, r.Path, "commit", "-q", "-m", "work")
	if err := os.RemoveAll(r.Path); err != nil {
		t.Fatal(err)
	}
	again, err := m.Ensure(ctx, k, repo)
	if err != nil {
		t.Fatal(err)
	}
	if again.Path != r.Path || again.Branch != r.Branch {
		t.Fatalf("made again as %+v, want %s on %s", again, r.Path, r.Branch)
	}
	if b, err := os.ReadFile(filepath.Join(again.Path, "work.txt")); err != nil || string(b) != "committed\n" {
		t.Fatalf("the branch's commit is not in the worktree made again: %q, %v", b, err)
	}
}

// TestResetNeverDiscardsChanges: a reset of a worktree with uncommitted
// changes is refused with the files and touches nothing; once they are
// committed the reset removes the folder, keeps the branch with its
// commits under another name, and the key's next worktree starts from
// HEAD again.
func TestResetNeverDiscardsChanges(t *testing.T) {
	repo := newRepo(t)
	m, _ := newManager(t)
	m.now = func() time.Time { return time.Date(2026, 12, 1, 9, 30, 0, 0, time.UTC) }
	k := session.Key{Channel: "ch", Binding: "b"}
	r, err := m.Ensure(ctx, k, repo)
	if err != nil {
		t.Fatal(err)
	}
	write(t, filepath.Join(r.Path, "README"), "half-written\n")
	write(t, filepath.Join(r.Path, "new.go"), "package x\n")
	if err := m.CheckReset(ctx, k); !errors.Is(err, ErrUncommitted) {
		t.Fatalf("CheckReset with changes: %v", err)
	}
	_, err = m.Reset(ctx, k)
	files, ok := Changes(err)
	if !ok || !errors.Is(err, ErrUncommitted) || !slices.Equal(files, []string{" M README", "?? new.go"}) {
		t.Fatalf("Reset with changes: %v (files %q)", err, files)
	}
	if !strings.Contains(err.Error(), r.Path) || !strings.Contains(err.Error(), "README") {
		t.Fatalf("the refusal does not name the worktree and its files: %v", err)
	}
	if b, _ := os.ReadFile(filepath.Join(r.Path, "README")); string(b) != "half-written\n" {
		t.Fatalf("the refused reset touched the change: %q", b)
	}
	if _, ok, _ := m.Lookup(k); !ok {
		t.Fatal("the refused reset forgot the record")
	}

	run(t, r.Path, "add", "-A")
	run(t, r.Path, "commit", "-q", "-m", "b's work")
	if err := m.CheckReset(ctx, k); err != nil {
		t.Fatalf("CheckReset once committed: %v", err)
	}
	d, err := m.Reset(ctx, k)
	if err != nil {
		t.Fatal(err)
	}
	if !d.Removed || d.BranchKept != r.Branch+".reset-20261201T093000Z" {
		t.Fatalf("reset: %+v", d)
	}
	if _, err := os.Stat(r.Path); err == nil {
		t.Fatal("the worktree folder is still there")
	}
	if log := run(t, repo, "log", "--format=%s", d.BranchKept); !strings.Contains(log, "b's work") {
		t.Fatalf("the kept branch lost the commit: %q", log)
	}
	if _, ok, _ := m.Lookup(k); ok {
		t.Fatal("the record outlived the reset")
	}
	fresh, err := m.Ensure(ctx, k, repo)
	if err != nil {
		t.Fatal(err)
	}
	if head := strings.TrimSpace(run(t, repo, "rev-parse", "HEAD")); fresh.Base != head || fresh.Path != r.Path {
		t.Fatalf("the key's next worktree %+v, want it at %s from HEAD %s", fresh, r.Path, head)
	}
	// Nothing of its own: the branch is deleted, not kept.
	d, err = m.Reset(ctx, k)
	if err != nil || !d.Removed || d.BranchKept != "" {
		t.Fatalf("reset of a clean worktree with no commit of its own: %+v, %v", d, err)
	}
	if out := run(t, repo, "branch", "--list", r.Branch); out != "" {
		t.Fatalf("its branch is still there: %q", out)
	}
	// A key without a worktree: nothing to do.
	if d, err := m.Reset(ctx, session.Key{Channel: "other", Binding: "b"}); err != nil || d.Removed {
		t.Fatalf("reset of a key without a worktree: %+v, %v", d, err)
	}
}

// TestSweep: at startup the records whose folder is gone are forgotten,
// and a removed binding's worktrees are removed when clean and left, and
// reported, when they have changes.
func TestSweep(t *testing.T) {
	repo := newRepo(t)
	m, rec := newManager(t)
	keep := session.Key{Channel: "ch-keep", Binding: "b-kept"}
	gone := session.Key{Channel: "ch-gone", Binding: "b-kept"}
	clean := session.Key{Channel: "ch-clean", Binding: "b-removed"}
	dirty := session.Key{Channel: "ch-dirty", Binding: "b-removed"}
	recs := map[session.Key]Record{}
	for _, k := range []session.Key{keep, gone, clean, dirty} {
		r, err := m.Ensure(ctx, k, repo)
		if err != nil {
			t.Fatal(err)
		}
		recs[k] = r
	}
	write(t, filepath.Join(recs[dirty].Path, "notes.txt"), "uncommitted\n")
	if err := os.RemoveAll(recs[gone].Path); err != nil {
		t.Fatal(err)
	}
	swept, err := m.Sweep(ctx, func(b string) bool { return b == "b-kept" })
	if err != nil {
		t.Fatal(err)
	}
	got := map[session.Key]Swept{}
	for _, s := range swept {
		got[s.Key()] = s
	}
	if len(got) != 3 || !got[gone].Gone || !got[clean].Removed || got[dirty].Removed || !errors.Is(got[dirty].Err, ErrUncommitted) {
		t.Fatalf("swept %+v", swept)
	}
	if _, ok := got[keep]; ok {
		t.Fatal("a configured binding's worktree was swept")
	}
	left, _ := rec.Worktrees()
	var names []string
	for _, r := range left {
		names = append(names, r.Channel)
	}
	slices.Sort(names)
	if !slices.Equal(names, []string{"ch-dirty", "ch-keep"}) {
		t.Fatalf("records left: %v", names)
	}
	if b, err := os.ReadFile(filepath.Join(recs[dirty].Path, "notes.txt")); err != nil || string(b) != "uncommitted\n" {
		t.Fatalf("the removed binding's uncommitted change: %q, %v", b, err)
	}
	list := run(t, repo, "worktree", "list")
	if strings.Contains(list, recs[gone].Path) || strings.Contains(list, recs[clean].Path) || !strings.Contains(list, recs[dirty].Path) {
		t.Fatalf("git worktree list after the sweep:\n%s", list)
	}
}

// TestOpenedSessions: the sessions a key opened in its worktree are kept,
// newest last, at most MaxSessions.
func TestOpenedSessions(t *testing.T) {
	repo := newRepo(t)
	m, _ := newManager(t)
	k := session.Key{Channel: "ch", Binding: "b"}
	if err := m.Opened(k, "nat-0"); err != nil {
		t.Fatal(err) // no worktree yet: nothing to note
	}
	if _, err := m.Ensure(ctx, k, repo); err != nil {
		t.Fatal(err)
	}
	for i := range MaxSessions + 3 {
		if err := m.Opened(k, "nat-"+strconv.Itoa(i)); err != nil {
			t.Fatal(err)
		}
	}
	if err := m.Opened(k, "nat-5"); err != nil {
		t.Fatal(err)
	}
	r, _, _ := m.Lookup(k)
	if len(r.Sessions) != MaxSessions || r.Sessions[len(r.Sessions)-1] != "nat-5" || r.OpenedIn("nat-0") || !r.OpenedIn("nat-18") || r.OpenedIn("") {
		t.Fatalf("sessions %v", r.Sessions)
	}
}

// TestGitIsBounded: a git command that does not end within its bound
// (a post-checkout hook that hangs) fails naming the bound, and what it
// started is killed with it.
func TestGitIsBounded(t *testing.T) {
	repo := newRepo(t)
	pidFile := filepath.Join(t.TempDir(), "hook.pid")
	hook := filepath.Join(repo, ".git", "hooks", "post-checkout")
	write(t, hook, "#!/bin/sh\necho $$ > "+pidFile+"\nexec sleep 300\n")
	if err := os.Chmod(hook, 0o700); err != nil {
		t.Fatal(err)
	}
	m := New(Options{Root: filepath.Join(t.TempDir(), "w"), Records: newMem(), Timeout: 500 * time.Millisecond})
	_, err := m.Ensure(ctx, session.Key{Channel: "ch", Binding: "b"}, repo)
	if err == nil || !strings.Contains(err.Error(), "no answer within 500ms") {
		t.Fatalf("Ensure with a hanging hook: %v", err)
	}
	b, rerr := os.ReadFile(pidFile)
	if rerr != nil {
		t.Fatalf("the hook never ran: %v", rerr)
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	testkit.WaitFor(t, 10*time.Second, func() bool {
		st, err := child.Read(pid)
		return syscall.Kill(pid, 0) != nil || err == nil && st.Zombie()
	}, testkit.Waiting("the hook's process %d to be killed", pid))
}
