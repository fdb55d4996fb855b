package workspace

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/residentd/residentd/internal/session"
)

// Options wires a Manager.
type Options struct {
	// Root is the folder the worktrees are made under (Folder).
	Root    string
	Records Records
	Log     *zap.Logger
	// Timeout bounds each git command that changes a repository, and
	// StatusTimeout each git status (defaults DefaultTimeout and
	// DefaultStatusTimeout).
	Timeout, StatusTimeout time.Duration
	// Now is the clock; tests inject one.
	Now func() time.Time
}

// Manager makes, finds, resets and removes the keys' worktrees. Changes
// to one repository's worktrees and branches are made one at a time (git
// itself refuses a second writer of a repository's files while one holds
// them), and so are the changes to a key's record.
type Manager struct {
	root                   string
	rec                    Records
	log                    *zap.Logger
	timeout, statusTimeout time.Duration
	now                    func() time.Time

	mu    sync.Mutex             // guards repos
	repos map[string]*sync.Mutex // repository path -> the lock of its changes
}

// New returns a manager.
func New(o Options) *Manager {
	m := &Manager{root: o.Root, rec: o.Records, log: o.Log, timeout: o.Timeout, statusTimeout: o.StatusTimeout, now: o.Now, repos: map[string]*sync.Mutex{}}
	if m.log == nil {
		m.log = zap.NewNop()
	}
	if m.timeout <= 0 {
		m.timeout = DefaultTimeout
	}
	if m.statusTimeout <= 0 {
		m.statusTimeout = DefaultStatusTimeout
	}
	if m.now == nil {
		m.now = time.Now
	}
	return m
}

// Root is the folder the worktrees are made under.
func (m *Manager) Root() string { return m.root }

// lock takes repo's lock and returns its unlock.
func (m *Manager) lock(repo string) func() {
	repo = filepath.Clean(repo)
	m.mu.Lock()
	l := m.repos[repo]
	if l == nil {
		l = &sync.Mutex{}
		m.repos[repo] = l
	}
	m.mu.Unlock()
	l.Lock()
	return l.Unlock
}

// Lookup returns key k's record, false when it has none.
func (m *Manager) Lookup(k session.Key) (Record, bool, error) {
	r, ok, err := m.rec.Worktree(k)
	if err != nil {
		return Record{}, false, fmt.Errorf("workspace: worktree of %s: %w", k, err)
	}
	return r, ok, nil
}

// Ensure returns key k's worktree of repo: the one it has, made again at
// its folder (on its branch) when the folder is gone, or a new one at
// Folder(root, k) on Branch(k), made from repo's HEAD or, for a thread
// key, from its channel key's branch when that exists.
func (m *Manager) Ensure(ctx context.Context, k session.Key, repo string) (Record, error) {
	repo = filepath.Clean(repo)
	unlock := m.lock(repo)
	defer unlock()
	r, ok, err := m.Lookup(k)
	if err != nil {
		return Record{}, err
	}
	if ok {
		if r.Repo != repo {
			return Record{}, fmt.Errorf("workspace: key %s's worktree %s is of repository %s, and binding %q's dir is now %s: reset it (residentd fresh --reset-worktree) to make one of the new dir",
				k, r.Path, r.Repo, k.Binding, repo)
		}
		if isDir(r.Path) {
			return r, nil
		}
		m.log.Warn("a key's worktree folder is gone; making it again on its branch", zap.String("key", k.String()), zap.String("path", r.Path), zap.String("branch", r.Branch))
	} else {
		r = Record{Channel: k.Channel, Binding: k.Binding, Thread: k.Thread, Repo: repo, Path: Folder(m.root, k), Branch: Branch(k), Created: m.now().UTC()}
	}
	if err := m.add(ctx, &r); err != nil {
		return Record{}, fmt.Errorf("workspace: make key %s's worktree of %s at %s: %w", k, repo, r.Path, err)
	}
	if err := m.rec.PutWorktree(r); err != nil {
		return Record{}, fmt.Errorf("workspace: save key %s's worktree %s: %w", k, r.Path, err)
	}
	m.log.Info("worktree ready", zap.String("key", k.String()), zap.String("path", r.Path), zap.String("branch", r.Branch), zap.String("base", r.Base))
	return r, nil
}

// add makes r's worktree at r.Path on r.Branch: the branch as it is when
// it exists, else a new branch from the start point (see Ensure). A
// folder already there is taken when it is a worktree of r.Repo on
// r.Branch (a record lost, say), refused otherwise. Call with the
// repository's lock held.
func (m *Manager) add(ctx context.Context, r *Record) error {
	if _, err := os.Lstat(r.Path); err == nil {
		head, err := git(ctx, m.timeout, r.Path, "rev-parse", "--abbrev-ref", "HEAD")
		top, terr := git(ctx, m.timeout, r.Path, "rev-parse", "--show-toplevel")
		if err != nil || terr != nil || strings.TrimSpace(head) != r.Branch || !sameDir(strings.TrimSpace(top), r.Path) {
			return fmt.Errorf("the folder exists and is not a worktree on branch %s; move it away", r.Branch)
		}
	} else {
		if err := os.MkdirAll(filepath.Dir(r.Path), 0o700); err != nil {
			return err
		}
		// A worktree whose folder was removed by hand still holds its
		// branch in git's records until they are pruned.
		if _, err := git(ctx, m.timeout, r.Repo, "worktree", "prune"); err != nil {
			return err
		}
		args := []string{"worktree", "add", r.Path, r.Branch}
		if !branchExists(ctx, r.Repo, r.Branch) {
			start := "HEAD"
			if r.Thread != "" {
				if main := Branch(r.Key().Main()); branchExists(ctx, r.Repo, main) {
					start = "refs/heads/" + main
				}
			}
			args = []string{"worktree", "add", "-b", r.Branch, r.Path, start}
		}
		if _, err := git(ctx, m.timeout, r.Repo, args...); err != nil {
			return err
		}
	}
	base, err := git(ctx, m.timeout, r.Path, "rev-parse", "HEAD")
	if err != nil {
		return err
	}
	r.Base = strings.TrimSpace(base)
	return nil
}

// Opened records that native, a session key k just opened, was opened
// in k's worktree.
func (m *Manager) Opened(k session.Key, native string) error {
	r, ok, err := m.Lookup(k)
	if err != nil || !ok {
		return err
	}
	unlock := m.lock(r.Repo)
	defer unlock()
	if r, ok, err = m.Lookup(k); err != nil || !ok {
		return err
	}
	r.opened(native)
	if err := m.rec.PutWorktree(r); err != nil {
		return fmt.Errorf("workspace: note session %s in key %s's worktree %s: %w", native, k, r.Path, err)
	}
	return nil
}

// Status lists the uncommitted changes of r's worktree (Changes), within
// StatusTimeout.
func (m *Manager) Status(ctx context.Context, r Record) ([]string, error) {
	if !isDir(r.Path) {
		return nil, fmt.Errorf("workspace: key %s's worktree %s: the folder is gone", r.Key(), r.Path)
	}
	files, err := status(ctx, m.statusTimeout, r.Path)
	if err != nil {
		return nil, fmt.Errorf("workspace: status of key %s's worktree: %w", r.Key(), err)
	}
	return files, nil
}

// Dropped is what Reset or Remove did with a key's worktree.
type Dropped struct {
	Record
	// Removed: the worktree's folder was removed (false: it had none
	// left, or the key had no worktree).
	Removed bool
	// BranchKept names the branch that keeps the commits the worktree's
	// branch had that its repository's HEAD has not: the branch itself
	// (Remove), or a copy renamed <branch>.reset-<time> (Reset). Empty:
	// the branch was deleted, every commit of it being in HEAD.
	BranchKept string
}

// Reset removes key k's worktree so that its next session gets a new one,
// made from the repository's HEAD as it is then: the folder is removed
// (only when git status finds no uncommitted change: a ChangesError
// otherwise, and nothing is touched), the branch deleted when HEAD has
// all its commits and otherwise renamed <branch>.reset-<UTC time> (kept),
// the record forgotten. A key without a worktree: nothing to do.
func (m *Manager) Reset(ctx context.Context, k session.Key) (Dropped, error) {
	return m.drop(ctx, k, true)
}

// Remove removes key k's worktree as Reset does, but keeps a branch with
// commits of its own under its name (the binding is gone; its branch
// stays for people to merge): what a removed binding's keys get. With
// uncommitted changes it is left in place (ChangesError).
func (m *Manager) Remove(ctx context.Context, k session.Key) (Dropped, error) {
	return m.drop(ctx, k, false)
}

// CheckReset says whether Reset would refuse key k's worktree for its
// uncommitted changes (a ChangesError), without touching it: nil when it
// has none, or no worktree (or no folder) at all.
func (m *Manager) CheckReset(ctx context.Context, k session.Key) error {
	r, ok, err := m.Lookup(k)
	if err != nil || !ok || !isDir(r.Path) {
		return err
	}
	files, err := status(ctx, m.statusTimeout, r.Path)
	if err != nil {
		return fmt.Errorf("workspace: key %s's worktree %s: cannot tell whether it has uncommitted changes, so it stays: %w", k, r.Path, err)
	}
	if len(files) > 0 {
		return &ChangesError{Key: k, Path: r.Path, Files: files}
	}
	return nil
}

func (m *Manager) drop(ctx context.Context, k session.Key, rename bool) (Dropped, error) {
	r, ok, err := m.Lookup(k)
	if err != nil || !ok {
		return Dropped{}, err
	}
	unlock := m.lock(r.Repo)
	defer unlock()
	if r, ok, err = m.Lookup(k); err != nil || !ok {
		return Dropped{}, err
	}
	d := Dropped{Record: r}
	if isDir(r.Path) {
		files, err := status(ctx, m.statusTimeout, r.Path)
		if err != nil {
			return d, fmt.Errorf("workspace: key %s's worktree %s: cannot tell whether it has uncommitted changes, so it stays: %w", k, r.Path, err)
		}
		if len(files) > 0 {
			return d, &ChangesError{Key: k, Path: r.Path, Files: files}
		}
		// Without --force: git refuses a worktree with changes itself.
		if _, err := git(ctx, m.timeout, r.Repo, "worktree", "remove", r.Path); err != nil {
			return d, fmt.Errorf("workspace: remove key %s's worktree %s: %w", k, r.Path, err)
		}
		d.Removed = true
	}
	if _, err := git(ctx, m.timeout, r.Repo, "worktree", "prune"); err != nil {
		m.log.Warn("git worktree prune failed", zap.String("repo", r.Repo), zap.Error(err))
	}
	if d.BranchKept, err = m.dropBranch(ctx, r, rename); err != nil {
		return d, err
	}
	if err := m.rec.ForgetWorktree(k); err != nil {
		return d, fmt.Errorf("workspace: forget key %s's worktree %s: %w", k, r.Path, err)
	}
	m.log.Info("worktree removed", zap.String("key", k.String()), zap.String("path", r.Path), zap.Bool("folder_removed", d.Removed), zap.String("branch_kept", d.BranchKept))
	return d, nil
}

// dropBranch deletes r's branch when the repository's HEAD has every
// commit of it, and otherwise keeps it: renamed <branch>.reset-<time>
// when rename, as it is when not. It returns the branch kept.
func (m *Manager) dropBranch(ctx context.Context, r Record, rename bool) (string, error) {
	if !branchExists(ctx, r.Repo, r.Branch) {
		return "", nil
	}
	out, err := git(ctx, m.timeout, r.Repo, "rev-list", "--count", "HEAD..refs/heads/"+r.Branch)
	if err != nil {
		return r.Branch, fmt.Errorf("workspace: key %s's branch %s: %w", r.Key(), r.Branch, err)
	}
	if n, _ := strconv.Atoi(strings.TrimSpace(out)); n == 0 {
		if _, err := git(ctx, m.timeout, r.Repo, "branch", "-D", r.Branch); err != nil {
			return r.Branch, fmt.Errorf("workspace: delete key %s's branch: %w", r.Key(), err)
		}
		return "", nil
	}
	if !rename {
		return r.Branch, nil
	}
	kept := r.Branch + ".reset-" + m.now().UTC().Format("20060102T150405Z")
	if _, err := git(ctx, m.timeout, r.Repo, "branch", "-m", r.Branch, kept); err != nil {
		return r.Branch, fmt.Errorf("workspace: keep key %s's branch as %s: %w", r.Key(), kept, err)
	}
	return kept, nil
}

// Swept is what Sweep did with a record.
type Swept struct {
	Record
	// Gone: its folder was gone; the record was forgotten.
	Gone bool
	// Removed: its binding is gone and it had no changes: removed (see
	// Remove), BranchKept naming its branch if kept.
	Removed    bool
	BranchKept string
	// Err: it was left in place, and why (a ChangesError for a removed
	// binding's worktree with uncommitted changes).
	Err error
}

// Sweep tidies the records at startup: git worktree prune in every
// repository they name, the records whose folder is gone forgotten, and
// the worktrees of bindings that are no longer configured (configured
// says) removed as Remove does; one with uncommitted changes stays, and
// is reported. It returns what it did to each record it changed or left.
func (m *Manager) Sweep(ctx context.Context, configured func(binding string) bool) ([]Swept, error) {
	recs, err := m.rec.Worktrees()
	if err != nil {
		return nil, fmt.Errorf("workspace: sweep: %w", err)
	}
	pruned := map[string]bool{}
	var out []Swept
	for _, r := range recs {
		if !pruned[r.Repo] {
			pruned[r.Repo] = true
			unlock := m.lock(r.Repo)
			if _, err := git(ctx, m.timeout, r.Repo, "worktree", "prune"); err != nil {
				m.log.Warn("git worktree prune failed", zap.String("repo", r.Repo), zap.Error(err))
			}
			unlock()
		}
		switch {
		case !isDir(r.Path):
			if err := m.rec.ForgetWorktree(r.Key()); err != nil {
				return out, fmt.Errorf("workspace: forget key %s's worktree %s: %w", r.Key(), r.Path, err)
			}
			out = append(out, Swept{Record: r, Gone: true})
		case !configured(r.Binding):
			d, err := m.Remove(ctx, r.Key())
			out = append(out, Swept{Record: r, Removed: err == nil, BranchKept: d.BranchKept, Err: err})
		}
	}
	return out, nil
}

// isDir reports whether path is a folder.
func isDir(path string) bool {
	st, err := os.Stat(path)
	return err == nil && st.IsDir()
}

// Changes reports whether err says a worktree has uncommitted changes,
// and lists them.
func Changes(err error) ([]string, bool) {
	var ce *ChangesError
	if errors.As(err, &ce) {
		return ce.Files, true
	}
	return nil, false
}
