package main

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/collector/pdata/ptrace/ptraceotlp"

	"github.com/residentd/residentd/apitype"
)

// serve with OTEL_EXPORTER_OTLP_TRACES_ENDPOINT exports every run's spans
// over OTLP/HTTP; with a batch delay far beyond the test, the spans that
// arrive were sent by the clean stop's flush. Its log lines carry the
// run's trace id. An exporter it does not have stops it with the reason.
func TestServeExportsTraces(t *testing.T) {
	var mu sync.Mutex
	runs := map[string]string{} // trace id -> binding of each "run" span
	rc := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		req := ptraceotlp.NewExportRequest()
		if r.URL.Path != "/v1/traces" || req.UnmarshalProto(body) != nil {
			http.Error(w, "want OTLP/HTTP protobuf at /v1/traces", http.StatusBadRequest)
			return
		}
		rss := req.Traces().ResourceSpans()
		mu.Lock()
		for i := range rss.Len() {
			for j := range rss.At(i).ScopeSpans().Len() {
				spans := rss.At(i).ScopeSpans().At(j).Spans()
				for k := range spans.Len() {
					if s := spans.At(k); s.Name() == "run" {
						b, _ := s.Attributes().Get("residentd.binding")
						runs[s.TraceID().String()] = b.AsString()
					}
				}
			}
		}
		mu.Unlock()
		out, _ := ptraceotlp.NewExportResponse().MarshalProto()
		w.Header().Set("Content-Type", "application/x-protobuf")
		w.Write(out)
	}))
	defer rc.Close()

	p := startDaemon(t, serveOpts{env: []string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT=" + rc.URL + "/v1/traces", "OTEL_BSP_SCHEDULE_DELAY=600000"}})
	c := dial(t, p.sock)
	done, err := c.Turn(context.Background(), apitype.TurnRequest{Channel: "ch", Binding: "b-builtin", RunID: "run-t", Text: "@agent hello"}, nil)
	if err != nil || done.Event != apitype.EventDone {
		t.Fatalf("turn: %+v, %v", done, err)
	}
	r, err := c.Run(context.Background(), "run-t")
	if err != nil || len(r.TraceID) != 32 {
		t.Fatalf("run's trace id %q (%v)", r.TraceID, err)
	}
	if p.stop(20*time.Second) != nil {
		t.Fatal("daemon did not stop")
	}
	mu.Lock()
	got := runs[r.TraceID]
	mu.Unlock()
	if got != "b-builtin" {
		t.Fatalf("no run span of trace %s exported by the stop (runs %v). Output:\n%s", r.TraceID, runs, p.out.String())
	}
	var started, logged bool
	for _, e := range p.logLines() {
		started = started || e["msg"] == "tracing runs: OTLP over HTTP" && e["endpoint"] == rc.URL+"/v1/traces"
		logged = logged || e["msg"] == "turn done" && e["run"] == "run-t" && e["trace_id"] == r.TraceID && e["span_id"] == r.SpanID
	}
	if !started || !logged {
		t.Fatalf("tracing start line %v, turn done line with the trace %v. Output:\n%s", started, logged, p.out.String())
	}

	bad := startProc(t, serveArgs(t.TempDir(), filepath.Join(sockDir(t), "s.sock")), childEnv("OTEL_TRACES_EXPORTER=zipkin"))
	if code := bad.wait(t, 30*time.Second); code == 0 {
		t.Fatal("serve with OTEL_TRACES_EXPORTER=zipkin started")
	}
	if out := bad.out.String(); !strings.Contains(out, `OTEL_TRACES_EXPORTER="zipkin"`) {
		t.Fatalf("serve's refusal does not name the variable:\n%s", out)
	}
}
