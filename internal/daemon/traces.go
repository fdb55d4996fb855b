package daemon

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/residentd/residentd/apitype"
	"github.com/residentd/residentd/internal/tracing"
)

// toolSpans are a prompt's spans of the tool calls the agent reports
// (session/update tool_call, tool_call_update), by tool call id, and of
// the permission requests the binding's policy answered. A nil *toolSpans
// (the prompt is not traced) does nothing.
type toolSpans struct {
	ctx  context.Context // the prompt span's
	open map[string]trace.Span
	done map[string]bool
}

// newToolSpans is the tool call spans of the prompt whose span is prompt
// (in ctx), or nil when it is not traced.
func newToolSpans(ctx context.Context, prompt trace.Span) *toolSpans {
	if !prompt.IsRecording() {
		return nil
	}
	return &toolSpans{ctx: ctx, open: map[string]trace.Span{}, done: map[string]bool{}}
}

// update starts, updates or ends the span of the tool call u reports: it
// ends with the call's status completed or failed, or with the prompt.
func (t *toolSpans) update(u apitype.Update) {
	if t == nil || u.ToolCall == nil || (u.Kind != apitype.UpdateToolCall && u.Kind != apitype.UpdateToolUpdate) {
		return
	}
	tc := u.ToolCall
	if t.done[tc.ID] {
		return
	}
	s, ok := t.open[tc.ID]
	if !ok {
		_, s = tracing.Start(t.ctx, "tool call")
		s.SetAttributes(attribute.String("residentd.tool.id", tc.ID))
		if u.Subagent != "" {
			s.SetAttributes(attribute.String("residentd.subagent_session", u.Subagent))
		}
		t.open[tc.ID] = s
	}
	if tc.Kind != "" {
		s.SetAttributes(attribute.String("residentd.tool.kind", tc.Kind))
	}
	if tc.Title != "" {
		s.SetAttributes(attribute.String("residentd.tool.title", tc.Title))
	}
	if tc.Status != "" {
		s.SetAttributes(attribute.String("residentd.tool.status", tc.Status))
	}
	switch tc.Status {
	case "completed", "failed":
		if tc.Status == "failed" {
			s.SetStatus(codes.Error, "tool call failed")
		}
		s.End()
		delete(t.open, tc.ID)
		t.done[tc.ID] = true
	}
}

// decided records a permission request the binding's policy answered at
// once.
func (t *toolSpans) decided(d *apitype.PermissionDecision) {
	if t == nil || d == nil {
		return
	}
	_, s := tracing.Start(t.ctx, "permission")
	s.SetAttributes(attribute.String("residentd.tool.title", d.Tool), attribute.String("residentd.permission.decided_by", d.DecidedBy),
		attribute.String("residentd.permission.decision", d.Kind), attribute.String("residentd.permission.option", d.OptionID))
	s.End()
}

// end ends the spans of the tool calls still open when the prompt ends.
func (t *toolSpans) end() {
	if t == nil {
		return
	}
	for id, s := range t.open {
		s.End()
		delete(t.open, id)
	}
}

// usageAttrs puts what a turn used on its run's span: its shape, native
// session, tokens and cost (never its text).
func usageAttrs(span trace.Span, shape, native string, u apitype.Usage) {
	span.SetAttributes(attribute.String("residentd.shape", shape), attribute.String("residentd.native_session", native))
	if u.Unknown {
		return
	}
	span.SetAttributes(attribute.Int64("residentd.tokens.input", u.InputTokens), attribute.Int64("residentd.tokens.output", u.OutputTokens),
		attribute.Int64("residentd.tokens.cache_read", u.CacheReadTokens), attribute.Int64("residentd.tokens.cache_write", u.CacheWriteTokens))
	if u.Cost != nil {
		span.SetAttributes(attribute.Float64("residentd.cost", u.Cost.Float()), attribute.String("residentd.cost.currency", u.Currency))
	}
}

// endSpan ends span, failed with err's code when err is set.
func endSpan(span trace.Span, err error) {
	if err != nil && span.IsRecording() {
		span.SetAttributes(attribute.String("residentd.error_code", Code(err)))
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}
