package tracing

import (
	"context"
	"strings"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
)

// The standard variables decide: nothing configured is no provider (off);
// an endpoint, or the otlp exporter named, is one; disabled and none win;
// an exporter or protocol residentd does not have is an error.
func TestFromEnv(t *testing.T) {
	vars := []string{"OTEL_SDK_DISABLED", "OTEL_TRACES_EXPORTER", "OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
		"OTEL_EXPORTER_OTLP_PROTOCOL", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"}
	for _, tc := range []struct {
		name string
		env  map[string]string
		on   bool
		err  string
	}{
		{name: "nothing"},
		{name: "endpoint", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"}, on: true},
		{name: "traces endpoint", env: map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://127.0.0.1:4318/v1/traces"}, on: true},
		{name: "otlp named", env: map[string]string{"OTEL_TRACES_EXPORTER": "otlp"}, on: true},
		{name: "disabled", env: map[string]string{"OTEL_SDK_DISABLED": "true", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"}},
		{name: "none", env: map[string]string{"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"}},
		{name: "http/protobuf", env: map[string]string{"OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"}, on: true},
		{name: "grpc", env: map[string]string{"OTEL_EXPORTER_OTLP_PROTOCOL": "grpc", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4317"}, err: "http/protobuf only"},
		{name: "zipkin", env: map[string]string{"OTEL_TRACES_EXPORTER": "zipkin"}, err: "otlp"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, v := range vars {
				t.Setenv(v, tc.env[v])
			}
			p, err := FromEnv(context.Background(), "test")
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("error %v, want one saying %q", err, tc.err)
				}
				return
			}
			if err != nil || (p != nil) != tc.on {
				t.Fatalf("provider %v, error %v; want on=%v", p, err, tc.on)
			}
			if !tc.on && p.Tracer() != nil {
				t.Fatal("an off provider has a tracer")
			}
			p.Shutdown(context.Background())
		})
	}
}

// Off costs nothing: Start with no recording span, Root with no tracer,
// Meta and IDs of no span allocate nothing; on, a root continues the
// client's trace and Meta carries the span's own context.
func TestStartOffAndOn(t *testing.T) {
	ctx := context.Background()
	if n := testing.AllocsPerRun(100, func() {
		_, r := Root(nil, "run", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "")
		c, s := Start(ctx, "x")
		_ = Meta(c)
		IDs(s)
		s.End()
		r.End()
	}); n != 0 {
		t.Fatalf("tracing off allocates %v times", n)
	}
	rec := tracetest.NewSpanRecorder()
	p := New(tracetest.NewInMemoryExporter(), "test", true)
	defer p.Shutdown(ctx)
	p.tp.RegisterSpanProcessor(rec)
	rctx, root := Root(p.Tracer(), "run", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "app=1")
	if got := root.SpanContext().TraceID().String(); got != "4bf92f3577b34da6a3ce929d0e0e4736" {
		t.Fatalf("root's trace %s, want the client's", got)
	}
	cctx, child := Start(rctx, "prompt")
	m := Meta(cctx)
	want := "00-4bf92f3577b34da6a3ce929d0e0e4736-" + child.SpanContext().SpanID().String() + "-01"
	if m["traceparent"] != want || m["tracestate"] != "app=1" {
		t.Fatalf("meta %v, want traceparent %s and the client's tracestate", m, want)
	}
	child.End()
	root.End()
	spans := rec.Ended()
	if len(spans) != 2 || spans[0].Parent().SpanID() != root.SpanContext().SpanID() || spans[1].Parent().SpanID().String() != "00f067aa0ba902b7" {
		t.Fatalf("ended spans %d; the child's parent is the root, the root's the client's", len(spans))
	}
	// An invalid traceparent is ignored: a trace of its own.
	_, s := Root(p.Tracer(), "run", "not-a-traceparent", "")
	if !s.SpanContext().IsValid() || s.(sdktrace.ReadOnlySpan).Parent().IsValid() {
		t.Fatal("an invalid traceparent did not start a trace of its own")
	}
	s.End()
}
