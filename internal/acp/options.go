package acp

import (
	"context"
	"fmt"
	"slices"
	"strconv"

	sdk "github.com/coder/acp-go-sdk"
)

// Option kinds, as ACP types a session config option.
const (
	OptionSelect  = "select"
	OptionBoolean = "boolean"
)

// Option is one session config option an agent lists for a session (model,
// mode, reasoning effort, …) with its current value. A boolean option's
// values are "true" and "false".
type Option struct {
	ID      string
	Name    string
	Kind    string // OptionSelect or OptionBoolean
	Current string
	Values  []string // what a select lists, groups flattened, in its order
	// Category is the agent's word for what a select sets (model, mode,
	// thought_level, …); over ACP v2 the session mode is the option of
	// category mode.
	Category string
}

// Accepts reports whether value is one the option lists.
func (o Option) Accepts(value string) bool {
	if o.Kind == OptionBoolean {
		return value == "true" || value == "false"
	}
	return slices.Contains(o.Values, value)
}

// options types the configOptions of a session response or update; nil
// when the agent sent none.
func options(in []sdk.SessionConfigOption) []Option {
	if in == nil {
		return nil
	}
	out := make([]Option, 0, len(in))
	for _, c := range in {
		switch {
		case c.Select != nil:
			s := c.Select
			o := Option{ID: string(s.Id), Name: s.Name, Kind: OptionSelect, Current: string(s.CurrentValue)}
			if s.Category != nil {
				o.Category = string(*s.Category)
			}
			if u := s.Options.Ungrouped; u != nil {
				for _, v := range *u {
					o.Values = append(o.Values, string(v.Value))
				}
			}
			if g := s.Options.Grouped; g != nil {
				for _, grp := range *g {
					for _, v := range grp.Options {
						o.Values = append(o.Values, string(v.Value))
					}
				}
			}
			out = append(out, o)
		case c.Boolean != nil:
			b := c.Boolean
			out = append(out, Option{ID: string(b.Id), Name: b.Name, Kind: OptionBoolean, Current: strconv.FormatBool(b.CurrentValue), Values: []string{"true", "false"}})
		}
	}
	return out
}

// setOptions keeps list as r's options; a nil list (the agent sent none)
// leaves what r knew.
func (r *route) setOptions(list []Option) {
	if list == nil {
		return
	}
	r.mu.Lock()
	r.options = list
	r.listed = true
	r.mu.Unlock()
}

// Options returns the config options the agent listed for session native
// and whether it listed any at all (an agent without config options lists
// none: every option is then unknown to it).
func (a *Agent) Options(native string) ([]Option, bool) {
	a.mu.Lock()
	r := a.routes[native]
	a.mu.Unlock()
	if r == nil {
		return nil, false
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.options), r.listed
}

// SetOption runs session/set_config_option on session native and returns
// the options as the agent lists them afterwards (a change may move
// others: a new model has its own efforts). value is sent as the option's
// kind asks: a value id, or a boolean for a boolean option.
func (a *Agent) SetOption(ctx context.Context, native, id, value string) ([]Option, error) {
	op := fmt.Sprintf("set session %q config option %q to %q", native, id, value)
	a.mu.Lock()
	r := a.routes[native]
	a.mu.Unlock()
	if r == nil {
		return nil, fmt.Errorf("acp: %s: session was not created or loaded on this agent (pid %d)", op, a.pid)
	}
	kind := OptionSelect
	r.mu.Lock()
	if i := slices.IndexFunc(r.options, func(o Option) bool { return o.ID == id }); i >= 0 {
		kind = r.options[i].Kind
	}
	r.mu.Unlock()
	var req sdk.SetSessionConfigOptionRequest
	if kind == OptionBoolean {
		v, err := strconv.ParseBool(value)
		if err != nil {
			return nil, fmt.Errorf("acp: %s: a boolean option takes true or false", op)
		}
		req.Boolean = &sdk.SetSessionConfigOptionBoolean{SessionId: sdk.SessionId(native), ConfigId: sdk.SessionConfigId(id), Type: OptionBoolean, Value: v}
	} else {
		req.ValueId = &sdk.SetSessionConfigOptionValueId{SessionId: sdk.SessionId(native), ConfigId: sdk.SessionConfigId(id), Value: sdk.SessionConfigValueId(value)}
	}
	resp, err := a.conn.SetSessionConfigOption(ctx, req)
	if err != nil {
		return nil, a.callErr(ctx, op, err)
	}
	r.setOptions(options(resp.ConfigOptions))
	got, _ := a.Options(native)
	return got, nil
}
