// Permission policies as the agents themselves are told them: the session
// mode and _meta internal/policy gives for each agent, set on every
// session, and the bindings whose agent cannot be told (advisories).

package resident

import (
	"fmt"
	"sort"
	"strings"

	"go.opentelemetry.io/otel/attribute"
	"go.uber.org/zap"

	"github.com/residentd/residentd/apitype"
	"github.com/residentd/residentd/internal/acp"
	"github.com/residentd/residentd/internal/config"
	"github.com/residentd/residentd/internal/policy"
	"github.com/residentd/residentd/internal/store"
	"github.com/residentd/residentd/internal/tracing"
)

// policyNote is how a binding's agent was last told its policy.
type policyNote struct {
	agent policy.Agent
	c     policy.Controls
	err   string // the control failed (the agent does not list the mode)
}

// sessionMeta is the acp.Spec hook that gives binding b's agent, once it
// said who it is, the _meta that carries b's policy, and notes how.
func (kp *Keeper) sessionMeta(b config.Binding) func(acp.Info) map[string]any {
	return func(info acp.Info) map[string]any {
		a := policy.Agent(info)
		c := policy.For(a, b.Permission)
		kp.notePolicy(b, a, c, "", false)
		return c.Meta
	}
}

// commandLine is what identifies a binding's agent program across daemon
// starts: a remembered agent is trusted only for the same command line.
func commandLine(b config.Binding) string {
	return strings.Join(append([]string{b.Command}, b.Args...), " ")
}

// rememberAgent keeps who b's agent said it is, and the policy control it
// refused if any, in the state file when that changed, so the next daemon start reports b's policy before any process
// runs (no agent is started for it: see reportPolicies).
func (kp *Keeper) rememberAgent(b config.Binding, a policy.Agent, failed string) {
	seen := store.AgentSeen{Name: a.Name, Version: a.Version, Command: commandLine(b), Failed: failed}
	kp.mu.Lock()
	same := kp.seen[b.ID] == seen
	kp.seen[b.ID] = seen
	kp.mu.Unlock()
	if same {
		return
	}
	if err := kp.st.SetAgentSeen(b.ID, seen); err != nil {
		kp.log.Warn("remember the binding's agent for the next start's policy report", zap.String("binding", b.ID), zap.Error(err))
	}
}

// reportPolicies says at startup, for every binding, how its permission
// policy reaches its agent: from the agent the binding last started with
// the same command line (remembered in the state file), logged and shown
// in health as when that agent starts; a binding whose agent has not
// started yet is reported at its first start.
func (kp *Keeper) reportPolicies() {
	for _, b := range kp.conf().Bindings {
		kp.mu.Lock()
		seen, ok := kp.seen[b.ID]
		kp.mu.Unlock()
		if !ok || seen.Command != commandLine(b) {
			kp.log.Named("policy").Info("permission policy reported at the agent's first start: the binding has not started this agent yet",
				zap.String("binding", b.ID), zap.String("permission", string(b.Permission)))
			continue
		}
		a := policy.Agent{Name: seen.Name, Version: seen.Version}
		kp.notePolicy(b, a, policy.For(a, b.Permission), seen.Failed, false)
	}
}

// notePolicy keeps how b's agent is told its policy, and logs it when it
// changed: the first process of the binding (at the startup check), a new
// agent version, or a control that failed. A failure of the same agent's
// control stays until the control worked (worked) on a later session.
func (kp *Keeper) notePolicy(b config.Binding, a policy.Agent, c policy.Controls, failed string, worked bool) {
	kp.mu.Lock()
	h := kp.of(b.ID)
	old, seen := h.policy, h.policySeen
	if seen && old.agent == a && failed == "" && !worked {
		failed = old.err
	}
	h.policy, h.policySeen = policyNote{agent: a, c: c, err: failed}, true
	kp.mu.Unlock()
	kp.rememberAgent(b, a, failed)
	if seen && old.agent == a && old.err == failed {
		return
	}
	log := kp.log.Named("policy").With(zap.String("binding", b.ID), zap.String("agent", a.String()), zap.String("permission", string(b.Permission)))
	switch {
	case failed != "":
		log.Error(policy.Advisory, zap.String("control_failed", failed))
	case !c.Enforced:
		log.Warn(policy.Advisory, zap.String("unasked", c.Unasked))
	case c.Proof == "":
		log.Info("permission policy allows every tool: nothing for the agent's controls to hold")
	default:
		log.Info("permission policy enforced by the agent's own controls, proven for this agent and version", zap.String("by", c.By), zap.String("proven_by", c.Proof))
	}
}

// applyPolicy puts s's session in the mode b's policy needs: once per
// session (created, loaded or resumed), and again whenever the agent lists
// another mode as current (it may move itself, e.g. on leaving plan mode).
// A mode the agent does not list fails the turn with ErrInvalidOption: the
// policy would not hold.
func (kp *Keeper) applyPolicy(bctx bounded, s *Process, b config.Binding, log *zap.Logger) error {
	a := policy.Agent(s.a.Info())
	c := policy.For(a, b.Permission)
	if c.Mode == "" {
		return nil
	}
	cur, available, listed := s.a.Modes(s.native)
	if err := c.CheckMode(available, listed); err != nil {
		kp.notePolicy(b, a, c, err.Error(), false)
		return fmt.Errorf("%w: binding %q's permission %q with %s: %v", ErrInvalidOption, b.ID, b.Permission, a, err)
	}
	s.mu.Lock()
	set := s.policyMode
	s.mu.Unlock()
	if set == c.Mode && cur == c.Mode {
		return nil
	}
	ctx, cancel := bctx.context()
	defer cancel()
	_, span := tracing.Start(ctx, "session mode")
	if span.IsRecording() {
		span.SetAttributes(attribute.String("residentd.mode", c.Mode), attribute.String("residentd.permission_policy", string(b.Permission)))
	}
	err := s.a.SetMode(ctx, s.native, c.Mode)
	span.End()
	if err != nil {
		kp.notePolicy(b, a, c, err.Error(), false)
		return fmt.Errorf("set session mode %q for binding %q's permission %q: %w", c.Mode, b.ID, b.Permission, err)
	}
	s.mu.Lock()
	s.policyMode = c.Mode
	s.mu.Unlock()
	kp.notePolicy(b, a, c, "", true)
	kp.m.PolicyModeSet(b.ID)
	log.Info("session mode set for the permission policy", zap.String("native", s.native), zap.String("mode", c.Mode), zap.String("was", cur))
	return nil
}

// PolicyAdvisories lists the bindings whose agent, as last started, cannot
// be told their policy or refused the control that tells it.
func (kp *Keeper) PolicyAdvisories() []apitype.PolicyAdvisory {
	kp.mu.Lock()
	defer kp.mu.Unlock()
	var out []apitype.PolicyAdvisory
	for id, h := range kp.health {
		n := h.policy
		if !h.policySeen || n.c.Enforced && n.err == "" {
			continue
		}
		b, ok := kp.conf().Binding(id)
		if !ok {
			continue // removed by a config reload
		}
		unasked := n.c.Unasked
		if n.err != "" {
			unasked = "its control failed: " + n.err
		}
		out = append(out, apitype.PolicyAdvisory{Binding: id, Agent: n.agent.String(), Policy: string(b.Permission), Advisory: policy.Advisory, Unasked: unasked})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Binding < out[j].Binding })
	return out
}
