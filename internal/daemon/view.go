package daemon

import (
	"github.com/residentd/residentd/apitype"
	"github.com/residentd/residentd/internal/session"
	"github.com/residentd/residentd/internal/store"
)

// Status reports the pool's counts and the configuration's size: the part
// of the health response the daemon knows.
func (d *Daemon) Status() apitype.Health {
	return apitype.Health{
		Live: d.pool.Live(), Busy: d.pool.Busy(), Queued: d.pool.Queued(),
		MaxLive: d.conf().MaxLive, Bindings: len(d.conf().Bindings), RestoreStopped: d.keeper.RestoreStops(),
		OptionErrors: d.keeper.OptionErrors(), BindingCommands: d.keeper.BindingCommands(), PolicyAdvisories: d.keeper.PolicyAdvisories(),
		StorageFull: storageFull(d.st), BudgetsBlind: d.budgetsBlind(),
	}
}

// budgetsBlind are the bindings a configured budget counts (one of their
// own, or any channel's) whose agent's last turn gave no cost.
func (d *Daemon) budgetsBlind() []apitype.BudgetBlind {
	bu := d.conf().Budgets
	var out []apitype.BudgetBlind
	for _, x := range d.keeper.CostBlind() {
		if bu.Bindings[x.Binding] > 0 || bu.ChannelDefault > 0 || len(bu.Channels) > 0 {
			out = append(out, x)
		}
	}
	return out
}

// storageFull is the state file's full disk while its writes are refused
// for lack of space, else nil.
func storageFull(st *store.Store) *apitype.StorageFull {
	f, ok := st.Full()
	if !ok {
		return nil
	}
	return &apitype.StorageFull{Path: st.Path(), Since: f.Since, RefusedWrites: f.Refused, Error: f.Err.Error()}
}

// Sessions lists the live agent processes, sorted by key, as the pool
// holds them and the keeper knows them.
func (d *Daemon) Sessions() []apitype.Session {
	infos := d.pool.Sessions()
	out := make([]apitype.Session, 0, len(infos))
	for _, in := range infos {
		ses := apitype.Session{
			Channel: in.Key.Channel, Binding: in.Key.Binding, ThreadRoot: in.Key.Thread, Pid: in.Pid, Native: in.Native, State: in.State,
			IdleS: in.Idle.Seconds(), Started: in.Started, Turns: in.Turns,
		}
		d.keeper.Describe(&ses)
		if in.State != "stopping" {
			ses.Residency = &apitype.SessionResidency{Policy: policyFor(d.conf()).Name(), Keep: in.Keep}
			d.keeper.Residency(&ses, in.Residency)
		}
		out = append(out, ses)
	}
	return out
}

// CancelBackground cancels one item of key k's background work (the
// keeper's).
func (d *Daemon) CancelBackground(k session.Key, typ, item string) (apitype.BackgroundCancelResponse, error) {
	return d.keeper.CancelBackground(k, typ, item)
}

// Spares lists the bindings' spare processes (the keeper's).
func (d *Daemon) Spares() []apitype.Spare { return d.keeper.Spares() }

// Worktrees lists the keys' git worktrees, of channel ch only when it is
// not "" (the keeper's).
func (d *Daemon) Worktrees(ch string) []apitype.Worktree { return d.keeper.Worktrees(ch) }

// SessionOptions returns key k's session options (the keeper's).
func (d *Daemon) SessionOptions(k session.Key) (apitype.SessionOptions, error) {
	return d.keeper.SessionOptions(k)
}

// SetSessionOptions replaces key k's own session options (the keeper's).
func (d *Daemon) SetSessionOptions(k session.Key, opts map[string]string) (apitype.SessionOptions, error) {
	return d.keeper.SetSessionOptions(k, opts)
}

// Bindings lists the configured bindings in configuration order.
func (d *Daemon) Bindings() []apitype.Binding {
	out := make([]apitype.Binding, 0, len(d.conf().Bindings))
	for _, b := range d.conf().Bindings {
		out = append(out, apitype.Binding{
			ID: b.ID, Handle: b.Handle, Runtime: b.Runtime, Command: b.Command,
			Supervised: b.Supervised, Resident: b.Resident, Restore: b.RestoreOn(),
			RestoreMethod: b.RestoreMethod, BriefPlacement: string(b.BriefPlacement), SessionOptions: b.SessionOptions,
			Scope: b.Scope, Workspace: b.Workspace,
		})
	}
	return out
}
