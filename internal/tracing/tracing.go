// Package tracing owns the daemon's OpenTelemetry traces: the tracer
// provider built from the standard OTEL_* environment variables (OTLP over
// HTTP), its flush and shutdown, the W3C trace context a client or an agent
// exchanges with the daemon, and the one way the daemon's packages start a
// span, which costs nothing (no allocation) while tracing is off.
package tracing

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"

	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
	"go.uber.org/zap"
)

// Scope is the instrumentation scope of every span the daemon starts.
const Scope = "github.com/residentd/residentd"

// Provider is the daemon's tracer provider, or nil when tracing is off.
type Provider struct {
	tp *sdktrace.TracerProvider
}

// FromEnv builds the provider the OTEL_* environment asks for, or nil
// (tracing off) when it asks for none: OTEL_SDK_DISABLED=true,
// OTEL_TRACES_EXPORTER=none, or no OTLP endpoint
// (OTEL_EXPORTER_OTLP_ENDPOINT, OTEL_EXPORTER_OTLP_TRACES_ENDPOINT) and no
// OTEL_TRACES_EXPORTER=otlp. The exporter, the sampler (OTEL_TRACES_SAMPLER,
// OTEL_TRACES_SAMPLER_ARG), the batch processor (OTEL_BSP_*) and the
// resource (OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES) read the rest of
// the standard variables themselves. An exporter or protocol the daemon
// does not have (only otlp over http/protobuf) is an error.
func FromEnv(ctx context.Context, version string) (*Provider, error) {
	if strings.EqualFold(strings.TrimSpace(os.Getenv("OTEL_SDK_DISABLED")), "true") {
		return nil, nil
	}
	exp := strings.TrimSpace(os.Getenv("OTEL_TRACES_EXPORTER"))
	switch exp {
	case "none":
		return nil, nil
	case "", "otlp":
	default:
		return nil, fmt.Errorf("OTEL_TRACES_EXPORTER=%q: residentd exports traces with otlp (over http/protobuf) or none", exp)
	}
	if exp == "" && os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT") == "" && os.Getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") == "" {
		return nil, nil
	}
	for _, v := range []string{"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL"} {
		if p := os.Getenv(v); p != "" {
			if p != "http/protobuf" {
				return nil, fmt.Errorf("%s=%q: residentd exports traces over http/protobuf only", v, p)
			}
			break
		}
	}
	e, err := otlptracehttp.New(ctx)
	if err != nil {
		return nil, fmt.Errorf("OTLP trace exporter: %w", err)
	}
	return New(e, version, false), nil
}

// New is a provider exporting to e, batched (sync false) or span by span
// as each ends (sync true; tests).
func New(e sdktrace.SpanExporter, version string, sync bool) *Provider {
	// Read now, not once per process (resource.Default): later detectors
	// win, so OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES override the
	// name residentd.
	// A variable that does not parse leaves a partial resource and an
	// error: the partial one is used.
	res, _ := resource.New(context.Background(), resource.WithTelemetrySDK(),
		resource.WithAttributes(semconv.ServiceName("residentd"), semconv.ServiceVersion(version)), resource.WithFromEnv())
	if res == nil {
		res = resource.Default()
	}
	proc := sdktrace.WithBatcher(e)
	if sync {
		proc = sdktrace.WithSyncer(e)
	}
	return &Provider{tp: sdktrace.NewTracerProvider(proc, sdktrace.WithResource(res))}
}

// Tracer is the provider's tracer; nil (tracing off) for a nil provider.
func (p *Provider) Tracer() trace.Tracer {
	if p == nil {
		return nil
	}
	return p.tp.Tracer(Scope)
}

// ForceFlush exports every span that has ended.
func (p *Provider) ForceFlush(ctx context.Context) error {
	if p == nil {
		return nil
	}
	return p.tp.ForceFlush(ctx)
}

// Shutdown exports what is left and stops the provider. Idempotent.
func (p *Provider) Shutdown(ctx context.Context) error {
	if p == nil {
		return nil
	}
	if err := p.tp.Shutdown(ctx); err != nil && !errors.Is(err, context.Canceled) {
		return fmt.Errorf("trace provider shutdown: %w", err)
	}
	return nil
}

// None is a span that does nothing (not traced).
var None trace.Span = noop.Span{}

// Start starts span name as a child of ctx's span, with that span's
// tracer. With no recording span in ctx (tracing off, or a run that is not
// traced) it returns ctx and a span that does nothing, allocating nothing.
func Start(ctx context.Context, name string) (context.Context, trace.Span) {
	parent := trace.SpanFromContext(ctx)
	if !parent.IsRecording() {
		return ctx, noop.Span{}
	}
	return parent.TracerProvider().Tracer(Scope).Start(ctx, name)
}

// StartAfter starts span name as a child of parent, which may have ended
// (the output an agent sends after its turn), in a context of its own.
func StartAfter(parent trace.Span, name string) (context.Context, trace.Span) {
	sc := parent.SpanContext()
	if !sc.IsValid() || !sc.IsSampled() {
		return context.Background(), noop.Span{}
	}
	ctx := trace.ContextWithSpanContext(context.Background(), sc)
	return parent.TracerProvider().Tracer(Scope).Start(ctx, name)
}

// Root starts a run's root span with tracer t (nil: tracing off), as a
// child of the remote span that traceparent and tracestate name (W3C trace
// context; an invalid traceparent is ignored, as the standard says).
func Root(t trace.Tracer, name, traceparent, tracestate string) (context.Context, trace.Span) {
	ctx := context.Background()
	if t == nil {
		return ctx, noop.Span{}
	}
	if traceparent != "" {
		ctx = propagation.TraceContext{}.Extract(ctx, &carrier{traceparent, tracestate})
	}
	return t.Start(ctx, name)
}

// Meta is the W3C trace context of ctx's span, as _meta of an ACP request
// carries it (traceparent, tracestate), or nil when there is none.
func Meta(ctx context.Context) map[string]any {
	sc := trace.SpanContextFromContext(ctx)
	if !sc.IsValid() {
		return nil
	}
	var c carrier
	propagation.TraceContext{}.Inject(ctx, &c)
	m := map[string]any{"traceparent": c.parent}
	if c.state != "" {
		m["tracestate"] = c.state
	}
	return m
}

// Traceparent is ctx's span context as a W3C traceparent ("" when none).
func Traceparent(ctx context.Context) string {
	if !trace.SpanContextFromContext(ctx).IsValid() {
		return ""
	}
	var c carrier
	propagation.TraceContext{}.Inject(ctx, &c)
	return c.parent
}

// IDs are span's trace and span ids in hex ("" when it has none).
func IDs(span trace.Span) (traceID, spanID string) {
	sc := span.SpanContext()
	if !sc.IsValid() {
		return "", ""
	}
	return sc.TraceID().String(), sc.SpanID().String()
}

// LogFields are the zap fields that tie a log line to span: trace_id and
// span_id, none for a span that is not traced.
func LogFields(span trace.Span) []zap.Field {
	t, s := IDs(span)
	if t == "" {
		return nil
	}
	return []zap.Field{zap.String("trace_id", t), zap.String("span_id", s)}
}

// carrier holds the two W3C headers.
type carrier struct{ parent, state string }

func (c carrier) Get(key string) string {
	switch key {
	case "traceparent":
		return c.parent
	case "tracestate":
		return c.state
	}
	return ""
}

func (c *carrier) Set(key, value string) {
	switch key {
	case "traceparent":
		c.parent = value
	case "tracestate":
		c.state = value
	}
}

func (c carrier) Keys() []string { return []string{"traceparent", "tracestate"} }

var _ propagation.TextMapCarrier = (*carrier)(nil)
