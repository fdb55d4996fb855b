package agent

import (
	"context"
	"fmt"
	"maps"
	"strconv"
	"strings"

	acp "github.com/coder/acp-go-sdk"
)

// The built-in agent's session config options, as a real agent lists its
// mode, model, a reasoning effort that only its large model has (listed
// after the model, as claude-agent-acp lists a model's efforts) and a
// toggle. They change nothing in its replies; the --record file shows them
// with every prompt.
var builtinOptions = []struct {
	id, name string
	category acp.SessionConfigOptionCategory
	values   []string // a select's values, the first the default; nil for the boolean
	onlyWith string   // "option=value" it is listed with; "" always
}{
	{"mode", "Mode", acp.SessionConfigOptionCategoryMode, []string{"ask", "code"}, ""},
	{"model", "Model", acp.SessionConfigOptionCategoryModel, []string{"builtin-small", "builtin-large"}, ""},
	{"effort", "Effort", acp.SessionConfigOptionCategoryThoughtLevel, []string{"low", "high"}, "model=builtin-large"},
	{"verbose", "Verbose", "", nil, ""},
}

// listedWith reports whether an option that is listed only with another
// option's value is listed for opts.
func listedWith(onlyWith string, opts map[string]string) bool {
	if onlyWith == "" {
		return true
	}
	id, v, _ := strings.Cut(onlyWith, "=")
	return opts[id] == v
}

func defaultOptions() map[string]string {
	out := make(map[string]string, len(builtinOptions))
	for _, o := range builtinOptions {
		if o.values == nil {
			out[o.id] = "false"
			continue
		}
		out[o.id] = o.values[0]
	}
	return out
}

// configOptions lists s's options with their current values; none with
// --no-options.
func (b *builtin) configOptions(s *session) []acp.SessionConfigOption {
	if b.opts.noOptions {
		return nil
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	out := make([]acp.SessionConfigOption, 0, len(builtinOptions))
	for _, o := range builtinOptions {
		if !listedWith(o.onlyWith, s.options) {
			continue
		}
		if o.values == nil {
			out = append(out, acp.SessionConfigOption{Boolean: &acp.SessionConfigOptionBoolean{
				Id: acp.SessionConfigId(o.id), Name: o.name, Type: "boolean", CurrentValue: s.options[o.id] == "true"}})
			continue
		}
		vals := make(acp.SessionConfigSelectOptionsUngrouped, len(o.values))
		for i, v := range o.values {
			vals[i] = acp.SessionConfigSelectOption{Value: acp.SessionConfigValueId(v), Name: v}
		}
		cat := o.category
		out = append(out, acp.SessionConfigOption{Select: &acp.SessionConfigOptionSelect{
			Id: acp.SessionConfigId(o.id), Name: o.name, Type: "select", Category: &cat,
			CurrentValue: acp.SessionConfigValueId(s.options[o.id]), Options: acp.SessionConfigSelectOptions{Ungrouped: &vals}}})
	}
	return out
}

// SetSessionConfigOption sets one option of a session, refusing an id or
// value it does not list as claude-agent-acp does.
func (b *builtin) SetSessionConfigOption(ctx context.Context, p acp.SetSessionConfigOptionRequest) (acp.SetSessionConfigOptionResponse, error) {
	var sid acp.SessionId
	var id, value string
	switch {
	case p.Boolean != nil:
		sid, id, value = p.Boolean.SessionId, string(p.Boolean.ConfigId), strconv.FormatBool(p.Boolean.Value)
	case p.ValueId != nil:
		sid, id, value = p.ValueId.SessionId, string(p.ValueId.ConfigId), string(p.ValueId.Value)
	}
	b.record(map[string]any{"method": acp.AgentMethodSessionSetConfigOption, "session": string(sid), "config_id": id, "value": value})
	b.mu.Lock()
	s, ok := b.sessions[string(sid)]
	b.mu.Unlock()
	if !ok {
		return acp.SetSessionConfigOptionResponse{}, &acp.RequestError{Code: -32602, Message: fmt.Sprintf("builtin: unknown session %q", sid)}
	}
	if b.opts.noOptions {
		return acp.SetSessionConfigOptionResponse{}, &acp.RequestError{Code: -32602, Message: "builtin: this agent lists no config options (--no-options)"}
	}
	valid := false
	b.mu.Lock()
	current := maps.Clone(s.options)
	b.mu.Unlock()
	for _, o := range builtinOptions {
		if o.id != id || !listedWith(o.onlyWith, current) {
			continue
		}
		if o.values == nil {
			valid = p.Boolean != nil
		}
		for _, v := range o.values {
			valid = valid || v == value
		}
	}
	if !valid {
		return acp.SetSessionConfigOptionResponse{}, &acp.RequestError{Code: -32602, Message: fmt.Sprintf("builtin: invalid value for config option %s: %s", id, value)}
	}
	b.mu.Lock()
	s.options[id] = value
	if id == "model" && value != "builtin-large" {
		s.options["effort"] = "low" // another model has no efforts; the large one starts at low again
	}
	b.mu.Unlock()
	return acp.SetSessionConfigOptionResponse{ConfigOptions: b.configOptions(s)}, nil
}
