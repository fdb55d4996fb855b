package resident

import (
	"context"
	"time"

	"go.uber.org/zap"

	"github.com/residentd/residentd/apitype"
	"github.com/residentd/residentd/internal/acp"
)

// askStatus asks the agent, where it serves session/status (ACP v2,
// unstable), about the saved session native before any way reopens it. It
// reports whether the session is gone: the agent does not know it, so no
// way is tried (none would succeed, and a way may only time out) and it is
// not kept. A session another process has open is reported — the log, the
// waiting run, the restore report — and the ladder goes on. An agent that
// does not answer in restore_timeout, or answers an error, is asked
// nothing more here: the ways decide.
func (kp *Keeper) askStatus(ctx context.Context, l *ladder, native string) (gone bool) {
	a := l.ap.a
	if !a.CanStatus() {
		return false
	}
	sctx, cancel := context.WithTimeout(ctx, time.Duration(kp.conf().RestoreTimeout))
	defer cancel()
	start := time.Now()
	st, err := a.SessionStatus(sctx, native)
	step := apitype.RestoreStep{Method: "status", Native: native, Pid: a.Pid(), Seconds: time.Since(start).Seconds()}
	note := restoreNote(ctx)
	switch {
	case err != nil:
		l.log.Info("session/status before the restore failed; the ways decide", zap.String("native", native), zap.Error(err))
		return false
	case st == acp.StatusGone:
		step.Result, step.Message = apitype.RestoreUnknown, "session/status: the agent does not know the session"
		l.log.Warn("session/status: the agent does not know the key's saved session; it is neither resumed nor loaded", zap.String("native", native))
	case st == acp.StatusOpen:
		step.Result, step.Message = apitype.RestoreOpen, "session/status: another process has the session open"
		l.log.Warn("session/status: the key's saved session is open in another process of the agent; resuming it here", zap.String("native", native))
	default:
		step.Result = apitype.RestoreOK
		l.report.Steps = append(l.report.Steps, step)
		return false
	}
	l.report.Steps = append(l.report.Steps, step)
	note(apitype.Event{Event: apitype.EventRestoring, Method: "status", Native: native, Pid: a.Pid(), Result: step.Result, Message: step.Message})
	return st == acp.StatusGone
}
