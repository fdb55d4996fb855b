package daemon

import (
	"context"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/zap"

	"github.com/residentd/residentd/apitype"
	"github.com/residentd/residentd/internal/run"
	"github.com/residentd/residentd/internal/tracing"
)

// asker routes a native session's permission requests to its running run.
type asker struct {
	r       *run.Run
	ctx     context.Context // the turn's: a cancel answers pending requests cancelled
	timeout time.Duration
}

// askThrough routes the permission requests of native to r while the turn
// runs; the returned func ends that.
func (d *Daemon) askThrough(native string, r *run.Run, ctx context.Context, timeout time.Duration) func() {
	a := &asker{r: r, ctx: ctx, timeout: timeout}
	d.mu.Lock()
	d.asking[native] = a
	d.mu.Unlock()
	return func() {
		d.mu.Lock()
		if d.asking[native] == a {
			delete(d.asking, native)
		}
		d.mu.Unlock()
	}
}

// ask is every agent's acp.AskFunc: a request of a session with no running
// turn (an agent asking out of turn) is answered cancelled.
func (d *Daemon) ask(ctx context.Context, native string, tc apitype.ToolCall, options []apitype.PermissionOption) string {
	d.mu.Lock()
	a := d.asking[native]
	d.mu.Unlock()
	if a == nil {
		d.log.Warn("permission request outside a turn; answered cancelled", zap.String("native", native), zap.String("tool", tc.Title))
		return ""
	}
	actx, cancel := context.WithCancel(a.ctx)
	defer cancel()
	stop := context.AfterFunc(ctx, cancel) // the agent withdrew the request
	defer stop()
	// The request's span lasts until its answer.
	_, span := tracing.Start(a.ctx, "permission")
	dec := a.r.Decide(actx, tc, options, a.timeout)
	id, by := dec.OptionID, dec.DecidedBy
	if span.IsRecording() {
		span.SetAttributes(attribute.String("residentd.tool.id", tc.ID), attribute.String("residentd.tool.kind", tc.Kind), attribute.String("residentd.tool.title", tc.Title),
			attribute.String("residentd.permission.decided_by", by), attribute.String("residentd.permission.option", id),
			attribute.String("residentd.permission.answered_by", dec.AnsweredBy))
	}
	span.End()
	lvl := zap.InfoLevel
	if by == apitype.DecidedByLimit {
		lvl = zap.DebugLevel // an agent flooding requests does not flood the log; the run's events say it
	}
	d.log.Log(lvl, "permission decided", append([]zap.Field{zap.String("run", a.r.ID), zap.String("tool", tc.Title), zap.String("option", id), zap.String("decided_by", by),
		zap.String("answered_by", dec.AnsweredBy)}, tracing.LogFields(trace.SpanFromContext(a.ctx))...)...)
	return id
}
