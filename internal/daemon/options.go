// Session config options: what each key asks of its agent's session
// (model, mode, reasoning effort, …) and how it gets there.

package daemon

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/residentd/residentd/apitype"
	"github.com/residentd/residentd/internal/acp"
	"github.com/residentd/residentd/internal/config"
	"github.com/residentd/residentd/internal/session"
)

// ErrInvalidOption classifies a session option the agent does not list:
// an unknown option id, or a value the option does not offer.
var ErrInvalidOption = errors.New("invalid session option")

// wantOptions is what key k asks of its session: the binding's
// session_options with the key's own (set through the API) on top.
func (d *Daemon) wantOptions(k session.Key, b config.Binding) map[string]string {
	d.mu.Lock()
	own := d.keyOpts[k]
	d.mu.Unlock()
	if len(b.SessionOptions) == 0 && len(own) == 0 {
		return nil
	}
	want := maps.Clone(b.SessionOptions)
	if want == nil {
		want = map[string]string{}
	}
	maps.Copy(want, own)
	return want
}

// checkOptions reports the first of want the listing does not have: an id
// it does not list, or a value the option does not offer. listed says
// whether the agent lists config options at all.
func checkOptions(b config.Binding, list []acp.Option, listed bool, want map[string]string) error {
	ids := slices.Sorted(maps.Keys(want))
	if !listed && len(ids) > 0 {
		return fmt.Errorf("%w %q: the agent of binding %q (%s) lists no session config options; remove it from the binding's session_options", ErrInvalidOption, ids[0], b.ID, b.Command)
	}
	for _, id := range ids {
		i := slices.IndexFunc(list, func(o acp.Option) bool { return o.ID == id })
		if i < 0 {
			return fmt.Errorf("%w %q: the agent of binding %q does not list it (it lists %s)", ErrInvalidOption, id, b.ID, optionIDs(list))
		}
		if o := list[i]; !o.Accepts(want[id]) {
			return fmt.Errorf("%w %q = %q: the agent of binding %q does not offer that value (it offers %s)", ErrInvalidOption, id, want[id], b.ID, strings.Join(o.Values, ", "))
		}
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

// applyOptions brings the session of s to want before a turn: once per
// session for each option, when the session was created, loaded or resumed
// (its first turn), and on a warm process only what the key changed since
// (through the API), never the same value twice. The value an agent lists
// as current is not trusted to skip one: after session/resume,
// claude-agent-acp lists its default model while it runs the one in its
// transcript. Options go in the order the agent lists them (a model before
// its efforts), each checked against the listing as the one before left it.
func (d *Daemon) applyOptions(ctx context.Context, s *resident, b config.Binding, want map[string]string, log *zap.Logger) error {
	list, listed := s.a.Options(s.native)
	d.noteListing(b.ID, list, listed)
	// A second pass sets again what a change moved (a new model may reset
	// its effort), as the live session's listing says.
	for pass := 0; pass < 2; pass++ {
		todo := s.optionsToApply(want)
		if len(todo) == 0 {
			break
		}
		if err := checkOptions(b, list, listed, todo); err != nil {
			d.optionFailed(b.ID, err)
			return err
		}
		for _, o := range list {
			v, ok := todo[o.ID]
			if !ok {
				continue
			}
			cur, _ := s.a.Options(s.native)
			if err := checkOptions(b, cur, true, map[string]string{o.ID: v}); err != nil {
				d.optionFailed(b.ID, err)
				return err
			}
			t0 := d.now()
			after, err := s.a.SetOption(ctx, s.native, o.ID, v)
			if err != nil {
				err = fmt.Errorf("set session option %q = %q for binding %q: %w", o.ID, v, b.ID, err)
				d.optionFailed(b.ID, err)
				return err
			}
			d.noteListing(b.ID, after, true)
			s.noteApplied(o.ID, v, after)
			d.m.OptionSet(b.ID)
			log.Info("session option set", zap.String("native", s.native), zap.String("option", o.ID), zap.String("value", v), zap.Duration("duration", d.now().Sub(t0)))
		}
		list, _ = s.a.Options(s.native)
	}
	d.optionWorked(b.ID)
	return nil
}

// optionsToApply is what of want the process has not applied yet.
func (s *resident) optionsToApply(want map[string]string) map[string]string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out map[string]string
	for id, v := range want {
		if s.appliedOpts[id] != v {
			if out == nil {
				out = map[string]string{}
			}
			out[id] = v
		}
	}
	return out
}

// noteApplied notes that residentd set the session's option id to v, and
// forgets the options it set before that the agent's listing after the
// change (after) no longer shows at their values.
func (s *resident) noteApplied(id, v string, after []acp.Option) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.appliedOpts == nil {
		s.appliedOpts = map[string]string{}
	}
	s.appliedOpts[id] = v
	for other, was := range s.appliedOpts {
		i := slices.IndexFunc(after, func(o acp.Option) bool { return o.ID == other })
		if other != id && (i < 0 || after[i].Current != was) {
			delete(s.appliedOpts, other)
		}
	}
}

// currentOptions is the session's options as the agent lists them now.
func (s *resident) currentOptions() map[string]string {
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

// noteListing keeps the binding's latest listing, for checking options
// set through the API before any turn uses them.
func (d *Daemon) noteListing(binding string, list []acp.Option, listed bool) {
	if !listed {
		return
	}
	d.mu.Lock()
	d.listed[binding] = slices.Clone(list)
	d.mu.Unlock()
}

func (d *Daemon) optionFailed(binding string, err error) {
	d.mu.Lock()
	d.optionErrs[binding] = err.Error()
	d.mu.Unlock()
}

func (d *Daemon) optionWorked(binding string) {
	d.mu.Lock()
	delete(d.optionErrs, binding)
	d.mu.Unlock()
}

// OptionErrors lists the bindings whose session options the agent refused
// or does not list, at the last session start or the startup check.
func (d *Daemon) OptionErrors() []apitype.OptionError {
	d.mu.Lock()
	defer d.mu.Unlock()
	var out []apitype.OptionError
	for id, e := range d.optionErrs {
		out = append(out, apitype.OptionError{Binding: id, Error: e})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Binding < out[j].Binding })
	return out
}

// SessionOptions returns key k's session options: the key's own, and
// those in effect for its next session (the binding's with the key's on
// top).
func (d *Daemon) SessionOptions(k session.Key) (apitype.SessionOptions, error) {
	b, ok := d.cfg.Binding(k.Binding)
	if !ok {
		return apitype.SessionOptions{}, fmt.Errorf("%w %q: configured bindings are %v", ErrUnknownBinding, k.Binding, d.bindingIDs())
	}
	if k.Channel == "" {
		return apitype.SessionOptions{}, fmt.Errorf("%w: channel_id is required", ErrBadRequest)
	}
	d.mu.Lock()
	own := maps.Clone(d.keyOpts[k])
	d.mu.Unlock()
	want := d.wantOptions(k, b)
	if own == nil {
		own = map[string]string{}
	}
	if want == nil {
		want = map[string]string{}
	}
	return apitype.SessionOptions{Channel: k.Channel, Binding: k.Binding, Options: own, Effective: want}, nil
}

// SetSessionOptions replaces key k's own session options (none clears
// them): the key's next turn applies what changed, to its warm process or
// its next session. Options are checked against what the binding's agent
// last listed, when it has listed any yet; otherwise at the next session
// start.
func (d *Daemon) SetSessionOptions(k session.Key, opts map[string]string) (apitype.SessionOptions, error) {
	b, ok := d.cfg.Binding(k.Binding)
	if !ok {
		return apitype.SessionOptions{}, fmt.Errorf("%w %q: configured bindings are %v", ErrUnknownBinding, k.Binding, d.bindingIDs())
	}
	if err := k.Check(); err != nil {
		return apitype.SessionOptions{}, fmt.Errorf("%w: %v", ErrBadRequest, err)
	}
	for id, v := range opts {
		if id == "" || v == "" {
			return apitype.SessionOptions{}, fmt.Errorf("%w: option %q = %q: both the option id and its value must be set", ErrBadRequest, id, v)
		}
	}
	d.mu.Lock()
	list, known := d.listed[b.ID]
	d.mu.Unlock()
	if known {
		if err := checkOptions(b, list, true, opts); err != nil {
			return apitype.SessionOptions{}, err
		}
	}
	if err := d.st.SetKeyOptions(k, opts); err != nil {
		return apitype.SessionOptions{}, err
	}
	d.mu.Lock()
	if len(opts) == 0 {
		delete(d.keyOpts, k)
	} else {
		d.keyOpts[k] = maps.Clone(opts)
	}
	d.mu.Unlock()
	d.log.Info("session options set", zap.String("key", k.String()), zap.Any("options", opts))
	return d.SessionOptions(k)
}

// probeOptions checks, once at startup and in the background, the session
// options of every binding that sets some against what its agent lists for
// a new session: a typo shows in the log and in health right away rather
// than at the binding's first turn. The probe's process runs beside the
// pool's and is stopped at once; an agent that cannot start is left to its
// first turn to report.
func (d *Daemon) probeOptions(ctx context.Context) {
	for _, b := range d.cfg.Bindings {
		if len(b.SessionOptions) == 0 {
			continue
		}
		d.probes.Add(1)
		go func() {
			defer d.probes.Done()
			d.probeBinding(ctx, b)
		}()
	}
}

func (d *Daemon) probeBinding(ctx context.Context, b config.Binding) {
	log := d.log.Named("options").With(zap.String("binding", b.ID))
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	spec, release, err := d.agentSpec(session.Key{Channel: "-", Binding: b.ID}, b, false)
	if err != nil {
		log.Info("session options not checked at startup: the agent's spec", zap.Error(err))
		return
	}
	defer release()
	a, err := acp.Start(ctx, spec, log)
	if err != nil {
		log.Info("session options not checked at startup: the agent did not start; its first turn will say why", zap.Error(err))
		return
	}
	defer a.Close()
	native, err := a.NewSession(ctx)
	if err != nil {
		log.Info("session options not checked at startup: session/new failed; the binding's first turn will say why", zap.Error(err))
		return
	}
	list, listed := a.Options(native)
	d.noteListing(b.ID, list, listed)
	if err := checkOptions(b, list, listed, b.SessionOptions); err != nil {
		d.optionFailed(b.ID, err)
		log.Error("session options of this binding are not ones its agent lists; its turns will fail until the config is fixed", zap.Error(err))
		return
	}
	log.Info("session options checked against the agent", zap.Int("options", len(b.SessionOptions)))
}
