package acp

import (
	"context"
	"fmt"
	"slices"

	sdk "github.com/coder/acp-go-sdk"
)

// Info is who the agent says it is in initialize's agentInfo.
type Info struct {
	Name    string
	Version string
}

// Info returns the agentInfo of the agent's initialize answer (empty
// when it sent none).
func (a *Agent) Info() Info { return a.info }

// modes are a session's modes (ACP session modes: the agent's own
// operating modes, which for coding agents are permission modes).
type modes struct {
	listed    bool
	current   string
	available []string
}

// setModes keeps what the agent listed; nil (it listed none) leaves what
// r knew.
func (r *route) setModes(m *sdk.SessionModeState) {
	if m == nil {
		return
	}
	ids := make([]string, len(m.AvailableModes))
	for i, x := range m.AvailableModes {
		ids[i] = string(x.Id)
	}
	r.mu.Lock()
	r.modes = modes{listed: true, current: string(m.CurrentModeId), available: ids}
	r.mu.Unlock()
}

// Modes returns session native's current mode, the modes the agent
// offers for it, and whether it listed modes at all.
func (a *Agent) Modes(native string) (current string, available []string, listed bool) {
	a.mu.Lock()
	r := a.routes[native]
	a.mu.Unlock()
	if r == nil {
		return "", nil, false
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.modes.listed && a.v2.Load() {
		if o, ok := modeOption(r.options); ok {
			return o.Current, slices.Clone(o.Values), true
		}
	}
	return r.modes.current, slices.Clone(r.modes.available), r.modes.listed
}

// SetMode runs session/set_mode on session native.
func (a *Agent) SetMode(ctx context.Context, native, mode string) error {
	op := fmt.Sprintf("set session %q mode to %q", native, mode)
	a.mu.Lock()
	r := a.routes[native]
	a.mu.Unlock()
	if r == nil {
		return fmt.Errorf("acp: %s: session was not created or loaded on this agent (pid %d)", op, a.pid)
	}
	r.mu.Lock()
	o, byOption := modeOption(r.options)
	byOption = byOption && !r.modes.listed && a.v2.Load()
	r.mu.Unlock()
	if byOption {
		// ACP v2 has no session modes: the mode is a config option.
		_, err := a.SetOption(ctx, native, o.ID, mode)
		return err
	}
	if _, err := a.conn.SetSessionMode(ctx, sdk.SetSessionModeRequest{SessionId: sdk.SessionId(native), ModeId: sdk.SessionModeId(mode)}); err != nil {
		return a.callErr(ctx, op, err)
	}
	r.mu.Lock()
	r.modes.current = mode
	r.mu.Unlock()
	return nil
}

// modeOption is the config option that sets the session's mode (category
// mode), where the agent lists one: ACP v2's place for the modes.
func modeOption(opts []Option) (Option, bool) {
	for _, o := range opts {
		if o.Category == "mode" && o.Kind == OptionSelect {
			return o, true
		}
	}
	return Option{}, false
}
