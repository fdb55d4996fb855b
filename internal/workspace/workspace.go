// Package workspace gives each key of a binding with workspace "worktree"
// a git worktree of its own: a folder of its own (Folder) on a branch of
// its own (Branch), made from the binding's dir (a repository) on the
// key's first session and kept across the key's life, so two channels
// that ask one coding agent to change code at once work in two working
// trees instead of one. It runs git (bounded in time, one repository's
// changes one at a time), keeps a Record per key in the store (Records),
// says whether a worktree has uncommitted changes (Status), and resets or
// removes one only when it has none (ChangesError otherwise). It knows
// nothing of agents: the keeper (internal/resident) asks it for a key's
// working directory.
package workspace

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/residentd/residentd/internal/session"
)

// A binding's workspace modes.
const (
	// Shared: every key's sessions work in the binding's dir (the default).
	Shared = "shared"
	// Worktree: each key's sessions work in the key's own git worktree of
	// the binding's dir.
	Worktree = "worktree"
)

// MaxSessions bounds the native session ids a record keeps: the sessions
// a key opened in its worktree, newest last. A key's saved session is its
// newest, so a short list covers it.
const MaxSessions = 16

// Errors.
var (
	// ErrNotRepository: a binding's dir is not the top of a git working
	// tree with a commit.
	ErrNotRepository = errors.New("not a git repository with a commit")
	// ErrUncommitted: the worktree has changes git has not committed
	// (modified, added, deleted or untracked files); see ChangesError.
	ErrUncommitted = errors.New("the worktree has uncommitted changes")
	// ErrUnavailable: a key's worktree could not be made or found, so its
	// session cannot open where it works.
	ErrUnavailable = errors.New("the key's worktree is unavailable")
)

// Record is what the store keeps of one key's worktree.
type Record struct {
	Channel string `json:"channel_id"`
	Binding string `json:"binding_id"`
	Thread  string `json:"thread_root_id,omitempty"`
	// Repo is the repository it is a worktree of: the binding's dir when it
	// was made.
	Repo string `json:"repo"`
	// Path is its folder: the cwd of every session the key opens in it.
	Path string `json:"path"`
	// Branch is its branch (refs/heads/<Branch>).
	Branch string `json:"branch"`
	// Base is the commit it was made at.
	Base    string    `json:"base"`
	Created time.Time `json:"created_at"`
	// Sessions are the native sessions the key opened in it (session/new,
	// session/fork), newest last: a restore reopens one of them with Path
	// as its cwd, and any other (a session opened before the key had a
	// worktree) with the binding's dir, as it was opened.
	Sessions []string `json:"sessions,omitempty"`
}

// Key is the record's key.
func (r Record) Key() session.Key {
	return session.Key{Channel: r.Channel, Binding: r.Binding, Thread: r.Thread}
}

// OpenedIn reports whether native was opened in the worktree.
func (r Record) OpenedIn(native string) bool {
	return native != "" && slices.Contains(r.Sessions, native)
}

// opened adds native to the sessions opened in the worktree.
func (r *Record) opened(native string) {
	r.Sessions = slices.DeleteFunc(r.Sessions, func(s string) bool { return s == native })
	r.Sessions = append(r.Sessions, native)
	if n := len(r.Sessions); n > MaxSessions {
		r.Sessions = r.Sessions[n-MaxSessions:]
	}
}

// Records keeps the records (*store.Store).
type Records interface {
	// Worktree returns key k's record, false when it has none.
	Worktree(k session.Key) (Record, bool, error)
	PutWorktree(r Record) error
	ForgetWorktree(k session.Key) error
	// Worktrees returns every record.
	Worktrees() ([]Record, error)
}

// ChangesError is ErrUncommitted with the changes: what `git status
// --porcelain` lists (two status letters, a space, the path).
type ChangesError struct {
	Key   session.Key
	Path  string
	Files []string
}

func (e *ChangesError) Error() string {
	const show = 10
	files := e.Files
	more := ""
	if len(files) > show {
		files, more = files[:show], fmt.Sprintf(" and %d more", len(e.Files)-show)
	}
	return fmt.Sprintf("%s: %d in key %s's worktree %s (%s%s); commit, stash or discard them there first (git -C %s status)",
		ErrUncommitted, len(e.Files), e.Key, e.Path, strings.Join(files, ", "), more, e.Path)
}

func (e *ChangesError) Unwrap() error { return ErrUncommitted }
