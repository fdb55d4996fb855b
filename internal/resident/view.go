package resident

import (
	"github.com/residentd/residentd/apitype"
	"github.com/residentd/residentd/internal/acp"
	"github.com/residentd/residentd/internal/child"
)

// Describe fills in what the keeper knows of the process ses.Pid in a
// sessions listing: its memory (0 where it cannot be read: its cgroup's,
// covering the whole tree, when it has one with the memory controller,
// else the resident sets of its tree's processes summed), how it reopened its session, what its turns used, its
// session options now, whether it works with no turn in flight, and
// whether its binding's restores stopped.
func (kp *Keeper) Describe(ses *apitype.Session) {
	rss, source, err := child.Memory(ses.Pid)
	if err != nil {
		source = ""
	}
	ses.RSSBytes, ses.MemorySource = rss, source
	ses.RestoreStopped = kp.RestoreStopped(ses.Binding)
	if v, ok := kp.procs.Load(ses.Pid); ok {
		p := v.(*Process)
		ses.RestoredBy, ses.Usage, ses.Options, ses.Restore = p.restoredBy, p.usedSoFar(), p.currentOptions(), p.restore
		ses.Working, _ = p.Working()
		p.background(ses)
		kp.describeWorktree(ses, p)
	}
}

// BindingCommands checks each binding's command as a start would resolve
// it (PATH, existence, execute permission), without starting anything.
func (kp *Keeper) BindingCommands() []apitype.BindingCommand {
	out := make([]apitype.BindingCommand, 0, len(kp.conf().Bindings))
	for _, b := range kp.conf().Bindings {
		c := apitype.BindingCommand{Binding: b.ID, Command: b.Command}
		if path, err := acp.Resolve(b.Command); err != nil {
			c.Problem = err.Error()
		} else {
			c.Path, c.Startable = path, true
		}
		out = append(out, c)
	}
	return out
}

// AgentMemory is the memory of the live agents, sessions and spares, by
// binding: each one's whole tree (child.Memory).
func (kp *Keeper) AgentMemory() map[string]int64 {
	out := map[string]int64{}
	kp.procs.Range(func(pid, v any) bool {
		if n, _, err := child.Memory(pid.(int)); err == nil {
			out[v.(*Process).key.Binding] += n
		}
		return true
	})
	for _, sp := range kp.Spares() {
		out[sp.Binding] += sp.RSSBytes
	}
	return out
}

// AgentCgroups is the cgroup subtree the agents run in, nil without one.
func (kp *Keeper) AgentCgroups() *child.Cgroups { return kp.cgroups }
