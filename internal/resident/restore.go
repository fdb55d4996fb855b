package resident

import (
	"context"
	"fmt"
	"sort"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.uber.org/zap"

	"github.com/residentd/residentd/apitype"
	"github.com/residentd/residentd/internal/acp"
	"github.com/residentd/residentd/internal/config"
	"github.com/residentd/residentd/internal/tracing"
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
func (kp *Keeper) restore(ctx context.Context, a *acp.Agent, b config.Binding, native string, log *zap.Logger) (string, error) {
	binding := b.ID
	if kp.RestoreStopped(binding) {
		return "", nil
	}
	ways := restoreWays(a, b.RestoreMethod)
	if len(ways) == 0 && b.RestoreMethod != config.RestoreAuto {
		kp.warnOnce("restore_method:"+binding, func() {
			log.Warn("the binding's restore_method is one its agent does not offer: its new processes start cold", zap.String("restore_method", b.RestoreMethod), zap.Bool("agent_resumes", a.CanResume()), zap.Bool("agent_loads", a.CanLoad()))
		})
	}
	var last error
	note := restoreNote(ctx)
	timeout := time.Duration(kp.conf().RestoreTimeout)
	for i, w := range ways {
		t0 := kp.now()
		note(w.method)
		sctx, span := tracing.Start(ctx, "restore")
		wctx, cancel := context.WithTimeout(sctx, timeout)
		err := w.call(wctx, native)
		timedOut := err != nil && ctx.Err() == nil && wctx.Err() != nil
		cancel()
		if span.IsRecording() {
			outcome := "ok"
			switch {
			case timedOut:
				outcome = "timeout"
			case err != nil:
				outcome = "failed"
				span.SetStatus(codes.Error, err.Error())
			}
			span.SetAttributes(attribute.String("residentd.restore.method", w.method), attribute.String("residentd.restore.outcome", outcome),
				attribute.String("residentd.native_session", native))
		}
		span.End()
		if err == nil {
			kp.m.ObserveSessionReady(w.method, kp.now().Sub(t0))
			kp.m.Restore(w.method, true)
			kp.restoreWorked(binding)
			log.Info("session restored", zap.String("native", native), zap.String("method", w.method), zap.Int("pid", a.Pid()))
			return w.method, nil
		}
		last = err
		next := "starting a new session"
		if i+1 < len(ways) {
			next = "trying session/" + ways[i+1].method
		}
		if timedOut {
			kp.m.RestoreTimedOut(w.method)
			err = fmt.Errorf("session/%s did not answer within restore_timeout %s: %w", w.method, timeout, err)
			last = err
			log.Warn("session/"+w.method+" did not answer within restore_timeout; "+next, zap.String("native", native), zap.Duration("restore_timeout", timeout))
		} else {
			kp.m.Restore(w.method, false)
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
			kp.restoreFailed(binding, err, log)
			return "", err
		default:
		}
	}
	if last != nil {
		note("new")
		kp.restoreFailed(binding, last, log)
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
func (kp *Keeper) RestoreStopped(binding string) bool {
	kp.mu.Lock()
	defer kp.mu.Unlock()
	h := kp.health[binding]
	return h != nil && h.restoreStop
}

func (kp *Keeper) restoreWorked(binding string) {
	kp.mu.Lock()
	kp.of(binding).restore.ok()
	kp.mu.Unlock()
}

func (kp *Keeper) restoreFailed(binding string, err error, log *zap.Logger) {
	kp.mu.Lock()
	h := kp.of(binding)
	n := h.restore.fail(err)
	stop := !h.restoreStop && n >= kp.conf().RestoreFailures
	if stop {
		h.restoreStop = true
	}
	kp.mu.Unlock()
	if stop {
		kp.m.RestoreStopped.WithLabelValues(binding).Set(1)
		log.Warn("session restores of this binding keep failing; not trying them again until the daemon restarts: its new processes start cold",
			zap.Int("failures", n), zap.Int("restore_failures", kp.conf().RestoreFailures), zap.Error(err))
	}
}

// RestoreStops lists the bindings whose restores stopped, by id.
func (kp *Keeper) RestoreStops() []apitype.RestoreStop {
	kp.mu.Lock()
	defer kp.mu.Unlock()
	var out []apitype.RestoreStop
	for id, h := range kp.health {
		if h.restoreStop {
			out = append(out, apitype.RestoreStop{Binding: id, Failures: h.restore.n, LastError: h.restore.last})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Binding < out[j].Binding })
	return out
}
