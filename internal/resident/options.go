// Session config options: what each key asks of its agent's session
// (model, mode, reasoning effort, …) and how it gets there.

package resident

import (
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.uber.org/zap"

	"github.com/residentd/residentd/apitype"
	"github.com/residentd/residentd/internal/acp"
	"github.com/residentd/residentd/internal/config"
	"github.com/residentd/residentd/internal/session"
	"github.com/residentd/residentd/internal/tracing"
)

// wanted is what a key asks of its session: the binding's session_options
// with the key's own (set through the API) on top, and which ids are the
// key's own, so an error can say where to fix a bad one.
type wanted struct {
	opts map[string]string
	own  map[string]string
}

// wantOptions is what key k asks of its session; a thread key asks what
// its channel's key does (options are set per channel).
func (kp *Keeper) wantOptions(k session.Key, b config.Binding) wanted {
	kp.mu.Lock()
	own := maps.Clone(kp.keyOpts[k.Main()])
	kp.mu.Unlock()
	w := wanted{opts: maps.Clone(b.SessionOptions), own: own}
	if w.opts == nil {
		w.opts = map[string]string{}
	}
	maps.Copy(w.opts, own)
	return w
}

// where says where option id was asked for, and how to change it.
func (w wanted) where(k session.Key, b config.Binding, id string) string {
	if _, ok := w.own[id]; ok {
		return fmt.Sprintf("set for %s through the API; change it with residentd options --channel %s --binding %s, or --clear", k, k.Channel, k.Binding)
	}
	return fmt.Sprintf("in binding %q's session_options; fix the config", b.ID)
}

// checkOption reports whether the listing offers value for option id: the
// id must be listed and the value one it offers. listed says whether the
// agent lists config options at all.
func checkOption(b config.Binding, list []acp.Option, listed bool, id, value string) error {
	if !listed {
		return fmt.Errorf("%w %q: the agent of binding %q (%s) lists no session config options", ErrInvalidOption, id, b.ID, b.Command)
	}
	i := slices.IndexFunc(list, func(o acp.Option) bool { return o.ID == id })
	if i < 0 {
		return fmt.Errorf("%w %q: the agent of binding %q does not list it (it lists %s)", ErrInvalidOption, id, b.ID, optionIDs(list))
	}
	if o := list[i]; !o.Accepts(value) {
		return fmt.Errorf("%w %q = %q: the agent of binding %q does not offer that value (it offers %s)", ErrInvalidOption, id, value, b.ID, strings.Join(o.Values, ", "))
	}
	return nil
}

func optionIDs(list []acp.Option) string {
	ids := make([]string, len(list))
	for i, o := range list {
		ids[i] = o.ID
	}
	return strings.Join(ids, ", ")
}

// setOptions brings the session of s to what w asks before a turn:
// once per session for each option, when the session was created, loaded or
// resumed (its first turn), and on a warm process only what the key
// changed since (through the API), never the same value twice; an option
// the key no longer asks for goes back to the value the agent had before
// residentd set it. The value an agent lists as current is not trusted to
// skip one: after session/resume claude-agent-acp lists its default model
// while it runs the one in its transcript. Options go in the order the
// agent lists them (a model before its efforts), each checked against the
// listing as the ones before left it; one the agent lists, or offers the
// value of, only after another changed waits for a second pass; count says
// whether the sets are counted.
func (kp *Keeper) setOptions(bctx bounded, s *Process, b config.Binding, k session.Key, w wanted, count bool, log *zap.Logger) error {
	list, listed := s.a.Options(s.native)
	kp.noteListing(b.ID, list, listed)
	todo, reverts := s.optionsToApply(w.opts)
	if len(todo) == 0 {
		return nil
	}
	ctx, cancel := bctx.context()
	defer cancel()
	for pass := 0; pass < 2 && len(todo) > 0; pass++ {
		for _, o := range list {
			v, ok := todo[o.ID]
			if !ok {
				continue
			}
			cur, _ := s.a.Options(s.native)
			if checkOption(b, cur, true, o.ID, v) != nil {
				continue // the next pass, after the options before it moved
			}
			t0 := kp.now()
			_, span := tracing.Start(ctx, "session option")
			if span.IsRecording() {
				span.SetAttributes(attribute.String("residentd.option.id", o.ID), attribute.String("residentd.option.value", v))
			}
			after, err := s.a.SetOption(ctx, s.native, o.ID, v)
			if err != nil {
				span.SetStatus(codes.Error, err.Error())
				span.End()
				return fmt.Errorf("set session option %q = %q for binding %q: %w", o.ID, v, b.ID, err)
			}
			span.End()
			kp.noteListing(b.ID, after, true)
			s.noteApplied(o.ID, v, !reverts[o.ID], cur, after)
			delete(todo, o.ID)
			if !count {
				continue
			}
			kp.m.OptionSet(b.ID)
			log.Info("session option set", zap.String("native", s.native), zap.String("option", o.ID), zap.String("value", v), zap.Duration("duration", kp.now().Sub(t0)))
		}
		list, listed = s.a.Options(s.native)
		// What a change moved (a new model may reset its effort) is set again.
		moved, _ := s.optionsToApply(w.opts)
		maps.Copy(todo, moved)
	}
	for _, id := range slices.Sorted(maps.Keys(todo)) {
		err := checkOption(b, list, listed, id, todo[id])
		if err == nil {
			continue
		}
		err = fmt.Errorf("%w; it is %s", err, w.where(k, b, id))
		if _, own := w.own[id]; !own {
			kp.optionFailed(b.ID, err)
		}
		return err
	}
	if len(w.own) == 0 {
		kp.optionWorked(b.ID)
	}
	return nil
}

// optionsToApply is what of want the process has not applied yet, and
// the options residentd set that want no longer has, at the value the
// agent had before (reverts; the process forgets them as they are handed
// over).
func (s *Process) optionsToApply(want map[string]string) (todo map[string]string, reverts map[string]bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	todo, reverts = map[string]string{}, map[string]bool{}
	for id, v := range want {
		if s.appliedOpts[id] != v {
			todo[id] = v
		}
	}
	for id := range s.appliedOpts {
		if _, ok := want[id]; ok {
			continue
		}
		if v, ok := s.origOpts[id]; ok {
			todo[id], reverts[id] = v, true
		}
		delete(s.appliedOpts, id)
		delete(s.origOpts, id)
	}
	return todo, reverts
}

// noteApplied notes a set of the session's option id to v: as residentd's
// (keep), with the value the agent had before (from before, the first
// time), or as a revert to that value. It forgets the options residentd
// set earlier that the agent's listing after the change no longer shows
// at their values, so they are set again.
func (s *Process) noteApplied(id, v string, keep bool, before, after []acp.Option) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.appliedOpts == nil {
		s.appliedOpts, s.origOpts = map[string]string{}, map[string]string{}
	}
	if keep {
		if _, ok := s.origOpts[id]; !ok {
			if i := slices.IndexFunc(before, func(o acp.Option) bool { return o.ID == id }); i >= 0 {
				s.origOpts[id] = before[i].Current
			}
		}
		s.appliedOpts[id] = v
	}
	for other, was := range s.appliedOpts {
		i := slices.IndexFunc(after, func(o acp.Option) bool { return o.ID == other })
		if other != id && (i < 0 || after[i].Current != was) {
			delete(s.appliedOpts, other)
		}
	}
}

// currentOptions is the session's options as the agent lists them now.
func (s *Process) currentOptions() map[string]string {
	list, _ := s.a.Options(s.native)
	if len(list) == 0 {
		return nil
	}
	out := make(map[string]string, len(list))
	for _, o := range list {
		out[o.ID] = o.Current
	}
	return out
}

// noteListing merges a listing into what the binding's agent has listed
// so far, every id with every value it offered (a model's efforts come and
// go with the model), for checking options set through the API before a
// turn applies them.
func (kp *Keeper) noteListing(binding string, list []acp.Option, listed bool) {
	if !listed {
		return
	}
	kp.mu.Lock()
	defer kp.mu.Unlock()
	h := kp.of(binding)
	seen := h.listed
	h.listedAny = true
	for _, o := range list {
		i := slices.IndexFunc(seen, func(x acp.Option) bool { return x.ID == o.ID })
		if i < 0 {
			seen = append(seen, acp.Option{ID: o.ID, Name: o.Name, Kind: o.Kind, Values: slices.Clone(o.Values)})
			continue
		}
		for _, v := range o.Values {
			if !slices.Contains(seen[i].Values, v) {
				seen[i].Values = append(seen[i].Values, v)
			}
		}
	}
	h.listed = seen
}

func (kp *Keeper) optionFailed(binding string, err error) {
	kp.mu.Lock()
	kp.of(binding).option.fail(err)
	kp.mu.Unlock()
}

func (kp *Keeper) optionWorked(binding string) {
	kp.mu.Lock()
	if h := kp.health[binding]; h != nil {
		h.option.ok()
	}
	kp.mu.Unlock()
}

// OptionErrors lists the bindings whose session options the agent refused
// or does not list, at the last session start. They are checked when a
// session opens, not at daemon start: a check then would need a process
// per binding beside the pool's, at every start.
func (kp *Keeper) OptionErrors() []apitype.OptionError {
	kp.mu.Lock()
	defer kp.mu.Unlock()
	var out []apitype.OptionError
	c := kp.conf()
	for id, h := range kp.health {
		if _, ok := c.Binding(id); ok && h.option.n > 0 {
			out = append(out, apitype.OptionError{Binding: id, Error: h.option.last})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Binding < out[j].Binding })
	return out
}

// SessionOptions returns key k's session options: the key's own, and
// those in effect for its next session (the binding's with the key's on
// top).
func (kp *Keeper) SessionOptions(k session.Key) (apitype.SessionOptions, error) {
	b, ok := kp.conf().Binding(k.Binding)
	if !ok {
		return apitype.SessionOptions{}, fmt.Errorf("%w %q: configured bindings are %v", ErrUnknownBinding, k.Binding, kp.conf().BindingIDs())
	}
	if k.Channel == "" {
		return apitype.SessionOptions{}, fmt.Errorf("%w: channel_id is required", ErrBadRequest)
	}
	kp.mu.Lock()
	own := maps.Clone(kp.keyOpts[k])
	kp.mu.Unlock()
	if own == nil {
		own = map[string]string{}
	}
	return apitype.SessionOptions{Channel: k.Channel, Binding: k.Binding, Options: own, Effective: kp.wantOptions(k, b).opts}, nil
}

// SetSessionOptions replaces key k's own session options (none clears
// them): the key's next turn applies what changed, to its warm process or
// its next session. Once the binding's agent has listed options, each id
// and value must be one it has listed (for any session: a model's efforts
// come with the model); whether it fits the key's session is checked when
// the next turn applies it.
func (kp *Keeper) SetSessionOptions(k session.Key, opts map[string]string) (apitype.SessionOptions, error) {
	b, ok := kp.conf().Binding(k.Binding)
	if !ok {
		return apitype.SessionOptions{}, fmt.Errorf("%w %q: configured bindings are %v", ErrUnknownBinding, k.Binding, kp.conf().BindingIDs())
	}
	if err := k.Check(); err != nil {
		return apitype.SessionOptions{}, fmt.Errorf("%w: %v", ErrBadRequest, err)
	}
	for id, v := range opts {
		if id == "" || v == "" {
			return apitype.SessionOptions{}, fmt.Errorf("%w: option %q = %q: both the option id and its value must be set", ErrBadRequest, id, v)
		}
	}
	kp.mu.Lock()
	var seen []acp.Option
	known := false
	if h := kp.health[b.ID]; h != nil && h.listedAny {
		seen, known = slices.Clone(h.listed), true
	}
	kp.mu.Unlock()
	if known {
		for _, id := range slices.Sorted(maps.Keys(opts)) {
			if err := checkOption(b, seen, true, id, opts[id]); err != nil {
				return apitype.SessionOptions{}, err
			}
		}
	}
	// The store and the daemon's copy change together.
	kp.setOptsMu.Lock()
	defer kp.setOptsMu.Unlock()
	if err := kp.st.SetKeyOptions(k, opts); err != nil {
		return apitype.SessionOptions{}, err
	}
	kp.mu.Lock()
	if len(opts) == 0 {
		delete(kp.keyOpts, k)
	} else {
		kp.keyOpts[k] = maps.Clone(opts)
	}
	kp.mu.Unlock()
	kp.log.Info("session options set", zap.String("key", k.String()), zap.Any("options", opts))
	return kp.SessionOptions(k)
}
