package api

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/ptrace/ptraceotlp"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/residentd/residentd/apitype"
	"github.com/residentd/residentd/client"
	"github.com/residentd/residentd/internal/config"
	"github.com/residentd/residentd/internal/daemontest"
	"github.com/residentd/residentd/internal/permission"
	"github.com/residentd/residentd/internal/testkit"
	"github.com/residentd/residentd/internal/tracing"
)

// gotSpan is one span the receiver decoded.
type gotSpan struct {
	Name, TraceID, SpanID, Parent string
	TraceState                    string
	Service                       string
	Attrs                         map[string]string
	Events                        []string // names and attribute values
	Start, End                    time.Time
}

func (s gotSpan) dur() time.Duration { return s.End.Sub(s.Start) }

// receiver is an OTLP/HTTP trace endpoint (POST /v1/traces, protobuf), as
// a collector serves it, decoding with the collector's own data library.
type receiver struct {
	srv   *httptest.Server
	mu    sync.Mutex
	spans []gotSpan
	posts int
}

func newReceiver(t testing.TB) *receiver {
	rc := &receiver{}
	rc.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost || r.URL.Path != "/v1/traces" || r.Header.Get("Content-Type") != "application/x-protobuf" {
			http.Error(w, "want POST /v1/traces, application/x-protobuf", http.StatusBadRequest)
			return
		}
		body, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		req := ptraceotlp.NewExportRequest()
		if err := req.UnmarshalProto(body); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		rc.add(req)
		out, _ := ptraceotlp.NewExportResponse().MarshalProto()
		w.Header().Set("Content-Type", "application/x-protobuf")
		w.Write(out)
	}))
	t.Cleanup(rc.srv.Close)
	return rc
}

func (rc *receiver) add(req ptraceotlp.ExportRequest) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	rc.posts++
	rss := req.Traces().ResourceSpans()
	for i := range rss.Len() {
		service := ""
		if v, ok := rss.At(i).Resource().Attributes().Get("service.name"); ok {
			service = v.AsString()
		}
		sss := rss.At(i).ScopeSpans()
		for j := range sss.Len() {
			spans := sss.At(j).Spans()
			for k := range spans.Len() {
				s := spans.At(k)
				g := gotSpan{Name: s.Name(), TraceID: s.TraceID().String(), SpanID: s.SpanID().String(), Parent: s.ParentSpanID().String(),
					TraceState: s.TraceState().AsRaw(), Service: service, Attrs: attrs(s.Attributes()), Start: s.StartTimestamp().AsTime(), End: s.EndTimestamp().AsTime()}
				for e := range s.Events().Len() {
					ev := s.Events().At(e)
					g.Events = append(g.Events, ev.Name())
					for _, v := range attrs(ev.Attributes()) {
						g.Events = append(g.Events, v)
					}
				}
				rc.spans = append(rc.spans, g)
			}
		}
	}
}

func attrs(m pcommon.Map) map[string]string {
	out := map[string]string{}
	m.Range(func(k string, v pcommon.Value) bool {
		out[k] = v.AsString()
		return true
	})
	return out
}

// trace is the spans of trace id, once its span named root arrived
// (flushing the provider as it polls).
func (rc *receiver) trace(t *testing.T, tp *tracing.Provider, id, root string) []gotSpan {
	t.Helper()
	var out []gotSpan
	testkit.WaitFor(t, 10*time.Second, func() bool {
		if err := tp.ForceFlush(context.Background()); err != nil {
			t.Fatalf("flush: %v", err)
		}
		rc.mu.Lock()
		defer rc.mu.Unlock()
		out = out[:0]
		done := false
		for _, s := range rc.spans {
			if s.TraceID == id {
				out = append(out, s)
				done = done || s.Name == root
			}
		}
		return done
	}, testkit.Waiting("span %q of trace %s", root, id))
	return out
}

// tree renders spans as an operator reads a trace: indented by parent,
// with durations (t.Log shows it; OPERATIONS.md quotes one).
func tree(spans []gotSpan) string {
	byParent := map[string][]gotSpan{}
	ids := map[string]bool{}
	for _, s := range spans {
		ids[s.SpanID] = true
	}
	for _, s := range spans {
		p := s.Parent
		if !ids[p] {
			p = ""
		}
		byParent[p] = append(byParent[p], s)
	}
	var b strings.Builder
	var walk func(parent string, depth int)
	walk = func(parent string, depth int) {
		kids := byParent[parent]
		sort.Slice(kids, func(i, j int) bool { return kids[i].Start.Before(kids[j].Start) })
		for _, s := range kids {
			var keys []string
			for k, v := range s.Attrs {
				if k == "residentd.native_session" || k == "residentd.run" || k == "residentd.tool.id" {
					continue
				}
				keys = append(keys, strings.TrimPrefix(k, "residentd.")+"="+v)
			}
			sort.Strings(keys)
			fmt.Fprintf(&b, "%s%-*s %9s  %s\n", strings.Repeat("  ", depth), 22-2*depth, s.Name, s.dur().Round(10*time.Microsecond), strings.Join(keys, " "))
			walk(s.SpanID, depth+1)
		}
	}
	walk("", 0)
	return b.String()
}

// byName indexes spans by name (the last of each name); it fails the test
// when one of want is missing.
func byName(t *testing.T, spans []gotSpan, want ...string) map[string]gotSpan {
	t.Helper()
	m := map[string]gotSpan{}
	for _, s := range spans {
		m[s.Name] = s
	}
	for _, w := range want {
		if _, ok := m[w]; !ok {
			t.Fatalf("no %q span in the trace:\n%s", w, tree(spans))
		}
	}
	return m
}

// noText fails when any attribute or event of spans carries text of the
// mention or the reply.
func noText(t *testing.T, spans []gotSpan, texts ...string) {
	t.Helper()
	for _, s := range spans {
		vals := append([]string{}, s.Events...)
		for _, v := range s.Attrs {
			vals = append(vals, v)
		}
		for _, v := range vals {
			for _, x := range texts {
				if strings.Contains(v, x) {
					t.Fatalf("span %q carries message text %q: %q", s.Name, x, v)
				}
			}
		}
	}
}

// parentOf fails unless child's parent is parent.
func parentOf(t *testing.T, spans []gotSpan, parent, child gotSpan) {
	t.Helper()
	if child.Parent != parent.SpanID {
		t.Fatalf("span %q's parent is %s, want %q (%s):\n%s", child.Name, child.Parent, parent.Name, parent.SpanID, tree(spans))
	}
}

// tracedEnv is a daemon that exports its traces, as OTEL_* configures it,
// to a receiver, served on a socket; its built-in agent records what it
// gets.
type tracedEnv struct {
	h      *daemontest.Daemon
	tp     *tracing.Provider
	rc     *receiver
	c      *client.Client
	hc     *http.Client
	record string
	logs   *observer.ObservedLogs
}

func newTracedEnv(t *testing.T) *tracedEnv { return newTracedEnvWith(t, nil, nil) }

// newTracedEnvWith is newTracedEnv with its config changed by mod, whose
// daemon tells onSpare of each spare as it becomes ready.
func newTracedEnvWith(t *testing.T, mod func(*config.Config), onSpare func(binding string, pid int)) *tracedEnv {
	rc := newReceiver(t)
	t.Setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", rc.srv.URL+"/v1/traces")
	t.Setenv("OTEL_SERVICE_NAME", "residentd-test")
	tp, err := tracing.FromEnv(context.Background(), "test")
	if err != nil || tp == nil {
		t.Fatalf("tracing from the environment: %v, %v", tp, err)
	}
	t.Cleanup(func() { tp.Shutdown(context.Background()) })
	exe := testkit.Exe(t)
	dir := t.TempDir()
	e := &tracedEnv{tp: tp, rc: rc, record: filepath.Join(dir, "record.jsonl")}
	cfg := &config.Config{StateDir: dir, AgentGrace: config.Duration(time.Second)}
	b := config.Builtin(exe, dir)
	b.Env = map[string]string{"RESIDENTD_TEST_AGENT": "1"}
	b.Args = append(b.Args, "--record", e.record)
	ask := b
	ask.ID, ask.Permission, ask.PermissionTimeout = "b-ask", permission.Ask, config.Duration(time.Hour)
	cfg.Bindings = []config.Binding{b, ask}
	if mod != nil {
		mod(cfg)
	}
	core, logs := observer.New(zapcore.InfoLevel)
	e.logs = logs
	e.h = daemontest.New(t, cfg, daemontest.Options{Log: zap.New(core), Tracer: tp.Tracer(), AgentQuiet: 100 * time.Millisecond, OnSpare: onSpare})
	_, sock := serve(t, "api.sock", ServerOptions{Turns: e.h, Sessions: e.h, Channel: e.h.Inbox, Log: zap.NewNop(), Version: "test"})
	e.c, e.hc = &client.Client{Socket: sock}, unixHTTP(sock)
	t.Cleanup(func() { e.c.Close() })
	return e
}

// post sends a turn with the W3C headers and returns its stream's events
// as they come, one per call of next.
func (e *tracedEnv) post(t *testing.T, req apitype.TurnRequest, traceparent string) (next func() apitype.Event) {
	t.Helper()
	body, _ := json.Marshal(req)
	return e.postBody(t, string(body), "traceparent", traceparent, "tracestate", "app=desktop")
}

// postBody sends a turn's body as it is, with the headers hdr names (name,
// value, …), and returns its stream's events as post does.
func (e *tracedEnv) postBody(t *testing.T, body string, hdr ...string) (next func() apitype.Event) {
	t.Helper()
	hreq, _ := http.NewRequest(http.MethodPost, "http://residentd/v1/turns", strings.NewReader(body))
	hreq.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(hdr); i += 2 {
		hreq.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := e.hc.Do(hreq)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("POST /v1/turns: %s", resp.Status)
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<20)
	return func() apitype.Event {
		t.Helper()
		if !sc.Scan() {
			t.Fatalf("stream ended: %v", sc.Err())
		}
		var ev apitype.Event
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			t.Fatal(err)
		}
		return ev
	}
}

// until reads events up to the done event and returns them.
func until(t *testing.T, next func() apitype.Event) []apitype.Event {
	t.Helper()
	var evs []apitype.Event
	for {
		ev := next()
		evs = append(evs, ev)
		switch ev.Event {
		case apitype.EventDone:
			return evs
		case apitype.EventError:
			t.Fatalf("run failed: %+v", ev)
		}
	}
}

// prompted is the traceparent the built-in agent recorded with its last
// prompt (from _meta).
func (e *tracedEnv) prompted(t *testing.T) string {
	t.Helper()
	data := testkit.ReadFile(t, e.record)
	tp := "none"
	for _, l := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		var rec struct {
			Method      string `json:"method"`
			Traceparent string `json:"traceparent"`
			Tracestate  string `json:"tracestate"`
		}
		if json.Unmarshal([]byte(l), &rec) == nil && rec.Method == "session/prompt" {
			tp = rec.Traceparent
		}
	}
	return tp
}

const (
	clientTrace = "4bf92f3577b34da6a3ce929d0e0e4736"
	clientSpan  = "00f067aa0ba902b7"
)

// A warm turn with the app's traceparent: one trace in the app's, its root
// span the child of the app's span, with the queue wait, compose, prompt
// (its tool call and the policy's permission answer under it) and commit; the agent got the prompt span's
// traceparent; the run, the feed and the run's log lines carry the ids;
// no attribute carries the mention's or the reply's text.
func TestTraceWarmTurn(t *testing.T) {
	e := newTracedEnv(t)
	ctx := context.Background()
	if _, err := e.c.Turn(ctx, apitype.TurnRequest{Channel: "ch", Binding: "b-builtin", MessageID: "m1", Text: "@agent hello"}, nil); err != nil {
		t.Fatal(err)
	}
	text := "@agent [[tool:search]] why is the refund spec flaky?"
	evs := until(t, e.post(t, apitype.TurnRequest{Channel: "ch", Binding: "b-builtin", MessageID: "m2", RunID: "run-warm", Text: text},
		"00-"+clientTrace+"-"+clientSpan+"-01"))
	done := evs[len(evs)-1]
	if done.Shape != "warm" {
		t.Fatalf("shape %q, want warm", done.Shape)
	}
	spans := e.rc.trace(t, e.tp, clientTrace, "run")
	t.Logf("warm turn:\n%s", tree(spans))
	m := byName(t, spans, "run", "queue wait", "compose", "prompt", "tool call", "permission", "commit")
	root := m["run"]
	if root.Parent != clientSpan || root.Service != "residentd-test" {
		t.Fatalf("root span's parent %s (want the client's %s), service %q", root.Parent, clientSpan, root.Service)
	}
	for _, n := range []string{"queue wait", "compose", "prompt", "commit"} {
		parentOf(t, spans, root, m[n])
	}
	parentOf(t, spans, m["prompt"], m["tool call"])
	for k, v := range map[string]string{"residentd.channel": "ch", "residentd.binding": "b-builtin", "residentd.shape": "warm", "residentd.run": "run-warm",
		"residentd.native_session": done.Native, "residentd.tokens.input": fmt.Sprint(done.Usage.InputTokens), "residentd.tokens.output": fmt.Sprint(done.Usage.OutputTokens)} {
		if root.Attrs[k] != v {
			t.Errorf("run span %s = %q, want %q (attributes %v)", k, root.Attrs[k], v, root.Attrs)
		}
	}
	// The binding's policy (read-only) refuses the search: the request's
	// span says the policy answered, and the tool call failed.
	parentOf(t, spans, m["prompt"], m["permission"])
	if p := m["permission"].Attrs; p["residentd.permission.decided_by"] != apitype.DecidedByPolicy || p["residentd.permission.option"] != "reject" {
		t.Errorf("permission span attributes %v", p)
	}
	if tc := m["tool call"].Attrs; tc["residentd.tool.kind"] != "search" || tc["residentd.tool.title"] != "builtin search tool" || tc["residentd.tool.status"] != "failed" {
		t.Errorf("tool call span attributes %v", tc)
	}
	if c := m["compose"].Attrs; c["residentd.shape"] != "warm" || c["residentd.context.lines"] != "0" {
		t.Errorf("compose span attributes %v", c)
	}
	noText(t, spans, "refund", "flaky", done.Text)

	// The agent got the prompt span's context in _meta.
	if got, want := e.prompted(t), "00-"+clientTrace+"-"+m["prompt"].SpanID+"-01"; got != want {
		t.Fatalf("the agent's traceparent %q, want the prompt span's %q", got, want)
	}
	r, err := e.c.Run(ctx, "run-warm")
	if err != nil || r.TraceID != clientTrace || r.SpanID != root.SpanID {
		t.Fatalf("run's trace %q span %q (%v), want %s %s", r.TraceID, r.SpanID, err, clientTrace, root.SpanID)
	}
	found := 0
	for _, l := range e.h.RunFeed().Read(0).Lines {
		var ev apitype.FeedEvent
		if err := json.Unmarshal(l, &ev); err != nil {
			t.Fatal(err)
		}
		if ev.RunID == "run-warm" && ev.TraceID == clientTrace && ev.SpanID == root.SpanID {
			found++
		}
	}
	if found != 2 {
		t.Fatalf("%d feed events of run-warm with its trace, want its start and end", found)
	}
	lines := e.logs.FilterMessage("turn done").FilterField(zap.String("run", "run-warm")).All()
	if len(lines) != 1 || lines[0].ContextMap()["trace_id"] != clientTrace || lines[0].ContextMap()["span_id"] != root.SpanID {
		t.Fatalf("turn done log line of run-warm: %+v; want trace_id %s span_id %s", lines, clientTrace, root.SpanID)
	}
}

// The W3C trace context as request fields, which API.md offers beside the
// headers: a turn over the socket with traceparent and tracestate in its
// body and no header is a run whose root span is the child of the
// client's span, in its trace, with its tracestate; the run says so. With
// a header too, the header wins.
func TestTraceContextInTheBody(t *testing.T) {
	e := newTracedEnv(t)
	const (
		fieldTrace  = "5bf92f3577b34da6a3ce929d0e0e4736"
		headerTrace = "6bf92f3577b34da6a3ce929d0e0e4736"
	)
	turn := func(run, msg, trace string) string {
		return fmt.Sprintf(`{"channel_id":"ch","binding_id":"b-builtin","message_id":%q,"run_id":%q,"text":"@agent hello",`+
			`"traceparent":"00-%s-%s-01","tracestate":"app=body"}`, msg, run, trace, clientSpan)
	}
	until(t, e.postBody(t, turn("run-field", "m1", fieldTrace)))
	root := byName(t, e.rc.trace(t, e.tp, fieldTrace, "run"), "run")["run"]
	if root.Parent != clientSpan || root.TraceState != "app=body" {
		t.Fatalf("root span of the traced body: parent %s tracestate %q; want the client's %s and app=body", root.Parent, root.TraceState, clientSpan)
	}
	r, err := e.c.Run(context.Background(), "run-field")
	if err != nil || r.TraceID != fieldTrace || r.SpanID != root.SpanID {
		t.Fatalf("run-field's trace %q span %q (%v), want %s %s", r.TraceID, r.SpanID, err, fieldTrace, root.SpanID)
	}

	// The body names one trace and the headers another: the headers win.
	const headerSpan = "b7ad6b7169203331"
	until(t, e.postBody(t, turn("run-header", "m2", fieldTrace), "traceparent", "00-"+headerTrace+"-"+headerSpan+"-01", "tracestate", "app=header"))
	root = byName(t, e.rc.trace(t, e.tp, headerTrace, "run"), "run")["run"]
	if root.Parent != headerSpan || root.TraceState != "app=header" || root.Attrs["residentd.run"] != "run-header" {
		t.Fatalf("root span with a header and fields: parent %s tracestate %q run %q; want the header's %s, app=header, run-header", root.Parent, root.TraceState, root.Attrs["residentd.run"], headerSpan)
	}
	if r, err := e.c.Run(context.Background(), "run-header"); err != nil || r.TraceID != headerTrace {
		t.Fatalf("run-header's trace %q (%v), want the header's %s", r.TraceID, err, headerTrace)
	}
}

// A cold turn after a restart, with the traceparent as a request field:
// its spawn span holds the restore (method resume, outcome ok).
func TestTraceRestoredTurn(t *testing.T) {
	e := newTracedEnv(t)
	ctx := context.Background()
	if res := e.h.Turn(ctx, apitype.TurnRequest{Channel: "ch", Binding: "b-builtin", MessageID: "m1", Text: "@agent hello"}); res.Err != nil {
		t.Fatal(res.Err)
	}
	if err := e.h.Restart(); err != nil {
		t.Fatal(err)
	}
	const tr = "0af7651916cd43dd8448eb211c80319c"
	res := e.h.Turn(ctx, apitype.TurnRequest{Channel: "ch", Binding: "b-builtin", MessageID: "m2", Text: "@agent where were we with the refund spec",
		TraceContext: &apitype.TraceContext{Traceparent: "00-" + tr + "-b7ad6b7169203331-01"}})
	if res.Err != nil || res.Done.Shape != "restored" {
		t.Fatalf("turn after the restart: shape %q, %v", res.Done.Shape, res.Err)
	}
	spans := e.rc.trace(t, e.tp, tr, "run")
	t.Logf("restored turn:\n%s", tree(spans))
	m := byName(t, spans, "run", "queue wait", "spawn", "restore", "compose", "prompt", "commit")
	if m["run"].Parent != "b7ad6b7169203331" {
		t.Fatalf("root's parent %s", m["run"].Parent)
	}
	parentOf(t, spans, m["run"], m["spawn"])
	parentOf(t, spans, m["spawn"], m["restore"])
	if a := m["restore"].Attrs; a["residentd.restore.method"] != "resume" || a["residentd.restore.outcome"] != "ok" {
		t.Fatalf("restore span attributes %v", a)
	}
	if a := m["spawn"].Attrs; a["residentd.shape"] != "restored" || a["residentd.pid"] == "" || a["residentd.spare"] != "false" || a["residentd.spare_session"] != "false" {
		t.Fatalf("spawn span attributes %v", a)
	}
	if m["run"].Attrs["residentd.shape"] != "restored" {
		t.Fatalf("run span attributes %v", m["run"].Attrs)
	}
	noText(t, spans, "refund", "where were we", res.Done.Text)
	if got, want := e.prompted(t), "00-"+tr+"-"+m["prompt"].SpanID+"-01"; got != want {
		t.Fatalf("the agent's traceparent %q, want %q", got, want)
	}
}

// A cold turn that takes a spare with a session opened ahead: its spawn
// span says so, and holds no session request of its own.
func TestTraceColdTurnOnASpare(t *testing.T) {
	ready := make(chan int, 4)
	e := newTracedEnvWith(t, func(c *config.Config) {
		one := 1
		c.Bindings[0].Spare, c.Bindings[0].SpareAtStart = &one, true
	}, func(binding string, pid int) { ready <- pid })
	pid := testkit.Recv(t, ready, 30*time.Second, "spare ready")
	const tr = "4bf92f3577b34da6a3ce929d0e0e4736"
	res := e.h.Turn(context.Background(), apitype.TurnRequest{Channel: "ch", Binding: "b-builtin", MessageID: "m1", Text: "@agent hello",
		TraceContext: &apitype.TraceContext{Traceparent: "00-" + tr + "-00f067aa0ba902b7-01"}})
	if res.Err != nil || res.Done.Shape != "cold" || res.Start.Pid != pid {
		t.Fatalf("turn: shape %q on pid %d, %v; want cold on the spare %d", res.Done.Shape, res.Start.Pid, res.Err, pid)
	}
	spans := e.rc.trace(t, e.tp, tr, "run")
	t.Logf("cold turn on a spare:\n%s", tree(spans))
	m := byName(t, spans, "run", "spawn", "compose", "prompt")
	if a := m["spawn"].Attrs; a["residentd.spare"] != "true" || a["residentd.spare_session"] != "true" || a["residentd.shape"] != "cold" {
		t.Fatalf("spawn span attributes %v", a)
	}
	for _, sp := range spans {
		if sp.Name == "session new" {
			t.Fatalf("the turn sent session/new of its own: %s", tree(spans))
		}
	}
}

// A permission a person answers: its span, under the prompt's, lasts
// until the answer and says who gave it.
func TestTracePermissionAnsweredByPerson(t *testing.T) {
	e := newTracedEnv(t)
	ctx := context.Background()
	const tr = "5b8efff798038103d269b633813fc60c"
	next := e.post(t, apitype.TurnRequest{Channel: "ch", Binding: "b-ask", MessageID: "m1", RunID: "run-ask", Text: "@agent [[tool:execute]] run the refund tests"},
		"00-"+tr+"-eee19b7ec3c1b174-01")
	var asked apitype.Event
	for asked.Event != apitype.EventPermissionRequest {
		asked = next()
		if asked.Event == apitype.EventDone || asked.Event == apitype.EventError {
			t.Fatalf("the run ended before it asked: %+v", asked)
		}
	}
	answered := time.Now()
	if err := e.c.Answer(ctx, "run-ask", asked.Permission.ID, "allow"); err != nil {
		t.Fatal(err)
	}
	done := until(t, next)
	spans := e.rc.trace(t, e.tp, tr, "run")
	t.Logf("turn with a permission:\n%s", tree(spans))
	m := byName(t, spans, "run", "spawn", "session mode", "prompt", "permission", "tool call")
	parentOf(t, spans, m["prompt"], m["permission"])
	parentOf(t, spans, m["prompt"], m["tool call"])
	if a := m["tool call"].Attrs; a["residentd.tool.kind"] != "execute" || a["residentd.tool.status"] != "completed" {
		t.Fatalf("tool call span attributes %v", a)
	}
	p := m["permission"]
	if p.Attrs["residentd.permission.decided_by"] != apitype.DecidedByPerson || p.Attrs["residentd.permission.option"] != "allow" ||
		p.Attrs["residentd.tool.kind"] != "execute" || !p.Start.Before(answered) || p.End.Before(answered) {
		t.Fatalf("permission span %v from %s to %s; want decided by a person, allow, execute, open when the answer was sent at %s", p.Attrs, p.Start, p.End, answered)
	}
	if m["run"].Attrs["residentd.shape"] != "cold" {
		t.Fatalf("run span attributes %v", m["run"].Attrs)
	}
	noText(t, spans, "refund", done[len(done)-1].Text)
}

// What the agent says after its turn (an agent run) is a span of that
// turn's trace, a child of its prompt span; the run and its feed lines
// carry the trace.
func TestTraceAgentRun(t *testing.T) {
	e := newTracedEnv(t)
	const tr = "8a3c60f7d188f8fa79d48a391a778fa6"
	until(t, e.post(t, apitype.TurnRequest{Channel: "ch", Binding: "b-builtin", MessageID: "m1", Text: "@agent [[later:10ms]] go on"}, "00-"+tr+"-79d48a391a778fa6-01"))
	var agent apitype.FeedEvent
	var seq int64
	for agent.Event != apitype.FeedRunEnded {
		b := e.h.RunFeed().Read(seq)
		for _, l := range b.Lines {
			var ev apitype.FeedEvent
			if err := json.Unmarshal(l, &ev); err != nil {
				t.Fatal(err)
			}
			if ev.Kind == apitype.RunKindAgent && ev.Event == apitype.FeedRunEnded {
				agent = ev
			}
		}
		seq = b.Last
		if agent.Event == "" {
			select {
			case <-b.Changed:
			case <-time.After(10 * time.Second):
				t.Fatal("no agent run ended")
			}
		}
	}
	spans := e.rc.trace(t, e.tp, tr, "agent run")
	t.Logf("turn and the agent run after it:\n%s", tree(spans))
	m := byName(t, spans, "run", "prompt", "agent run")
	parentOf(t, spans, m["prompt"], m["agent run"])
	if agent.TraceID != tr || agent.SpanID != m["agent run"].SpanID {
		t.Fatalf("agent run's feed line has trace %q span %q, want %s %s", agent.TraceID, agent.SpanID, tr, m["agent run"].SpanID)
	}
	noText(t, spans, "later output", "go on")
}

// BenchmarkWarmTurnTracing is a warm turn over the socket (as
// BenchmarkWarmTurnSocket) with tracing off and on, in one run: on, every
// turn's spans go to an OTLP/HTTP receiver in the process through the
// batch processor, as OTEL_EXPORTER_OTLP_TRACES_ENDPOINT configures it.
// Compare the off and on sub-benchmarks' allocs/op and B/op; interleaved
// times both daemons' turns one after the other in the same loop:
//
//	go test -run '^$' -bench WarmTurnTracing -benchmem -count 3 ./internal/api/
func BenchmarkWarmTurnTracing(b *testing.B) {
	rc := newReceiver(b)
	b.Setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", rc.srv.URL+"/v1/traces")
	tp, err := tracing.FromEnv(context.Background(), "bench")
	if err != nil || tp == nil {
		b.Fatalf("tracing from the environment: %v, %v", tp, err)
	}
	b.Cleanup(func() { tp.Shutdown(context.Background()) })
	for _, mode := range []struct {
		name string
		o    daemontest.Options
	}{
		{"off", daemontest.Options{Log: zap.NewNop()}},
		{"on", daemontest.Options{Log: zap.NewNop(), Tracer: tp.Tracer()}},
	} {
		b.Run(mode.name, func(b *testing.B) {
			c, _ := benchClientWith(b, mode.o)
			req := apitype.TurnRequest{Channel: "ch", Binding: "b-builtin", MessageID: "q", Text: benchText}
			if _, err := c.Turn(context.Background(), req, nil); err != nil {
				b.Fatal(err)
			}
			if err := tp.ForceFlush(context.Background()); err != nil {
				b.Fatal(err)
			}
			rc.mu.Lock()
			before := len(rc.spans)
			rc.mu.Unlock()
			b.ReportAllocs()
			for b.Loop() {
				ev, err := c.Turn(context.Background(), req, nil)
				if err != nil || ev.Shape != "warm" {
					b.Fatalf("turn: shape %q err %v", ev.Shape, err)
				}
			}
			b.StopTimer()
			if err := tp.ForceFlush(context.Background()); err != nil {
				b.Fatal(err)
			}
			rc.mu.Lock()
			n := len(rc.spans) - before
			rc.mu.Unlock()
			if mode.o.Tracer == nil && n != 0 || mode.o.Tracer != nil && n < b.N {
				b.Fatalf("tracing %s: %d spans exported for %d turns", mode.name, n, b.N)
			}
			b.ReportMetric(float64(n)/float64(b.N), "spans/turn")
		})
	}
	// Time on a noisy machine: both daemons, one turn each in turn, so
	// both see the same load.
	b.Run("interleaved", func(b *testing.B) {
		off, _ := benchClientWith(b, daemontest.Options{Log: zap.NewNop()})
		on, _ := benchClientWith(b, daemontest.Options{Log: zap.NewNop(), Tracer: tp.Tracer()})
		ctx := context.Background()
		req := apitype.TurnRequest{Channel: "ch", Binding: "b-builtin", MessageID: "q", Text: benchText}
		for _, c := range []*client.Client{off, on} {
			if _, err := c.Turn(ctx, req, nil); err != nil {
				b.Fatal(err)
			}
		}
		var tOff, tOn time.Duration
		for b.Loop() {
			t0 := time.Now()
			if _, err := off.Turn(ctx, req, nil); err != nil {
				b.Fatal(err)
			}
			t1 := time.Now()
			if _, err := on.Turn(ctx, req, nil); err != nil {
				b.Fatal(err)
			}
			tOff, tOn = tOff+t1.Sub(t0), tOn+time.Since(t1)
		}
		b.ReportMetric(float64(tOff.Microseconds())/float64(b.N), "off-µs/turn")
		b.ReportMetric(float64(tOn.Microseconds())/float64(b.N), "on-µs/turn")
		b.ReportMetric(float64(tOn-tOff)/float64(tOff)*100, "added-%")
	})
}
