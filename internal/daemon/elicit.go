package daemon

import (
	"context"
	"errors"
	"fmt"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/zap"

	"github.com/residentd/residentd/apitype"
	"github.com/residentd/residentd/internal/run"
	"github.com/residentd/residentd/internal/tracing"
)

// ErrNotAnApprover: the binding's approvers do not include who answered.
var ErrNotAnApprover = errors.New("not an approver")

// elicitForm is every agent's acp.ElicitFunc: the form goes to the run of
// its session's running turn, as a permission request does, and waits the
// binding's permission_timeout; a form of a session with no running turn
// is cancelled.
func (d *Daemon) elicitForm(ctx context.Context, native string, req apitype.ElicitationRequest) apitype.ElicitationAnswer {
	d.mu.Lock()
	a := d.asking[native]
	d.mu.Unlock()
	if a == nil {
		d.log.Warn("elicitation outside a turn; answered cancel", zap.String("native", native))
		return apitype.ElicitationAnswer{Action: apitype.ElicitCancel}
	}
	actx, cancel := context.WithCancel(a.ctx)
	defer cancel()
	stop := context.AfterFunc(ctx, cancel) // the agent withdrew the form, or exited
	defer stop()
	_, span := tracing.Start(a.ctx, "elicitation")
	ans := a.r.Elicit(actx, req, a.timeout)
	if span.IsRecording() {
		span.SetAttributes(attribute.String("residentd.elicitation.id", ans.RequestID), attribute.String("residentd.elicitation.action", ans.Action),
			attribute.String("residentd.elicitation.decided_by", ans.DecidedBy), attribute.String("residentd.elicitation.answered_by", ans.AnsweredBy))
	}
	span.End()
	d.log.Info("elicitation answered", append([]zap.Field{zap.String("run", a.r.ID), zap.String("request", ans.RequestID), zap.String("action", ans.Action),
		zap.String("decided_by", ans.DecidedBy), zap.String("answered_by", ans.AnsweredBy)}, tracing.LogFields(trace.SpanFromContext(a.ctx))...)...)
	return ans
}

// AnswerElicitation answers elicitation request requestID of run runID;
// ans.AnsweredBy must be one of the binding's approvers.
func (d *Daemon) AnswerElicitation(runID, requestID string, ans apitype.ElicitationAnswer) error {
	r, err := d.approver(runID, ans.AnsweredBy)
	if err != nil {
		return err
	}
	return r.AnswerElicitation(requestID, ans)
}

// approver returns run runID when by may answer its requests: its
// binding's approvers (as the config in force says) allow by.
func (d *Daemon) approver(runID, by string) (*run.Run, error) {
	r, err := d.Run(runID)
	if err != nil {
		return nil, err
	}
	b, ok := d.conf().Binding(r.Key.Binding)
	if !ok {
		return r, nil // a removed binding's run: its requests go as they would have
	}
	if !b.Approvers.Allows(by, r.Author()) {
		who := fmt.Sprintf("%q", by)
		if by == "" {
			who = "an answer naming nobody (answered_by)"
		}
		return nil, fmt.Errorf("%w: %s may not answer run %q: binding %q takes answers from %s", ErrNotAnApprover, who, runID, b.ID, b.Approvers)
	}
	return r, nil
}
