package api

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"sync"
)

// TraceEnv names a directory. When it is set, the server appends every
// response it writes to a file there, one JSON line per response, so the
// test suite can check all of its traffic against docs/openapi.json. It is
// a debugging aid; a production daemon leaves it unset.
const TraceEnv = "RESIDENTD_API_TRACE"

// maxTraceBody bounds one recorded response; longer ones are marked
// truncated and left unchecked.
const maxTraceBody = 4 << 20

// TraceRecord is one recorded response.
type TraceRecord struct {
	Method      string `json:"method"`
	Pattern     string `json:"pattern"` // the route that served it; "" for the catch-all and the peer guard
	Path        string `json:"path"`
	Status      int    `json:"status"`
	ContentType string `json:"content_type"`
	Body        string `json:"body"`
	Truncated   bool   `json:"truncated,omitempty"`
}

type tracer struct {
	mu   sync.Mutex
	file *os.File
}

// tracers holds one tracer per directory for the life of the process, so
// that servers started one after another in a test binary share the file.
var (
	tracersMu sync.Mutex
	tracers   = map[string]*tracer{}
)

// openTracer opens dir's trace file for this process; nil when dir is "".
func openTracer(dir string) (*tracer, error) {
	if dir == "" {
		return nil, nil
	}
	tracersMu.Lock()
	defer tracersMu.Unlock()
	if t := tracers[dir]; t != nil {
		return t, nil
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("api: trace dir %q: %w", dir, err)
	}
	f, err := os.OpenFile(filepath.Join(dir, fmt.Sprintf("trace-%d.ndjson", os.Getpid())), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, fmt.Errorf("api: trace file in %q: %w", dir, err)
	}
	t := &tracer{file: f}
	tracers[dir] = t
	return t, nil
}

func (t *tracer) wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tw := &traceWriter{ResponseWriter: w}
		next.ServeHTTP(tw, r)
		rec := TraceRecord{Method: r.Method, Pattern: r.Pattern, Path: r.URL.Path, Status: tw.status, ContentType: w.Header().Get("Content-Type"), Body: tw.body.String(), Truncated: tw.truncated}
		if rec.Status == 0 {
			rec.Status = http.StatusOK
		}
		line, _ := json.Marshal(rec)
		t.mu.Lock()
		defer t.mu.Unlock()
		t.file.Write(append(line, '\n'))
	})
}

// traceWriter keeps a copy of what a handler writes.
type traceWriter struct {
	http.ResponseWriter
	status    int
	body      bytes.Buffer
	truncated bool
}

func (w *traceWriter) WriteHeader(status int) {
	if w.status == 0 {
		w.status = status
	}
	w.ResponseWriter.WriteHeader(status)
}

func (w *traceWriter) Write(p []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	if w.body.Len()+len(p) <= maxTraceBody {
		w.body.Write(p)
	} else {
		w.truncated = true
	}
	return w.ResponseWriter.Write(p)
}

func (w *traceWriter) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

func (w *traceWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
