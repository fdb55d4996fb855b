// A config reload as the keeper sees it: which binding a spawn starts,
// which live process a turn of a changed binding must not reuse, and what
// a warm process takes at its next turn.

package resident

import (
	"context"
	"reflect"

	"github.com/residentd/residentd/internal/acp"
	"github.com/residentd/residentd/internal/config"
	"github.com/residentd/residentd/internal/policy"
)

// bindingKey carries, in a spawn's context, the binding of the turn that
// spawns: a turn keeps the binding it was accepted with across a reload.
type bindingKey struct{}

// WithBinding makes a spawn under ctx start binding *b (not changed
// after), not the one of that id in the config in force.
func WithBinding(ctx context.Context, b *config.Binding) context.Context {
	return context.WithValue(ctx, bindingKey{}, b)
}

// bindingFor is the binding a spawn for key binding id starts.
func (kp *Keeper) bindingFor(ctx context.Context, id string) (config.Binding, bool) {
	if b, ok := ctx.Value(bindingKey{}).(*config.Binding); ok && b.ID == id {
		return *b, true
	}
	return kp.conf().Binding(id)
}

// Reuse reports whether a turn of binding b may take process p as it is:
// false when a field the process was started with (config.ReplaceProcess)
// differs, or when b's permission policy needs session _meta the agent's
// sessions were not opened with (claude-agent-acp's tool rules).
func (kp *Keeper) Reuse(p *Process, b *config.Binding) bool {
	return fits(&p.binding, b, p.a.Info())
}

// fits reports whether a process of agent info started with binding
// started serves binding b as it is (see Reuse); a spare started before a
// reload is checked the same way when a turn would take it.
func fits(started, b *config.Binding, info acp.Info) bool {
	if !started.SameProcess(b) {
		return false
	}
	if started.Permission != b.Permission {
		a := policy.Agent(info)
		return reflect.DeepEqual(policy.For(a, started.Permission).Meta, policy.For(a, b.Permission).Meta)
	}
	return true
}

// PermissionClass is how a change of binding id's permission policy from
// old to new takes effect: next_turn, or replace_process when the agent
// the binding last started carries the policy in session _meta that
// differs between them.
func (kp *Keeper) PermissionClass(id string, old, new config.Binding) config.Class {
	kp.mu.Lock()
	h := kp.health[id]
	var a policy.Agent
	known := h != nil && h.policySeen
	if known {
		a = h.policy.agent
	}
	kp.mu.Unlock()
	if known && !reflect.DeepEqual(policy.For(a, old.Permission).Meta, policy.For(a, new.Permission).Meta) {
		return config.ReplaceProcess
	}
	return config.NextTurn
}

// takeBinding brings warm process p to binding b before a turn: the
// permission policy that answers its requests, and the full brief at this
// turn when the brief or its placement changed since its last turn.
func (p *Process) takeBinding(b config.Binding) error {
	p.mu.Lock()
	prev := p.served
	p.served = b
	if prev.Brief != b.Brief || prev.BriefPlacement != b.BriefPlacement {
		p.briefDue = true
	}
	p.mu.Unlock()
	if p.a.Permission() != b.Permission {
		return p.a.SetPermission(b.Permission)
	}
	return nil
}
