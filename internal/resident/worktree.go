package resident

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"

	"go.uber.org/zap"

	"github.com/residentd/residentd/apitype"
	"github.com/residentd/residentd/internal/acp"
	"github.com/residentd/residentd/internal/config"
	"github.com/residentd/residentd/internal/delivery"
	"github.com/residentd/residentd/internal/session"
	"github.com/residentd/residentd/internal/workspace"
)

// A key's sessions work where its binding's workspace says: in the
// binding's dir (shared), or in the key's own git worktree of it
// (internal/workspace). A session's cwd is fixed when it opens
// (session/new, session/fork): a worktree binding's new sessions open in
// the key's worktree (made then if need be), and the worktree's record
// notes each one. A saved session is reopened (session/resume,
// session/load) in the cwd it opened with: the key's worktree when the
// record names it, the binding's dir otherwise (a session opened before
// the binding had worktrees). The process itself runs in the binding's
// dir, as a spare does; only its sessions' cwd differs.

// openWorkspaces makes the keeper's worktree manager, and tidies the
// records an earlier daemon left: see sweepWorktrees.
func (kp *Keeper) openWorkspaces(cfg *config.Config) {
	kp.ws = workspace.New(workspace.Options{Root: cfg.WorktreeRoot(), Records: kp.st, Log: kp.log.Named("workspace"), Now: kp.now})
	kp.sweepWorktrees(cfg)
}

// sweepWorktrees runs at startup, before any agent: git worktree prune in
// the repositories the records name; a record whose folder is gone is
// forgotten, and so is its key's saved session if it was opened there
// (its next turn starts a new session, with the conversation replayed, in
// a worktree made again on its branch), for a session is never reopened
// in another cwd than it opened with; a worktree of a binding no longer
// configured is removed when it has no uncommitted change, and left (and
// logged) when it has.
func (kp *Keeper) sweepWorktrees(cfg *config.Config) {
	swept, err := kp.ws.Sweep(kp.ctx, func(id string) bool { _, ok := cfg.Binding(id); return ok })
	if err != nil {
		kp.log.Warn("startup sweep of the keys' worktrees failed", zap.Error(err))
	}
	for _, s := range swept {
		k := s.Key()
		log := kp.log.With(zap.String("key", k.String()), zap.String("path", s.Path), zap.String("branch", s.Branch))
		switch {
		case s.Gone:
			native, err := kp.st.NativeID(k)
			dropped := err == nil && s.OpenedIn(native)
			if dropped {
				if err := kp.st.SetNativeID(k, ""); err != nil {
					log.Warn("the key's saved session, opened in a worktree that is gone, could not be dropped", zap.Error(err))
				}
			}
			log.Warn("startup sweep: a key's worktree folder is gone; its record is pruned", zap.Bool("saved_session_dropped", dropped))
		case s.Removed:
			log.Info("startup sweep: removed the worktree of a binding no longer configured", zap.String("branch_kept", s.BranchKept))
		default:
			kp.reportLeft(log, s.Err)
		}
	}
}

// reportLeft logs a worktree of a removed binding that was left in place,
// and why.
func (kp *Keeper) reportLeft(log *zap.Logger, err error) {
	if files, ok := workspace.Changes(err); ok {
		log.Warn("the worktree of a binding no longer configured has uncommitted changes: left in place (see residentd status); commit or discard them, then remove it with git worktree remove",
			zap.Int("changes", len(files)), zap.Strings("files", files))
		return
	}
	log.Warn("the worktree of a binding no longer configured was left in place", zap.Error(err))
}

// unavailable wraps a workspace error for a turn: it is the key's, not
// its agent's, and counts in no crash loop.
func unavailable(k session.Key, err error) error {
	return fmt.Errorf("%w: key %s: %w", workspace.ErrUnavailable, k, err)
}

// reopenIn sets the cwd a's next request reopens key k's saved session
// native with: the key's worktree when native was opened in it (made
// again at its folder if that is gone), else the binding's dir. It
// returns the worktree, nil for the binding's dir.
func (kp *Keeper) reopenIn(ctx context.Context, a *acp.Agent, k session.Key, native string) (*workspace.Record, error) {
	r, ok, err := kp.ws.Lookup(k)
	if err != nil {
		return nil, unavailable(k, err)
	}
	if !ok || !r.OpenedIn(native) {
		return nil, setCwd(a, k, a.Dir())
	}
	if r, err = kp.ws.Ensure(ctx, k, r.Repo); err != nil {
		return nil, unavailable(k, err)
	}
	return &r, setCwd(a, k, r.Path)
}

// newIn sets the cwd of a's next new session (session/new, session/fork)
// for key k: the key's worktree for a worktree binding (made now when it
// has none), else the binding's dir. It returns the worktree, nil for the
// binding's dir.
func (kp *Keeper) newIn(ctx context.Context, a *acp.Agent, k session.Key, b config.Binding) (*workspace.Record, error) {
	if !b.WorktreeOn() {
		return nil, setCwd(a, k, a.Dir())
	}
	r, err := kp.ws.Ensure(ctx, k, b.Dir)
	if err != nil {
		return nil, unavailable(k, err)
	}
	return &r, setCwd(a, k, r.Path)
}

func setCwd(a *acp.Agent, k session.Key, dir string) error {
	if err := a.SetCwd(dir); err != nil {
		return unavailable(k, err)
	}
	return nil
}

// openedIn notes that s's session opened in worktree r (nil: the binding's
// dir, nothing to note): a later process reopens it there. Without the
// note it would reopen it in the binding's dir, so a failure fails the
// spawn.
func (kp *Keeper) openedIn(s *Process, r *workspace.Record) error {
	if r == nil {
		return nil
	}
	if err := kp.ws.Opened(s.key, s.native); err != nil {
		return unavailable(s.key, err)
	}
	s.wt.Store(r)
	return nil
}

// worktreeFact is the worktree s's session works in, as the channel facts
// name it; nil when it works in the binding's dir.
func (s *Process) worktreeFact() *delivery.Worktree {
	if r := s.wt.Load(); r != nil {
		return &delivery.Worktree{Path: r.Path, Branch: r.Branch}
	}
	return nil
}

// describeWorktree puts the worktree s's session works in, with its
// changes, in a sessions listing's row.
func (kp *Keeper) describeWorktree(ses *apitype.Session, s *Process) {
	if r := s.wt.Load(); r != nil {
		w := kp.worktreeRow(context.Background(), *r, true)
		ses.Worktree = &w
	}
}

// worktreeRow is r as the API lists it, with what git status says of it
// (bounded: StatusError when it did not answer).
func (kp *Keeper) worktreeRow(ctx context.Context, r workspace.Record, configured bool) apitype.Worktree {
	w := apitype.Worktree{Channel: r.Channel, Binding: r.Binding, ThreadRoot: r.Thread, Path: r.Path, Branch: r.Branch,
		Repository: r.Repo, Base: r.Base, Created: r.Created, BindingRemoved: !configured}
	files, err := kp.ws.Status(ctx, r)
	if err != nil {
		w.StatusError = err.Error()
		return w
	}
	w.Changes = len(files)
	if len(files) > apitype.MaxWorktreeFiles {
		files = files[:apitype.MaxWorktreeFiles]
	}
	w.Changed = files
	return w
}

// Worktrees lists every key's worktree (of channel ch only, when not ""),
// by key, each with its uncommitted changes: git status runs for all of
// them at once, each bounded.
func (kp *Keeper) Worktrees(ch string) []apitype.Worktree {
	recs, err := kp.st.Worktrees()
	if err != nil {
		kp.log.Warn("list the keys' worktrees", zap.Error(err))
		return []apitype.Worktree{}
	}
	recs = slices.DeleteFunc(recs, func(r workspace.Record) bool { return ch != "" && r.Channel != ch })
	out := make([]apitype.Worktree, len(recs))
	cfg := kp.conf()
	var wg sync.WaitGroup
	slots := make(chan struct{}, maxStatuses)
	for i, r := range recs {
		wg.Go(func() {
			slots <- struct{}{}
			defer func() { <-slots }()
			_, ok := cfg.Binding(r.Binding)
			out[i] = kp.worktreeRow(context.Background(), r, ok)
		})
	}
	wg.Wait()
	return out
}

// maxStatuses bounds the git status commands one listing runs at once.
const maxStatuses = 8

// CheckWorktreeReset refuses a reset of key k's worktree while it has
// uncommitted changes (workspace.ErrUncommitted, listing them); nil when
// it has none, or no worktree.
func (kp *Keeper) CheckWorktreeReset(k session.Key) error {
	err := kp.ws.CheckReset(context.Background(), k)
	if err != nil && !errors.Is(err, workspace.ErrUncommitted) {
		return unavailable(k, err)
	}
	return err
}

// ResetWorktree resets key k's worktree (see workspace.Manager.Reset):
// refused with the changes (workspace.ErrUncommitted) when it has any.
// Call it with no process on the key.
func (kp *Keeper) ResetWorktree(ctx context.Context, k session.Key) (*apitype.WorktreeReset, error) {
	d, err := kp.ws.Reset(ctx, k)
	if err != nil {
		if errors.Is(err, workspace.ErrUncommitted) {
			return nil, err
		}
		return nil, unavailable(k, err)
	}
	if d.Path == "" {
		return nil, nil // the key had none
	}
	return &apitype.WorktreeReset{Path: d.Path, Branch: d.Branch, Removed: d.Removed, BranchKept: d.BranchKept}, nil
}

// retireWorktrees removes the worktrees of the bindings c no longer has
// (a reload removed them) whose keys have no process now; a key whose
// process is still stopping has its worktree removed at the process's
// exit (retireWorktree). Off the reload's path: git may take a while.
func (kp *Keeper) retireWorktrees(c *config.Config) {
	recs, err := kp.st.Worktrees()
	if err != nil {
		kp.log.Warn("list the keys' worktrees", zap.Error(err))
		return
	}
	var gone []session.Key
	for _, r := range recs {
		if _, ok := c.Binding(r.Binding); !ok {
			gone = append(gone, r.Key())
		}
	}
	if len(gone) == 0 {
		return
	}
	kp.goBg(func(ctx context.Context) {
		for _, k := range gone {
			kp.retireWorktree(ctx, k)
		}
	})
}

// retireWorktree removes key k's worktree if k's binding is no longer
// configured and no process of k lives: removed without uncommitted
// changes, left (and logged; the listing marks it binding_removed) with.
func (kp *Keeper) retireWorktree(ctx context.Context, k session.Key) {
	if _, ok := kp.conf().Binding(k.Binding); ok || kp.keyLive(k) {
		return
	}
	log := kp.log.With(zap.String("key", k.String()))
	d, err := kp.ws.Remove(ctx, k)
	if err != nil {
		kp.reportLeft(log.With(zap.String("path", d.Path)), err)
		return
	}
	if d.Path != "" {
		log.Info("removed the worktree of a binding no longer configured", zap.String("path", d.Path), zap.String("branch_kept", d.BranchKept))
	}
}

// keyLive reports whether a process of key k lives.
func (kp *Keeper) keyLive(k session.Key) bool {
	live := false
	kp.procs.Range(func(_, v any) bool {
		live = v.(*Process).key == k
		return !live
	})
	return live
}

// exitedWorktree runs at the exit of key k's process: a key of a removed
// binding then loses its worktree (retireWorktree), off the reaper.
func (kp *Keeper) exitedWorktree(k session.Key) {
	if _, ok := kp.conf().Binding(k.Binding); ok || k.Channel == "" {
		return // a spare's has no key
	}
	kp.goBg(func(ctx context.Context) { kp.retireWorktree(ctx, k) })
}
