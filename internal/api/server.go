// Package api owns residentd's local API server: HTTP/1.1 with JSON on a
// Unix socket, versioned under /v1, for the desktop app, the CLI and agents'
// MCP servers. The wire types are in package apitype and the Go client in
// package client; this package is the only place errors become HTTP codes.
package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/residentd/residentd/apitype"
	"github.com/residentd/residentd/internal/budget"
	"github.com/residentd/residentd/internal/channel"
	"github.com/residentd/residentd/internal/child"
	"github.com/residentd/residentd/internal/daemon"
	"github.com/residentd/residentd/internal/inbox"
	"github.com/residentd/residentd/internal/run"
	"github.com/residentd/residentd/internal/session"
)

// Request body limits.
const (
	MaxTurnBody     = 1 << 20  // one mention
	MaxMessagesBody = 16 << 20 // one batch of channel messages
	MaxSmallBody    = 64 << 10 // everything else
)

var errNotUnix = errors.New("api: not a unix socket connection")

// Turns runs turns: what the API asks of *daemon.Daemon about runs,
// permissions, budgets and the daemon's health.
type Turns interface {
	// Submit starts a run for a mention; it goes on whoever follows it.
	Submit(req apitype.TurnRequest) (*run.Run, error)
	Run(runID string) (*run.Run, error)
	Runs() []apitype.Run
	// Feed announces every run's start and end (GET /v1/events).
	RunFeed() *run.Feed
	Cancel(runID string) error
	// AnswerAs answers a permission request as person by ("" names
	// nobody); AnswerElicitation an elicitation request.
	AnswerAs(runID, requestID, optionID, by string) error
	AnswerElicitation(runID, requestID string, ans apitype.ElicitationAnswer) error
	Budgets() (apitype.Budgets, error)
	Status() apitype.Health // live, busy, queued, max_live, bindings
}

// Sessions is the agent sessions kept per key: listing, start fresh, the
// keys' session options, and the configured bindings (*daemon.Daemon).
type Sessions interface {
	Sessions() []apitype.Session
	// Spares lists the bindings' spare processes (no key yet).
	Spares() []apitype.Spare
	// FreshKey starts a key over, and with resetWorktree resets its git
	// worktree; it reports whether a process was stopped and what the
	// reset did.
	FreshKey(k session.Key, resetWorktree bool) (apitype.FreshResponse, error)
	// Worktrees lists the keys' git worktrees, of one channel when ch is
	// not "".
	Worktrees(ch string) []apitype.Worktree
	SessionOptions(k session.Key) (apitype.SessionOptions, error)
	SetSessionOptions(k session.Key, opts map[string]string) (apitype.SessionOptions, error)
	Bindings() []apitype.Binding
	// CancelBackground asks the agent of key k's live process to cancel one
	// item of its background work.
	CancelBackground(k session.Key, typ, item string) (apitype.BackgroundCancelResponse, error)
}

// Reloader reloads the config file (*server.Server, which tells the
// service manager, over *daemon.Daemon).
type Reloader interface {
	Reload() (apitype.ConfigReload, error)
}

// Channel is what the desktop app pushes and the agents' tools read
// (*inbox.Inbox).
type Channel interface {
	Push(batch []inbox.Push) (apitype.MessagesResponse, error)
	DeleteMessage(ch, id string) error
	History(ch, thread, before string, limit int) ([]apitype.HistoryMessage, string, error)
	HasMessage(ch, id string) (bool, error)
	Roster(ch string) (members []apitype.Member, pushed bool, err error)
	SetRoster(ch string, members []apitype.Member) error
	Project(ch string) (string, error)
	SetProject(ch, project string) (string, error)
	AddActivity(project string, items []apitype.Activity) error
	Activity(project string, n int) ([]apitype.Activity, error)
}

// Server serves the API for one daemon. Create it with NewServer and run it
// with Serve; Shutdown stops it.
type Server struct {
	turns   Turns
	keys    Sessions
	inbox   Channel
	log     *zap.Logger
	level   *zap.AtomicLevel
	metrics http.Handler
	version string
	started time.Time
	srv     *http.Server
	mux     *http.ServeMux
	uid     int

	keepalive time.Duration
	listeners func() []apitype.Listener
	// base is every request's parent context; Close cancels it, so streams
	// still open at a hard stop end.
	base       context.Context
	cancelBase context.CancelFunc
	agents     AgentTrees
	config     Reloader
}

// AgentTrees tells whether a socket peer belongs to an agent's process
// tree; *child.Lineage implements it.
type AgentTrees interface {
	// Agent judges pid, a process that existed at notAfter (child.Now).
	Agent(pid int, notAfter uint64) child.Verdict
}

// ServerOptions wires a Server.
type ServerOptions struct {
	Turns    Turns
	Sessions Sessions
	Channel  Channel
	Log      *zap.Logger
	Level    *zap.AtomicLevel // changed by PUT /v1/log/level; nil disables it
	Metrics  http.Handler     // served at /metrics; nil disables it
	Version  string
	// Keepalive is how often a quiet stream gets a keepalive line; 0 means
	// 15s.
	Keepalive time.Duration
	// Tools checks the capabilities of agents' MCP servers on /v1/tools;
	// nil answers those endpoints with 503.
	Tools Capabilities
	// Listeners reports the daemon's listeners and their errors in
	// GET /v1/health; nil leaves them out.
	Listeners func() []apitype.Listener
	// Agents tells agents' processes from other clients; nil means a
	// child.Lineage of this process without cgroups or adoption.
	Agents AgentTrees
	// Config serves POST /v1/config/reload; nil answers it no_config_file.
	Config Reloader
}

type connKey struct{}

// peer is one socket connection's caller, judged once per connection on
// its first request: a connection keeps its peer for its lifetime.
type peer struct {
	conn     net.Conn
	accepted uint64 // child.Now at accept: the peer process existed by then

	once    sync.Once
	uid     int
	err     error // the credentials could not be read
	verdict child.Verdict
}

func (p *peer) judge(trees AgentTrees) {
	p.once.Do(func() {
		var pid int
		if p.uid, pid, p.err = peerCred(p.conn); p.err == nil {
			p.verdict = trees.Agent(pid, p.accepted)
		}
	})
}

// NewServer returns a Server; Serve starts it.
func NewServer(o ServerOptions) *Server {
	if o.Log == nil {
		o.Log = zap.NewNop()
	}
	if o.Keepalive <= 0 {
		o.Keepalive = 15 * time.Second
	}
	if o.Agents == nil {
		o.Agents = &child.Lineage{Self: os.Getpid()}
	}
	s := &Server{turns: o.Turns, keys: o.Sessions, inbox: o.Channel, log: o.Log.Named("api"), level: o.Level, metrics: o.Metrics, version: o.Version, started: time.Now(), uid: os.Getuid(), keepalive: o.Keepalive, listeners: o.Listeners, agents: o.Agents, config: o.Config}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/health", s.health)
	mux.HandleFunc("GET /v1/version", s.versionInfo)
	mux.HandleFunc("POST /v1/turns", s.turn)
	mux.HandleFunc("POST /v1/turns/{run}/cancel", s.cancel)
	mux.HandleFunc("GET /v1/runs", s.runs)
	mux.HandleFunc("GET /v1/runs/{run}", s.run)
	mux.HandleFunc("GET /v1/runs/{run}/events", s.events)
	mux.HandleFunc("GET /v1/events", s.runFeed)
	mux.HandleFunc("POST /v1/runs/{run}/cancel", s.cancel)
	mux.HandleFunc("POST /v1/runs/{run}/permissions/{request}", s.answer)
	mux.HandleFunc("POST /v1/runs/{run}/elicitations/{request}", s.elicited)
	mux.HandleFunc("GET /v1/sessions", s.sessions)
	mux.HandleFunc("POST /v1/sessions/fresh", s.fresh)
	mux.HandleFunc("POST /v1/sessions/background/cancel", s.cancelBackground)
	mux.HandleFunc("GET /v1/sessions/options", s.sessionOptions)
	mux.HandleFunc("PUT /v1/sessions/options", s.setSessionOptions)
	mux.HandleFunc("GET /v1/budgets", s.budgets)
	mux.HandleFunc("GET /v1/bindings", s.bindings)
	mux.HandleFunc("POST /v1/config/reload", s.reload)
	mux.HandleFunc("POST /v1/messages", s.messages)
	mux.HandleFunc("DELETE /v1/messages/{channel}/{id}", s.deleteMessage)
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
		for _, m := range []string{http.MethodGet, http.MethodPost, http.MethodPut, http.MethodDelete} {
			alt := r.Clone(r.Context())
			alt.Method = m
			if _, pattern := s.mux.Handler(alt); pattern != "/" {
				allowed = append(allowed, m)
			}
		}
		if len(allowed) > 0 {
			w.Header().Set("Allow", strings.Join(allowed, ", "))
			writeError(w, http.StatusMethodNotAllowed, apitype.CodeMethodNotAllowed, fmt.Sprintf("%s %s is not allowed; use %s", r.Method, r.URL.Path, strings.Join(allowed, " or ")))
			return
		}
		writeError(w, http.StatusNotFound, apitype.CodeNotFound, fmt.Sprintf("no endpoint %s %s; see docs/API.md", r.Method, r.URL.Path))
	})
	s.mux = mux
	handler := s.guard(mux)
	if t, err := openTracer(os.Getenv(TraceEnv)); err != nil {
		s.log.Warn("no response trace", zap.Error(err))
	} else if t != nil {
		handler = t.wrap(handler)
	}
	s.base, s.cancelBase = context.WithCancel(context.Background())
	s.srv = &http.Server{
		Handler:           handler,
		BaseContext:       func(net.Listener) context.Context { return s.base },
		ReadHeaderTimeout: 10 * time.Second,
		ConnContext: func(ctx context.Context, c net.Conn) context.Context {
			if _, unixConn := c.(*net.UnixConn); !unixConn {
				return ctx
			}
			return context.WithValue(ctx, connKey{}, &peer{conn: c, accepted: child.Now()})
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

// Shutdown stops accepting and waits for open requests up to ctx. A run's
// stream stays open until the run ends.
func (s *Server) Shutdown(ctx context.Context) error { return s.srv.Shutdown(ctx) }

// Close ends every open request and connection now. Idempotent.
func (s *Server) Close() error {
	s.cancelBase()
	return s.srv.Close()
}

// guard refuses browsers, other users, and agents outside the tool
// endpoints before any handler runs.
func (s *Server) guard(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Origin") != "" || r.Header.Get("Sec-Fetch-Site") != "" {
			writeError(w, http.StatusForbidden, apitype.CodeForbiddenOrigin, "requests from browsers are refused; the local API is for the desktop app and the CLI")
			return
		}
		if p, ok := r.Context().Value(connKey{}).(*peer); ok {
			p.judge(s.agents)
			if p.err != nil {
				writeError(w, http.StatusForbidden, apitype.CodeForbidden, "cannot read the peer's credentials: "+p.err.Error())
				return
			}
			if p.uid != s.uid {
				s.log.Warn("refused peer", zap.Int("peer_uid", p.uid))
				writeError(w, http.StatusForbidden, apitype.CodeForbidden, fmt.Sprintf("peer uid %d is not the daemon's uid %d", p.uid, s.uid))
				return
			}
			if p.verdict.Agent && !strings.HasPrefix(r.URL.Path, toolsPrefix) {
				s.log.Warn("refused an agent outside its tools", zap.String("path", r.URL.Path), zap.String("why", p.verdict.Why))
				writeError(w, http.StatusForbidden, apitype.CodeAgentForbidden, fmt.Sprintf("%s %s is not open to agents (%s); an agent's process tree may use only %s* with its capability", r.Method, r.URL.Path, p.verdict.Why, toolsPrefix))
				return
			}
		}
		next.ServeHTTP(w, r)
	})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	enc.Encode(v)
}

// reply writes v with status, or err when it is not nil.
func reply(w http.ResponseWriter, status int, v any, err error) {
	if err != nil {
		fail(w, err)
		return
	}
	writeJSON(w, status, v)
}

func writeError(w http.ResponseWriter, status int, code, msg string) {
	writeJSON(w, status, apitype.ErrorBody{Error: apitype.Error{Code: code, Message: msg}})
}

// classify maps an error to its HTTP status and stable code: the API's own
// errors here, the daemon's by daemon.Code.
func classify(err error) (int, string) {
	var mbe *http.MaxBytesError
	switch {
	case errors.As(err, &mbe):
		return http.StatusRequestEntityTooLarge, apitype.CodePayloadTooLarge
	case errors.Is(err, errTooDeep):
		return http.StatusBadRequest, apitype.CodeNestingTooDeep
	case errors.Is(err, errInvalidID):
		return http.StatusBadRequest, apitype.CodeInvalidID
	case errors.Is(err, errDecode), errors.Is(err, errBadRequest), errors.Is(err, inbox.ErrBadRequest):
		return http.StatusBadRequest, apitype.CodeBadRequest
	}
	code := daemon.Code(err)
	return statusOf(code), code
}

// statusOf is the HTTP status that carries an error code.
func statusOf(code string) int {
	switch code {
	case apitype.CodeBadRequest, apitype.CodeInvalidContent, apitype.CodeInvalidMessage, apitype.CodeInvalidAttachment, apitype.CodeBadOption, apitype.CodeBadCursor, apitype.CodeInvalidOption, apitype.CodeNestingTooDeep, apitype.CodeInvalidID:
		return http.StatusBadRequest
	case apitype.CodeBudgetExceeded:
		return http.StatusTooManyRequests
	case apitype.CodeMissingCapability, apitype.CodeBadCapability:
		return http.StatusUnauthorized
	case apitype.CodeForbidden, apitype.CodeNotAnApprover, apitype.CodeForbiddenOrigin, apitype.CodeOutOfScope, apitype.CodeAgentForbidden:
		return http.StatusForbidden
	case apitype.CodeUnknownBinding, apitype.CodeUnknownRun, apitype.CodeUnknownThread, apitype.CodeNotFound, apitype.CodeUnknownRequest:
		return http.StatusNotFound
	case apitype.CodeMethodNotAllowed:
		return http.StatusMethodNotAllowed
	case apitype.CodeInvalidConfig:
		return http.StatusUnprocessableEntity
	case apitype.CodeNoConfigFile:
		return http.StatusConflict
	case apitype.CodeRunInUse, apitype.CodeRunEnded, apitype.CodeAlreadyAnswered, apitype.CodeWorktreeHasChanges:
		return http.StatusConflict
	case apitype.CodeEventsGone:
		return http.StatusGone
	case apitype.CodePayloadTooLarge:
		return http.StatusRequestEntityTooLarge
	case apitype.CodeCancelled:
		return 499
	case apitype.CodeAgentStartFailed, apitype.CodeAgentCrashed, apitype.CodeAgentFailed, apitype.CodePolicyRefused:
		return http.StatusBadGateway
	case apitype.CodeAgentBackoff, apitype.CodeQueueFull, apitype.CodeQueueTimeout, apitype.CodeShuttingDown, apitype.CodeInterrupted, apitype.CodeToolsDisabled:
		return http.StatusServiceUnavailable
	case apitype.CodeTimeout:
		return http.StatusGatewayTimeout
	case apitype.CodeStorageFull:
		return http.StatusInsufficientStorage
	}
	return http.StatusInternalServerError
}

var (
	errDecode     = errors.New("malformed request")
	errBadRequest = errors.New("bad request")
)

// decode reads one JSON value of at most limit bytes into v, refusing
// unknown fields and trailing data. The body's depth is checked as it is
// read: a body nested deeper than MaxDepth is refused at the bracket that
// goes too deep, without reading the rest.
func decode(w http.ResponseWriter, r *http.Request, limit int64, v any) error {
	body := &depthReader{r: http.MaxBytesReader(w, r.Body, limit)}
	data, err := io.ReadAll(body)
	if err != nil {
		var mbe *http.MaxBytesError
		switch {
		case errors.Is(err, errTooDeep):
			return err
		case errors.As(err, &mbe):
			return fmt.Errorf("request body is over the %d-byte limit for %s: %w", limit, r.URL.Path, err)
		}
		return fmt.Errorf("%w: read body: %v", errDecode, err)
	}
	return decodeScanned(data, v)
}

func fail(w http.ResponseWriter, err error) {
	status, code := classify(err)
	var ex *budget.ExceededError
	if errors.As(err, &ex) {
		// A spent budget has a known end: say when to come back.
		w.Header().Set("Retry-After", strconv.Itoa(max(1, int(time.Until(ex.ResetsAt).Seconds()+0.999))))
	}
	writeError(w, status, code, err.Error())
}

func (s *Server) health(w http.ResponseWriter, r *http.Request) {
	h := s.turns.Status()
	h.OK, h.Version, h.Pid, h.UptimeS = true, s.version, os.Getpid(), int64(time.Since(s.started).Seconds())
	if s.listeners != nil {
		h.Listeners = s.listeners()
	}
	writeJSON(w, http.StatusOK, h)
}

func (s *Server) cancel(w http.ResponseWriter, r *http.Request) {
	if err := checkIDs(inPath("run", r.PathValue("run"))); err != nil {
		fail(w, err)
		return
	}
	err := s.turns.Cancel(r.PathValue("run"))
	reply(w, http.StatusAccepted, apitype.CancelResponse{Cancelled: r.PathValue("run")}, err)
}

func (s *Server) sessions(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, apitype.Sessions{Sessions: s.keys.Sessions(), Spares: s.keys.Spares(), Worktrees: s.keys.Worktrees("")})
}

// reload reads the daemon's config file again: 200 with what changed and
// how, 422 invalid_config when the file does not load or validate (the
// config in force stays), 409 no_config_file without a file. It takes no
// body.
func (s *Server) reload(w http.ResponseWriter, r *http.Request) {
	if s.config == nil {
		fail(w, fmt.Errorf("%w: this daemon serves no config reload", daemon.ErrNoConfigFile))
		return
	}
	out, err := s.config.Reload()
	reply(w, http.StatusOK, out, err)
}

func (s *Server) fresh(w http.ResponseWriter, r *http.Request) {
	var req apitype.FreshRequest
	k, err := decodeKeyed(w, r, &req, &req.Channel, &req.Binding)
	if err != nil {
		fail(w, err)
		return
	}
	if req.ThreadRoot != nil {
		if *req.ThreadRoot == "" {
			fail(w, fmt.Errorf("%w: thread_root_id must be null or a message id, not empty", errBadRequest))
			return
		}
		k.Thread = *req.ThreadRoot
	}
	out, err := s.keys.FreshKey(k, req.ResetWorktree)
	reply(w, http.StatusOK, out, err)
}

func (s *Server) cancelBackground(w http.ResponseWriter, r *http.Request) {
	var req apitype.BackgroundCancelRequest
	k, err := decodeKeyed(w, r, &req, &req.Channel, &req.Binding)
	if err == nil && req.ThreadRoot != nil {
		if *req.ThreadRoot == "" {
			err = fmt.Errorf("%w: thread_root_id must be null or a message id, not empty", errBadRequest)
		}
		k.Thread = *req.ThreadRoot
	}
	if err == nil && (req.Type != "terminal" && req.Type != "tool_call" || req.Item == "") {
		err = fmt.Errorf("%w: type must be terminal or tool_call, and item_id a listed item's", errBadRequest)
	}
	if err == nil {
		err = checkIDs(field("item_id", req.Item))
	}
	if err != nil {
		fail(w, err)
		return
	}
	out, err := s.keys.CancelBackground(k, req.Type, req.Item)
	reply(w, http.StatusOK, out, err)
}

// keyOf is the (channel, binding) key a request names; both are required.
func keyOf(channel, binding idField) (session.Key, error) {
	if channel.id == "" || binding.id == "" {
		return session.Key{}, fmt.Errorf("%w: channel_id and binding_id are required", errBadRequest)
	}
	if err := checkIDs(channel, binding); err != nil {
		return session.Key{}, err
	}
	return session.Key{Channel: channel.id, Binding: binding.id}, nil
}

// decodeKeyed decodes a small request body into req and returns the key
// named by its channel_id and binding_id fields (channel and binding
// point into req).
func decodeKeyed(w http.ResponseWriter, r *http.Request, req any, channel, binding *string) (session.Key, error) {
	if err := decode(w, r, MaxSmallBody, req); err != nil {
		return session.Key{}, err
	}
	return keyOf(field("channel_id", *channel), field("binding_id", *binding))
}

func (s *Server) sessionOptions(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	k, err := keyOf(inQuery("channel_id", q.Get("channel_id")), inQuery("binding_id", q.Get("binding_id")))
	if err != nil {
		fail(w, err)
		return
	}
	o, err := s.keys.SessionOptions(k)
	reply(w, http.StatusOK, o, err)
}

func (s *Server) setSessionOptions(w http.ResponseWriter, r *http.Request) {
	var req apitype.SessionOptionsRequest
	k, err := decodeKeyed(w, r, &req, &req.Channel, &req.Binding)
	if err != nil {
		fail(w, err)
		return
	}
	for id := range req.Options {
		if err := checkID("option id "+strconv.Quote(id), id); err != nil {
			fail(w, err)
			return
		}
	}
	if req.Options == nil {
		fail(w, fmt.Errorf("%w: options is required: an object of option ids and values, {} to clear the key's own", errBadRequest))
		return
	}
	o, err := s.keys.SetSessionOptions(k, req.Options)
	reply(w, http.StatusOK, o, err)
}

func (s *Server) budgets(w http.ResponseWriter, r *http.Request) {
	b, err := s.turns.Budgets()
	reply(w, http.StatusOK, b, err)
}

func (s *Server) bindings(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, apitype.Bindings{Bindings: s.keys.Bindings()})
}

// wireMessages is POST /v1/messages as it arrives: created_at is read as
// text so that a bad one is refused naming its message, as invalid_message.
type wireMessages struct {
	Messages []wireMessage `json:"messages"`
}

type wireMessage struct {
	ID         string `json:"id"`
	Channel    string `json:"channel_id"`
	ThreadRoot string `json:"thread_root_id,omitempty"`
	Author     string `json:"author"`
	AuthorKind string `json:"author_kind"`
	BindingID  string `json:"binding_id,omitempty"`
	CreatedAt  string `json:"created_at"`
	Body       string `json:"body"`

	Attachments []apitype.Attachment `json:"attachments,omitempty"`
}

func (s *Server) messages(w http.ResponseWriter, r *http.Request) {
	var req wireMessages
	if err := decode(w, r, MaxMessagesBody, &req); err != nil {
		fail(w, err)
		return
	}
	if len(req.Messages) == 0 {
		fail(w, fmt.Errorf("%w: messages must hold at least one message", errBadRequest))
		return
	}
	msgs := make([]inbox.Push, len(req.Messages))
	for i, m := range req.Messages {
		nth := func(name string) string { return fmt.Sprintf("messages[%d].%s", i, name) }
		if err := checkIDs(field(nth("id"), m.ID), field(nth("channel_id"), m.Channel), field(nth("thread_root_id"), m.ThreadRoot), field(nth("binding_id"), m.BindingID)); err != nil {
			fail(w, err)
			return
		}
		at, err := time.Parse(time.RFC3339Nano, m.CreatedAt)
		if err != nil {
			fail(w, fmt.Errorf("%w %q (message %d of %d): created_at %q is not an RFC 3339 time such as 2026-12-01T09:00:00Z; nothing of the batch was stored", channel.ErrInvalid, m.ID, i, len(req.Messages), m.CreatedAt))
			return
		}
		msgs[i] = inbox.Push{Message: channel.Message{ID: m.ID, Channel: m.Channel, ThreadRoot: m.ThreadRoot, Author: m.Author, AuthorKind: m.AuthorKind, BindingID: m.BindingID, CreatedAt: at, Body: m.Body}, Attachments: m.Attachments}
	}
	res, err := s.inbox.Push(msgs)
	reply(w, http.StatusOK, res, err)
}

// deleteMessage is DELETE /v1/messages/{channel}/{id} (both
// percent-encoded when they hold a "/").
func (s *Server) deleteMessage(w http.ResponseWriter, r *http.Request) {
	ch, id := r.PathValue("channel"), r.PathValue("id")
	if err := checkIDs(inPath("channel", ch), inPath("id", id)); err != nil {
		fail(w, err)
		return
	}
	err := s.inbox.DeleteMessage(ch, id)
	reply(w, http.StatusOK, apitype.MessageDeleted{Channel: ch, Deleted: id}, err)
}

func (s *Server) logLevel(w http.ResponseWriter, r *http.Request) {
	if s.level == nil {
		writeError(w, http.StatusNotFound, apitype.CodeNotFound, "log level is not adjustable in this daemon")
		return
	}
	if r.Method == http.MethodPut {
		var req apitype.LogLevel
		if err := decode(w, r, MaxSmallBody, &req); err != nil {
			fail(w, err)
			return
		}
		lvl, err := zapcore.ParseLevel(strings.ToLower(req.Level))
		if err != nil {
			fail(w, fmt.Errorf("%w: level %q: use debug, info, warn or error", errBadRequest, req.Level))
			return
		}
		s.level.SetLevel(lvl)
		s.log.Info("log level changed", zap.String("level", lvl.String()))
	}
	writeJSON(w, http.StatusOK, apitype.LogLevel{Level: s.level.Level().String()})
}
