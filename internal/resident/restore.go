package resident

import (
	"context"
	"fmt"
	"sort"
	"time"

	"go.uber.org/zap"

	"github.com/residentd/residentd/apitype"
	"github.com/residentd/residentd/internal/acp"
	"github.com/residentd/residentd/internal/config"
)

// restoreWay is one way to reopen a saved session.
type restoreWay struct {
	method string
	call   func(context.Context, string) error
}

// restoreWays are the ways a new process may reopen a saved session, in
// the order they are tried: resume (the agent reopens it without replaying
// it), then load (it replays the history, which residentd swallows); a
// binding's restore_method may keep only one of them.
func restoreWays(a *acp.Agent, method string) []restoreWay {
	var out []restoreWay
	if a.CanResume() && method != config.RestoreLoad {
		out = append(out, restoreWay{"resume", a.ResumeSession})
	}
	if a.CanLoad() && method != config.RestoreResume {
		out = append(out, restoreWay{"load", a.LoadSession})
	}
	return out
}

// restore reopens native on a with the first way that works and says which
// ("" when none did or none was tried: the turn goes cold). Each failure is
// logged with the way that failed; restore_failures failed restores in a row
// stop a binding's restores for the rest of the daemon's run.
func (d *Keeper) restore(ctx context.Context, a *acp.Agent, b config.Binding, native string, log *zap.Logger) (string, error) {
	binding := b.ID
	if d.RestoreStopped(binding) {
		return "", nil
	}
	ways := restoreWays(a, b.RestoreMethod)
	if len(ways) == 0 && b.RestoreMethod != config.RestoreAuto {
		d.warnOnce("restore_method:"+binding, func() {
			log.Warn("the binding's restore_method is one its agent does not offer: its new processes start cold", zap.String("restore_method", b.RestoreMethod), zap.Bool("agent_resumes", a.CanResume()), zap.Bool("agent_loads", a.CanLoad()))
		})
	}
	var last error
	note := restoreNote(ctx)
	timeout := time.Duration(d.conf().RestoreTimeout)
	for i, w := range ways {
		t0 := d.now()
		note(w.method)
		wctx, cancel := context.WithTimeout(ctx, timeout)
		err := w.call(wctx, native)
		timedOut := err != nil && ctx.Err() == nil && wctx.Err() != nil
		cancel()
		if err == nil {
			d.m.ObserveSessionReady(w.method, d.now().Sub(t0))
			d.m.Restore(w.method, true)
			d.restoreWorked(binding)
			log.Info("session restored", zap.String("native", native), zap.String("method", w.method), zap.Int("pid", a.Pid()))
			return w.method, nil
		}
		last = err
		next := "starting a new session"
		if i+1 < len(ways) {
			next = "trying session/" + ways[i+1].method
		}
		if timedOut {
			d.m.RestoreTimedOut(w.method)
			err = fmt.Errorf("session/%s did not answer within restore_timeout %s: %w", w.method, timeout, err)
			last = err
			log.Warn("session/"+w.method+" did not answer within restore_timeout; "+next, zap.String("native", native), zap.Duration("restore_timeout", timeout))
		} else {
			d.m.Restore(w.method, false)
			log.Warn("session/"+w.method+" failed; "+next, zap.String("native", native), zap.Error(err))
		}
		if ctx.Err() != nil {
			return "", ctx.Err() // the turn's end, not the agent's failure
		}
		select {
		case <-a.Done():
			// A saved session that kills its agent counts too, so the key
			// does not fail every turn forever: restore_failures of them
			// and its next process starts cold.
			err := fmt.Errorf("agent exited during session/%s: %w", w.method, a.ExitErr())
			d.restoreFailed(binding, err, log)
			return "", err
		default:
		}
	}
	if last != nil {
		note("new")
		d.restoreFailed(binding, last, log)
	}
	return "", nil
}

// restoreNoteKey carries, in a spawn's context, what tells the waiting run
// how its restore goes.
type restoreNoteKey struct{}

// WithRestoreNote makes restores under ctx call note with each method
// they try ("new" when they fall back to a new session).
func WithRestoreNote(ctx context.Context, note func(method string)) context.Context {
	return context.WithValue(ctx, restoreNoteKey{}, note)
}

func restoreNote(ctx context.Context) func(string) {
	if f, ok := ctx.Value(restoreNoteKey{}).(func(string)); ok {
		return f
	}
	return func(string) {}
}

// RestoreStopped reports whether binding's restores stopped.
func (d *Keeper) RestoreStopped(binding string) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	h := d.health[binding]
	return h != nil && h.restoreStop
}

func (d *Keeper) restoreWorked(binding string) {
	d.mu.Lock()
	d.of(binding).restore.ok()
	d.mu.Unlock()
}

func (d *Keeper) restoreFailed(binding string, err error, log *zap.Logger) {
	d.mu.Lock()
	h := d.of(binding)
	n := h.restore.fail(err)
	stop := !h.restoreStop && n >= d.conf().RestoreFailures
	if stop {
		h.restoreStop = true
	}
	d.mu.Unlock()
	if stop {
		d.m.RestoreStopped.WithLabelValues(binding).Set(1)
		log.Warn("session restores of this binding keep failing; not trying them again until the daemon restarts: its new processes start cold",
			zap.Int("failures", n), zap.Int("restore_failures", d.conf().RestoreFailures), zap.Error(err))
	}
}

// RestoreStops lists the bindings whose restores stopped, by id.
func (d *Keeper) RestoreStops() []apitype.RestoreStop {
	d.mu.Lock()
	defer d.mu.Unlock()
	var out []apitype.RestoreStop
	for id, h := range d.health {
		if h.restoreStop {
			out = append(out, apitype.RestoreStop{Binding: id, Failures: h.restore.n, LastError: h.restore.last})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Binding < out[j].Binding })
	return out
}
