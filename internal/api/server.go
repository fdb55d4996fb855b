// Package api owns residentd's local API: HTTP/1.1 with JSON on a Unix
// socket, versioned under /v1, for the desktop app and the CLI, and the Go
// client both use.
package api

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/residentd/residentd/internal/acp"
	"github.com/residentd/residentd/internal/channel"
	"github.com/residentd/residentd/internal/daemon"
	"github.com/residentd/residentd/internal/pool"
	"github.com/residentd/residentd/internal/proc"
	"github.com/residentd/residentd/internal/session"
	"github.com/residentd/residentd/internal/store"
)

// Request body limits.
const (
	MaxTurnBody     = 1 << 20  // one mention
	MaxMessagesBody = 16 << 20 // one batch of channel messages
	MaxSmallBody    = 64 << 10 // everything else
)

var errNotUnix = errors.New("api: not a unix socket connection")

// Server serves the API for one daemon. Create it with NewServer and run it
// with Serve; Shutdown stops it.
type Server struct {
	d       *daemon.Daemon
	log     *zap.Logger
	level   *zap.AtomicLevel
	metrics http.Handler
	version string
	started time.Time
	srv     *http.Server
	mux     *http.ServeMux
	uid     int
}

// ServerOptions wires a Server.
type ServerOptions struct {
	Daemon  *daemon.Daemon
	Log     *zap.Logger
	Level   *zap.AtomicLevel // changed by PUT /v1/log/level; nil disables it
	Metrics http.Handler     // served at /metrics; nil disables it
	Version string
	// Tools checks the capabilities of agents' MCP servers on /v1/tools;
	// nil answers those endpoints with 503.
	Tools Capabilities
}

type connKey struct{}

// NewServer returns a Server; Serve starts it.
func NewServer(o ServerOptions) *Server {
	if o.Log == nil {
		o.Log = zap.NewNop()
	}
	s := &Server{d: o.Daemon, log: o.Log.Named("api"), level: o.Level, metrics: o.Metrics, version: o.Version, started: time.Now(), uid: os.Getuid()}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/health", s.health)
	mux.HandleFunc("POST /v1/turns", s.turn)
	mux.HandleFunc("POST /v1/turns/{run}/cancel", s.cancel)
	mux.HandleFunc("GET /v1/sessions", s.sessions)
	mux.HandleFunc("POST /v1/sessions/fresh", s.fresh)
	mux.HandleFunc("GET /v1/bindings", s.bindings)
	mux.HandleFunc("POST /v1/messages", s.messages)
	mux.HandleFunc("GET /v1/log/level", s.logLevel)
	mux.HandleFunc("PUT /v1/log/level", s.logLevel)
	s.registerTools(mux, o.Tools)
	if o.Metrics != nil {
		mux.Handle("GET /metrics", o.Metrics)
	}
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		// The catch-all also matches known paths with the wrong method: say
		// which methods the path takes instead of pretending it is not there.
		var allowed []string
		for _, m := range []string{http.MethodGet, http.MethodPost, http.MethodPut} {
			alt := r.Clone(r.Context())
			alt.Method = m
			if _, pattern := s.mux.Handler(alt); pattern != "/" {
				allowed = append(allowed, m)
			}
		}
		if len(allowed) > 0 {
			w.Header().Set("Allow", strings.Join(allowed, ", "))
			writeError(w, http.StatusMethodNotAllowed, "method_not_allowed", fmt.Sprintf("%s %s is not allowed; use %s", r.Method, r.URL.Path, strings.Join(allowed, " or ")))
			return
		}
		writeError(w, http.StatusNotFound, "not_found", fmt.Sprintf("no endpoint %s %s; see docs/API.md", r.Method, r.URL.Path))
	})
	s.mux = mux
	s.srv = &http.Server{
		Handler:           s.guard(mux),
		ReadHeaderTimeout: 10 * time.Second,
		ConnContext: func(ctx context.Context, c net.Conn) context.Context {
			return context.WithValue(ctx, connKey{}, c)
		},
		ErrorLog: zap.NewStdLog(o.Log.Named("http")),
	}
	return s
}

// Handler returns the API handler without the peer check, for tests that
// drive it in process.
func (s *Server) Handler() http.Handler { return s.mux }

// Serve serves ln until Shutdown.
func (s *Server) Serve(ln net.Listener) error {
	err := s.srv.Serve(ln)
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
}

// Shutdown stops accepting and waits for open requests up to ctx.
func (s *Server) Shutdown(ctx context.Context) error { return s.srv.Shutdown(ctx) }

// guard refuses browsers and other users before any handler runs.
func (s *Server) guard(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Origin") != "" || r.Header.Get("Sec-Fetch-Site") != "" {
			writeError(w, http.StatusForbidden, "forbidden_origin", "requests from browsers are refused; the local API is for the desktop app and the CLI")
			return
		}
		if c, ok := r.Context().Value(connKey{}).(net.Conn); ok {
			if _, unixConn := c.(*net.UnixConn); unixConn {
				uid, err := peerUID(c)
				if err != nil {
					writeError(w, http.StatusForbidden, "forbidden", "cannot read the peer's credentials: "+err.Error())
					return
				}
				if uid != s.uid {
					s.log.Warn("refused peer", zap.Int("peer_uid", uid))
					writeError(w, http.StatusForbidden, "forbidden", fmt.Sprintf("peer uid %d is not the daemon's uid %d", uid, s.uid))
					return
				}
			}
		}
		next.ServeHTTP(w, r)
	})
}

// Error is the JSON body of every error response, and the client's error.
type Error struct {
	Status  int    `json:"-"`
	Code    string `json:"code"`
	Message string `json:"message"`
}

func (e *Error) Error() string { return fmt.Sprintf("residentd: %s: %s", e.Code, e.Message) }

// IsCode reports whether err is an API error with code.
func IsCode(err error, code string) bool {
	var e *Error
	return errors.As(err, &e) && e.Code == code
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	enc.Encode(v)
}

func writeError(w http.ResponseWriter, status int, code, msg string) {
	writeJSON(w, status, map[string]any{"error": Error{Code: code, Message: msg}})
}

// classify maps a domain error to an HTTP status and a stable code.
func classify(err error) (int, string) {
	var mbe *http.MaxBytesError
	switch {
	case errors.As(err, &mbe):
		return http.StatusRequestEntityTooLarge, "payload_too_large"
	case errors.Is(err, errDecode), errors.Is(err, daemon.ErrBadRequest):
		return http.StatusBadRequest, "bad_request"
	case errors.Is(err, channel.ErrInvalid):
		return http.StatusBadRequest, "invalid_message"
	case errors.Is(err, daemon.ErrUnknownBinding):
		return http.StatusNotFound, "unknown_binding"
	case errors.Is(err, daemon.ErrUnknownRun):
		return http.StatusNotFound, "unknown_run"
	case errors.Is(err, store.ErrNotFound):
		return http.StatusNotFound, "not_found"
	case errors.Is(err, daemon.ErrRunInUse):
		return http.StatusConflict, "run_in_use"
	case errors.Is(err, pool.ErrQueueFull):
		return http.StatusServiceUnavailable, "queue_full"
	case errors.Is(err, pool.ErrQueueTimeout):
		return http.StatusServiceUnavailable, "queue_timeout"
	case errors.Is(err, daemon.ErrBackoff):
		return http.StatusServiceUnavailable, "agent_backoff"
	case errors.Is(err, daemon.ErrShuttingDown), errors.Is(err, pool.ErrClosed):
		return http.StatusServiceUnavailable, "shutting_down"
	case errors.Is(err, context.DeadlineExceeded):
		return http.StatusGatewayTimeout, "timeout"
	case errors.Is(err, context.Canceled):
		return 499, "cancelled"
	case errors.Is(err, acp.ErrStart):
		return http.StatusBadGateway, "agent_start_failed"
	case errors.Is(err, acp.ErrExited):
		return http.StatusBadGateway, "agent_crashed"
	case errors.Is(err, daemon.ErrAgentFailed), errors.Is(err, acp.ErrProtocol):
		return http.StatusBadGateway, "agent_failed"
	}
	return http.StatusInternalServerError, "internal"
}

var errDecode = errors.New("malformed request")

// decode reads one JSON value of at most limit bytes into v, refusing
// unknown fields and trailing data.
func decode(w http.ResponseWriter, r *http.Request, limit int64, v any) error {
	body := http.MaxBytesReader(w, r.Body, limit)
	data, err := io.ReadAll(body)
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return fmt.Errorf("request body is over the %d-byte limit for %s: %w", limit, r.URL.Path, err)
		}
		return fmt.Errorf("%w: read body: %v", errDecode, err)
	}
	return decodeBytes(data, v)
}

// decodeBytes is decode's pure half, fuzzed on its own.
func decodeBytes(data []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("%w: %v", errDecode, err)
	}
	if dec.More() {
		return fmt.Errorf("%w: trailing data after the JSON body", errDecode)
	}
	var rest json.RawMessage
	if err := dec.Decode(&rest); err != io.EOF {
		return fmt.Errorf("%w: trailing data after the JSON body", errDecode)
	}
	return nil
}

func fail(w http.ResponseWriter, err error) {
	status, code := classify(err)
	writeError(w, status, code, err.Error())
}

// Health is GET /v1/health.
type Health struct {
	OK       bool   `json:"ok"`
	Version  string `json:"version"`
	Pid      int    `json:"pid"`
	UptimeS  int64  `json:"uptime_seconds"`
	Live     int    `json:"live"`
	Busy     int    `json:"busy"`
	Queued   int    `json:"queued"`
	MaxLive  int    `json:"max_live"`
	Bindings int    `json:"bindings"`
}

func (s *Server) health(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, Health{
		OK: true, Version: s.version, Pid: os.Getpid(), UptimeS: int64(time.Since(s.started).Seconds()),
		Live: s.d.Live(), Busy: s.d.Busy(), Queued: s.d.Queued(), MaxLive: s.d.Config().MaxLive, Bindings: len(s.d.Config().Bindings),
	})
}

// turn streams one turn as NDJSON: a start event, update events, then one
// done or error event. An error before the turn starts is a plain JSON error
// response with its status code.
func (s *Server) turn(w http.ResponseWriter, r *http.Request) {
	var req daemon.TurnRequest
	if err := decode(w, r, MaxTurnBody, &req); err != nil {
		fail(w, err)
		return
	}
	var mu sync.Mutex
	started := false
	runID := req.RunID // the daemon generates one when the request has none
	flusher, _ := w.(http.Flusher)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	emit := func(ev daemon.Event) {
		mu.Lock()
		defer mu.Unlock()
		if ev.RunID != "" {
			runID = ev.RunID
		}
		if !started {
			started = true
			w.Header().Set("Content-Type", "application/x-ndjson")
			w.WriteHeader(http.StatusOK)
		}
		enc.Encode(ev)
		if flusher != nil {
			flusher.Flush()
		}
	}
	err := s.d.Turn(r.Context(), req, emit)
	if err == nil {
		return
	}
	mu.Lock()
	wasStarted, id := started, runID
	mu.Unlock()
	status, code := classify(err)
	if !wasStarted {
		writeError(w, status, code, err.Error())
		return
	}
	emit(daemon.Event{Event: "error", RunID: id, Code: code, Message: err.Error()})
}

func (s *Server) cancel(w http.ResponseWriter, r *http.Request) {
	if err := s.d.Cancel(r.PathValue("run")); err != nil {
		fail(w, err)
		return
	}
	writeJSON(w, http.StatusAccepted, map[string]any{"cancelled": r.PathValue("run")})
}

// SessionInfo is one row of GET /v1/sessions.
type SessionInfo struct {
	Channel  string         `json:"channel_id"`
	Binding  string         `json:"binding_id"`
	Pid      int            `json:"pid"`
	Native   string         `json:"native_session"`
	State    string         `json:"state"`
	IdleS    float64        `json:"idle_seconds"`
	Started  time.Time      `json:"started_at"`
	Turns    map[string]int `json:"turns"`
	RSSBytes int64          `json:"rss_bytes,omitempty"`
}

func (s *Server) sessions(w http.ResponseWriter, r *http.Request) {
	out := []SessionInfo{}
	for _, in := range s.d.Pool().Sessions() {
		out = append(out, SessionInfo{
			Channel: in.Key.Channel, Binding: in.Key.Binding, Pid: in.Pid, Native: in.Native, State: in.State,
			IdleS: in.Idle.Seconds(), Started: in.Started, Turns: in.Turns, RSSBytes: rss(in.Pid),
		})
	}
	writeJSON(w, http.StatusOK, map[string]any{"sessions": out})
}

// FreshRequest is POST /v1/sessions/fresh.
type FreshRequest struct {
	Channel string `json:"channel_id"`
	Binding string `json:"binding_id"`
}

func (s *Server) fresh(w http.ResponseWriter, r *http.Request) {
	var req FreshRequest
	if err := decode(w, r, MaxSmallBody, &req); err != nil {
		fail(w, err)
		return
	}
	if req.Channel == "" || req.Binding == "" {
		fail(w, fmt.Errorf("%w: channel_id and binding_id are required", daemon.ErrBadRequest))
		return
	}
	had, err := s.d.Fresh(session.Key{Channel: req.Channel, Binding: req.Binding})
	if err != nil {
		fail(w, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"stopped_process": had})
}

func (s *Server) bindings(w http.ResponseWriter, r *http.Request) {
	type row struct {
		ID         string `json:"id"`
		Handle     string `json:"handle"`
		Runtime    string `json:"runtime"`
		Command    string `json:"command"`
		Supervised bool   `json:"supervised"`
		Resident   bool   `json:"resident"`
		Restore    bool   `json:"restore"`
	}
	out := []row{}
	for _, b := range s.d.Config().Bindings {
		out = append(out, row{b.ID, b.Handle, b.Runtime, b.Command, b.Supervised, b.Resident, b.RestoreOn()})
	}
	writeJSON(w, http.StatusOK, map[string]any{"bindings": out})
}

// MessagesRequest is POST /v1/messages: a batch of channel messages.
type MessagesRequest struct {
	Messages []channel.Message `json:"messages"`
}

func (s *Server) messages(w http.ResponseWriter, r *http.Request) {
	var req MessagesRequest
	if err := decode(w, r, MaxMessagesBody, &req); err != nil {
		fail(w, err)
		return
	}
	if len(req.Messages) == 0 {
		fail(w, fmt.Errorf("%w: messages must hold at least one message", daemon.ErrBadRequest))
		return
	}
	added, err := s.d.PutMessages(req.Messages)
	if err != nil {
		fail(w, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"added": added, "duplicates": len(req.Messages) - added})
}

// LevelRequest is PUT /v1/log/level.
type LevelRequest struct {
	Level string `json:"level"`
}

func (s *Server) logLevel(w http.ResponseWriter, r *http.Request) {
	if s.level == nil {
		writeError(w, http.StatusNotFound, "not_found", "log level is not adjustable in this daemon")
		return
	}
	if r.Method == http.MethodPut {
		var req LevelRequest
		if err := decode(w, r, MaxSmallBody, &req); err != nil {
			fail(w, err)
			return
		}
		lvl, err := zapcore.ParseLevel(strings.ToLower(req.Level))
		if err != nil {
			fail(w, fmt.Errorf("%w: level %q: use debug, info, warn or error", daemon.ErrBadRequest, req.Level))
			return
		}
		s.level.SetLevel(lvl)
		s.log.Info("log level changed", zap.String("level", lvl.String()))
	}
	writeJSON(w, http.StatusOK, LevelRequest{Level: s.level.Level().String()})
}

// rss is a process's resident set size; 0 where it cannot be read.
func rss(pid int) int64 {
	n, _ := proc.RSS(pid)
	return n
}
