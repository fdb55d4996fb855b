package resident

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync/atomic"
	"time"

	sdk "github.com/coder/acp-go-sdk"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.uber.org/zap"

	"github.com/residentd/residentd/apitype"
	"github.com/residentd/residentd/internal/acp"
	"github.com/residentd/residentd/internal/config"
	"github.com/residentd/residentd/internal/session"
	"github.com/residentd/residentd/internal/store"
	"github.com/residentd/residentd/internal/tracing"
	"github.com/residentd/residentd/internal/workspace"
)

// A restore reopens a key's saved native session on a new process. Its
// rules:
//
//   - A way (session/resume, then session/load) is given up when the agent
//     has sent nothing of the session for restore_timeout: every update it
//     sends for it (each message a load replays) is progress and starts the
//     wait again. A way that keeps reporting is given up at ceiling times
//     restore_timeout in all.
//   - A process whose way was given up for time is asked nothing more (its
//     state is unknown): the session it may still be opening is closed
//     (session/close, where the agent has it) and the process stopped; the
//     next way runs on a spare or a new process, once the stopped one is
//     gone, and so does a new session when no way is left. A way the agent
//     answered with an error goes on on the same process.
//   - A saved session is forgotten only when the agent says it does not
//     know it. One the ladder gave up otherwise is set aside (the store's
//     Aside): the turn goes on a new session (a stand-in, the key's native
//     id meanwhile), and the key's next restore tries the set-aside one
//     first; reopened, its first turn carries the stored turns it missed.
//     It is dropped when restore_failures restores in a row gave it up.

// ceiling is how many restore_timeouts a way that keeps reporting progress
// is given in all.
const ceiling = 10

// Why a way's wait ended before the agent answered.
var (
	errNoProgress = errors.New("no sign of progress")
	errCeiling    = errors.New("past the ceiling")
	// errSessionGone: session/status said the agent does not know it.
	errSessionGone = errors.New("session/status: the agent does not know the session")
)

// restoreWay is one way to reopen a saved session, on whichever process
// the ladder is on.
type restoreWay struct {
	method string
	call   func(*acp.Agent, context.Context, string) error
}

// restoreWays are the ways a new process may reopen a saved session, in
// the order they are tried: resume (the agent reopens it without replaying
// it), then load (it replays the history, which residentd swallows); a
// binding's restore_method may keep only one of them.
func restoreWays(a *acp.Agent, method string) []restoreWay {
	var out []restoreWay
	if a.CanResume() && method != config.RestoreLoad {
		out = append(out, restoreWay{"resume", (*acp.Agent).ResumeSession})
	}
	if a.CanLoad() && method != config.RestoreResume {
		out = append(out, restoreWay{"load", (*acp.Agent).LoadSession})
	}
	return out
}

// candidate is a saved session a restore may reopen.
type candidate struct {
	native string
	aside  *store.Aside // the key's set-aside session; nil for its native id
}

// ladder is one spawn's restore: the process its next way runs on (another
// once a way timed out on it), and what the key's sessions need on each.
type ladder struct {
	k    session.Key
	b    config.Binding
	log  *zap.Logger
	ap   *agentProc
	pre  *preopened // the session ap opened ahead as a spare, nil without one
	hook func()     // the pool's exit hook, for each process the key gets
	rel  *releases
	mcp  []sdk.McpServer // the key's servers, for each process's requests
	// keyRelease revokes the key's servers (keyServers); nil before they
	// were issued, or once revoked.
	keyRelease func()

	wt      *workspace.Record // the key's worktree the last way reopened in; nil: the binding's dir
	tainted bool              // ap's last way timed out: nothing more is asked of it
	gone    <-chan struct{}   // the exit of the process given up last, nil when none
	report  apitype.RestoreReport
}

// restored is how a restore ended: how (resume, load; "" when it did not)
// and which session, the turns it missed, and whether its id is still to
// be saved as the key's.
type restored struct {
	how, native string
	missed      int
	unsaved     bool
}

// restoreCandidates are the sessions l's key restores, in order: a
// binding's exact saved_session alone; else, with restores on, the key's
// set-aside session, then its native id. saved: the key has a saved
// session, tried or not. A binding whose restores stopped tries none: the
// key's saved session is set aside, and the run told so.
func (kp *Keeper) restoreCandidates(ctx context.Context, l *ladder) (cands []candidate, saved bool, err error) {
	k, b := l.k, l.b
	var native string
	var aside store.Aside
	var ok bool
	switch {
	case b.SavedSession != "":
		cands = []candidate{{native: b.SavedSession}}
	case b.RestoreOn() && b.KeepsSession():
		if native, err = kp.st.NativeID(k); err != nil {
			return nil, false, fmt.Errorf("read saved session: %w", err)
		}
		if aside, ok, err = kp.st.Aside(k); err != nil {
			return nil, false, fmt.Errorf("read saved session: %w", err)
		}
		if ok {
			cands = append(cands, candidate{native: aside.Native, aside: &aside})
		}
		if native != "" && (!ok || native != aside.Native) {
			cands = append(cands, candidate{native: native})
		}
	}
	if len(cands) == 0 || !kp.RestoreStopped(b.ID) {
		return cands, len(cands) > 0, nil
	}
	var kept string
	switch {
	case b.SavedSession != "": // the binding names it: nothing to keep
	case ok:
		kept = aside.Native
	default:
		if _, err := kp.st.SetAside(k, native, "session restores of this binding stopped", kp.now()); err != nil {
			l.log.Error("the key's saved session could not be set aside: its next turn replaces it", zap.String("native", native), zap.Error(err))
		} else {
			kept = native
		}
	}
	l.report.SetAside = kept
	l.report.Message = "session restores of this binding stopped after restore_failures failures in a row: none was tried, a new session opens"
	restoreNote(ctx)(apitype.Event{Event: apitype.EventRestoring, Method: "new", SetAside: kept, Message: l.report.Message})
	l.log.Info("restores of this binding stopped: the key's saved session is kept aside for a restore after the daemon restarts", zap.String("set_aside", kept))
	return nil, true, nil
}

// restore reopens the first candidate it can on l's process (another one
// once a way timed out) and says how; a zero restored: none was reopened
// (or none tried) and the turn goes cold, on l.ap. Each way that fails is
// logged, noted to the waiting run and kept in l.report; restore_failures
// restores in a row that reopen nothing stop the binding's restores for
// the rest of the daemon's run.
func (kp *Keeper) restore(ctx context.Context, l *ladder, cands []candidate) (restored, error) {
	binding := l.b.ID
	note := restoreNote(ctx)
	var last error
	tried := false
	for ci, c := range cands {
		ways := restoreWays(l.ap.a, l.b.RestoreMethod)
		if len(ways) == 0 && l.b.RestoreMethod != config.RestoreAuto {
			kp.warnOnce("restore_method:"+binding, func() {
				l.log.Warn("the binding's restore_method is one its agent does not offer: its new processes start cold", zap.String("restore_method", l.b.RestoreMethod),
					zap.Bool("agent_resumes", l.ap.a.CanResume()), zap.Bool("agent_loads", l.ap.a.CanLoad()))
			})
		}
		var timedOut, unknown bool
		if len(ways) > 0 {
			if err := kp.freshProcess(ctx, l); err != nil {
				return restored{}, err
			}
			if kp.askStatus(ctx, l, c.native) {
				tried = true
				kp.notReopened(l, c, true, errSessionGone)
				continue
			}
		}
		for i, w := range ways {
			tried = true
			if err := kp.freshProcess(ctx, l); err != nil {
				return restored{}, err
			}
			// The session reopens in the cwd it was opened with.
			wt, err := kp.reopenIn(ctx, l.ap.a, l.k, c.native)
			if err != nil {
				return restored{}, err
			}
			l.wt = wt
			res, err := kp.way(ctx, l, w, c.native)
			if err == nil {
				return kp.reopened(l, c, w.method)
			}
			last = err
			if ctx.Err() != nil {
				return restored{}, ctx.Err() // the turn's end, not the agent's failure
			}
			next := "starting a new session"
			if i+1 < len(ways) {
				next = "trying session/" + ways[i+1].method
			}
			switch res {
			case apitype.RestoreExited:
				// A saved session that kills its agent counts too, so the
				// key does not fail every turn forever: restore_failures of
				// them and its next process starts cold.
				kp.restoreFailed(binding, err, l.log)
				return restored{}, err
			case apitype.RestoreTimeout:
				timedOut = true
				l.log.Warn("session/"+w.method+" gave no sign of progress within restore_timeout; its process is stopped and "+next+" on another",
					zap.String("native", c.native), zap.Int("pid", l.ap.a.Pid()), zap.Error(err))
				kp.abandon(l)
			case apitype.RestoreUnknown:
				unknown = true
				l.log.Warn("session/"+w.method+": the agent does not know the session; "+next, zap.String("native", c.native), zap.Error(err))
			default:
				l.log.Warn("session/"+w.method+" failed; "+next, zap.String("native", c.native), zap.Error(err))
			}
		}
		if len(ways) == 0 {
			continue
		}
		kp.notReopened(l, c, unknown, last)
		if timedOut {
			// An agent this slow now: a new session, the next candidate
			// another time. A stand-in (the key's native id while its
			// saved session is aside) is not tried: everything it answered
			// is in the conversation, which the new session is given.
			for _, o := range cands[ci+1:] {
				l.log.Info("the key's newer session is not tried after a timeout; the new session replaces it", zap.String("native", o.native))
			}
			break
		}
	}
	if !tried {
		return restored{}, nil
	}
	// A new session: on a process that was asked nothing it did not answer.
	if err := kp.freshProcess(ctx, l); err != nil {
		return restored{}, err
	}
	note(apitype.Event{Event: apitype.EventRestoring, Method: "new", SetAside: l.report.SetAside})
	if last != nil {
		kp.restoreFailed(binding, last, l.log)
	}
	return restored{}, nil
}

// way runs one way of reopening native on l's process, bounded by
// progress, and returns how it ended (an apitype.Restore* result) and the
// error when it did not reopen it. The waiting run hears of its start and,
// unless it reopened the session, of its end; l.report keeps it.
func (kp *Keeper) way(ctx context.Context, l *ladder, w restoreWay, native string) (string, error) {
	a := l.ap.a
	idle := time.Duration(kp.conf().RestoreTimeout)
	note := restoreNote(ctx)
	note(apitype.Event{Event: apitype.EventRestoring, Method: w.method, Native: native, Pid: a.Pid()})
	t0, start := kp.now(), time.Now()
	sctx, span := tracing.Start(ctx, "restore")
	wctx, progress, stop := boundByProgress(sctx, idle, ceiling*idle)
	err := w.call(a, acp.WithProgress(wctx, progress), native)
	cause := stop()
	res := apitype.RestoreOK
	switch {
	case err == nil:
	case ctx.Err() != nil:
		res = apitype.RestoreFailed // the turn ended; the caller returns its error
	case cause != nil:
		res = apitype.RestoreTimeout
		how := fmt.Sprintf("no sign of progress for restore_timeout %s", idle)
		if errors.Is(cause, errCeiling) {
			how = fmt.Sprintf("not done after %d times restore_timeout %s, though it reported progress", ceiling, idle)
		}
		err = fmt.Errorf("session/%s of %q: %s; given up, its process stopped", w.method, native, how)
	case isExited(a):
		res = apitype.RestoreExited
		err = fmt.Errorf("agent exited during session/%s: %w", w.method, a.ExitErr())
	case errors.Is(err, acp.ErrUnknownSession):
		res = apitype.RestoreUnknown
	default:
		res = apitype.RestoreFailed
	}
	if span.IsRecording() {
		if res != apitype.RestoreOK {
			span.SetStatus(codes.Error, err.Error())
		}
		span.SetAttributes(attribute.String("residentd.restore.method", w.method), attribute.String("residentd.restore.outcome", res),
			attribute.String("residentd.native_session", native), attribute.Int("residentd.pid", a.Pid()))
	}
	span.End()
	step := apitype.RestoreStep{Method: w.method, Native: native, Pid: a.Pid(), Result: res, Seconds: time.Since(start).Seconds()}
	switch res {
	case apitype.RestoreOK:
		kp.m.ObserveSessionReady(w.method, kp.now().Sub(t0))
		kp.m.Restore(w.method, true)
	case apitype.RestoreTimeout:
		kp.m.RestoreTimedOut(w.method)
	case apitype.RestoreUnknown:
		kp.m.SessionRestores.WithLabelValues(w.method, apitype.RestoreUnknown).Inc()
	default:
		kp.m.Restore(w.method, false)
	}
	if err != nil {
		step.Message = err.Error()
		if ctx.Err() == nil {
			note(apitype.Event{Event: apitype.EventRestoring, Method: w.method, Native: native, Pid: a.Pid(), Result: res, Message: step.Message})
		}
	}
	l.report.Steps = append(l.report.Steps, step)
	return res, err
}

// isExited reports whether a's process is gone.
func isExited(a *acp.Agent) bool {
	select {
	case <-a.Done():
		return true
	default:
		return false
	}
}

// reopened ends a restore that reopened c with method on l.ap: a set-aside
// session gets its watermarks back and is told the turns it missed, and
// its id is the key's again with its first turn.
func (kp *Keeper) reopened(l *ladder, c candidate, method string) (restored, error) {
	kp.restoreWorked(l.b.ID)
	out := restored{how: method, native: c.native}
	if c.aside != nil {
		out.unsaved = true
		n, err := kp.st.TurnsSince(l.k, c.aside.Since)
		if err != nil {
			return restored{}, err
		}
		out.missed = n
		l.report.CaughtUp = n
		if err := kp.st.InheritWatermarks(l.k, c.native, c.aside.Watermarks); err != nil {
			// Without them its first turn shows a snapshot, as a new
			// session's would.
			l.log.Warn("the set-aside session's watermarks were not put back", zap.String("native", c.native), zap.Error(err))
		}
		l.log.Info("the key's set-aside session reopened: its first turn carries the turns it missed", zap.String("native", c.native), zap.Int("missed", n),
			zap.Time("set_aside_at", c.aside.At))
	}
	l.log.Info("session restored", zap.String("native", c.native), zap.String("method", method), zap.Int("pid", l.ap.a.Pid()))
	return out, nil
}

// notReopened records what a restore that could not reopen c keeps of it:
// nothing when the agent said it does not know it; else it is set aside
// for the key's next restore (one more try of the one aside already),
// until restore_failures restores in a row gave it up.
func (kp *Keeper) notReopened(l *ladder, c candidate, unknown bool, why error) {
	if c.aside == nil && l.b.SavedSession != "" {
		return // the binding names it: every process tries it again
	}
	if unknown {
		l.report.Forgotten = append(l.report.Forgotten, c.native)
		if c.aside != nil {
			if err := kp.st.DropAside(l.k, c.native); err != nil {
				l.log.Warn("drop the set-aside session", zap.String("native", c.native), zap.Error(err))
			}
		}
		l.log.Warn("the agent does not know the key's saved session: it is not kept", zap.String("native", c.native))
		return
	}
	if l.report.SetAside != "" {
		// One aside a key: the older one is kept, and the new session
		// replaces this one (a stand-in: its turns are in the conversation).
		l.log.Info("the key's newer session is not set aside: its set-aside one is kept, and the new session replaces it", zap.String("native", c.native),
			zap.String("set_aside", l.report.SetAside))
		return
	}
	reason := "not reopened"
	if why != nil {
		reason = why.Error()
	}
	a, err := kp.st.SetAside(l.k, c.native, reason, kp.now())
	if err != nil {
		l.log.Error("the key's saved session could not be set aside: the new session replaces it", zap.String("native", c.native), zap.Error(err))
		return
	}
	if a.Native == c.native && a.Tries >= kp.conf().RestoreFailures {
		if err := kp.st.DropAside(l.k, c.native); err != nil {
			l.log.Warn("drop the set-aside session", zap.String("native", c.native), zap.Error(err))
		}
		l.report.Forgotten = append(l.report.Forgotten, c.native)
		l.log.Warn("the key's set-aside session was given up by restore_failures restores in a row: it is not kept", zap.String("native", c.native),
			zap.Int("tries", a.Tries), zap.Time("set_aside_at", a.At))
		return
	}
	l.report.SetAside = a.Native
	l.log.Warn("the key's saved session is set aside for its next restore: the agent did not say it is gone", zap.String("set_aside", a.Native),
		zap.Int("tries", a.Tries), zap.Uint64("since_turn", a.Since), zap.String("reason", reason))
}

// abandon gives up l's process after a way timed out on it: its exit is
// no longer the key's, and it is closed (session/close for what it may
// still be opening, then the stop sequence) off the turn's path.
func (kp *Keeper) abandon(l *ladder) {
	ap := l.ap
	ap.unbind()
	l.tainted, l.gone, l.pre = true, ap.a.Done(), nil
	stop := func(context.Context) { _ = ap.a.Close() }
	if !kp.goBg(stop) {
		stop(nil)
	}
}

// freshProcess gives the ladder another process when its own was given up:
// the binding's spare, else a new one, bound to the key and given its
// servers; before it returns, the process given up is gone, so no two of
// the key's processes hold one session.
func (kp *Keeper) freshProcess(ctx context.Context, l *ladder) error {
	if !l.tainted {
		return nil
	}
	var ap *agentProc
	for ap == nil {
		if ap = kp.takeSpare(l.b.ID); ap == nil {
			break
		}
		if !fits(&ap.started, &l.b, ap.a.Info()) {
			kp.stopEach([]*agentProc{ap}, "reload")
			ap = nil
			continue
		}
		if !ap.bind(l.k, l.log, l.hook) {
			ap = nil
		}
	}
	if ap == nil {
		kp.makeRoom()
		var err error
		if ap, err = kp.startAgent(ctx, l.b, l.k, l.log); err != nil {
			l.rel.run() // no process of the key's carries what they revoke
			return err
		}
		if !ap.bind(l.k, l.log, l.hook) {
			l.rel.run()
			return fmt.Errorf("agent pid %d exited before its session opened: %w", ap.a.Pid(), ap.a.ExitErr())
		}
	}
	l.ap, l.pre, l.tainted = ap, ap.takePre(), false
	if l.pre != nil {
		l.rel.add(l.pre.release)
	}
	ap.a.SetMCPServers(l.mcp)
	l.log.Info("the restore goes on on another agent process", zap.Int("pid", ap.a.Pid()))
	if l.gone != nil {
		select {
		case <-l.gone:
		case <-ctx.Done():
			return ctx.Err()
		}
		l.gone = nil
	}
	return nil
}

// boundByProgress is ctx ended when idle passes with no progress (the
// returned progress marks one) or ceiling passes in all; stop releases it
// and returns errNoProgress or errCeiling when one of them ended it.
func boundByProgress(ctx context.Context, idle, ceiling time.Duration) (context.Context, func(), func() error) {
	wctx, cancel := context.WithCancelCause(ctx)
	start := time.Now()
	var last atomic.Int64 // the last progress, as time since start
	done := make(chan struct{})
	go func() {
		t := time.NewTimer(idle)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-wctx.Done():
				return
			case <-t.C:
			}
			elapsed := time.Since(start)
			quiet := elapsed - time.Duration(last.Load())
			switch {
			case elapsed >= ceiling:
				cancel(errCeiling)
				return
			case quiet >= idle:
				cancel(errNoProgress)
				return
			}
			t.Reset(min(idle-quiet, ceiling-elapsed))
		}
	}()
	progress := func() { last.Store(int64(time.Since(start))) }
	stop := func() error {
		close(done)
		cause := context.Cause(wctx)
		cancel(nil)
		if errors.Is(cause, errNoProgress) || errors.Is(cause, errCeiling) {
			return cause
		}
		return nil
	}
	return wctx, progress, stop
}

// restoreNoteKey carries, in a spawn's context, what tells the waiting run
// how its restore goes.
type restoreNoteKey struct{}

// WithRestoreNote makes restores under ctx call note with a restoring
// event for each way they try, for each that did not reopen the session,
// and for the new session they fall back to.
func WithRestoreNote(ctx context.Context, note func(apitype.Event)) context.Context {
	return context.WithValue(ctx, restoreNoteKey{}, note)
}

func restoreNote(ctx context.Context) func(apitype.Event) {
	if f, ok := ctx.Value(restoreNoteKey{}).(func(apitype.Event)); ok {
		return f
	}
	return func(apitype.Event) {}
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
