// Package client is the Go client of residentd's local API: a desktop app,
// a script or the residentd CLI use it to send mentions, push channel
// messages and manage sessions over the daemon's Unix socket.
//
// The zero Client works: it talks to the socket named by $RESIDENTD_SOCKET,
// or else the daemon's default path (DefaultSocketPath). Errors the daemon
// reports are *Error values; IsNotFound, IsBusy and IsCode classify them.
package client

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"unicode/utf8"

	"github.com/residentd/residentd/apitype"
)

// EnvSocket names the environment variable a zero Client reads its socket
// path from.
const EnvSocket = "RESIDENTD_SOCKET"

// DefaultSocketPath is where a daemon listens unless told otherwise:
// $XDG_RUNTIME_DIR/residentd/residentd.sock, or
// /tmp/residentd-<uid>/residentd.sock without a runtime directory.
func DefaultSocketPath() string {
	if d := os.Getenv("XDG_RUNTIME_DIR"); d != "" {
		return filepath.Join(d, "residentd", "residentd.sock")
	}
	return filepath.Join(os.TempDir(), fmt.Sprintf("residentd-%d", os.Getuid()), "residentd.sock")
}

// Client talks to one daemon. The zero value is ready to use; set Socket to
// pick the socket, or Dial to connect some other way. A Client is safe for
// concurrent use and reuses its connections; Close releases them.
type Client struct {
	// Socket is the daemon's Unix socket; "" means $RESIDENTD_SOCKET, or
	// DefaultSocketPath when that is unset.
	Socket string
	// Dial, when set, replaces dialing Socket.
	Dial func(ctx context.Context) (net.Conn, error)

	once sync.Once
	hc   *http.Client
}

// SocketPath is the socket the client dials (when Dial is not set).
func (c *Client) SocketPath() string {
	switch {
	case c.Socket != "":
		return c.Socket
	case os.Getenv(EnvSocket) != "":
		return os.Getenv(EnvSocket)
	}
	return DefaultSocketPath()
}

func (c *Client) http() *http.Client {
	c.once.Do(func() {
		dial := c.Dial
		if dial == nil {
			path := c.SocketPath()
			dial = func(ctx context.Context) (net.Conn, error) {
				var d net.Dialer
				return d.DialContext(ctx, "unix", path)
			}
		}
		c.hc = &http.Client{Transport: &http.Transport{
			DialContext:  func(ctx context.Context, _, _ string) (net.Conn, error) { return dial(ctx) },
			MaxIdleConns: 8,
		}}
	})
	return c.hc
}

// Close releases idle connections. The client stays usable.
func (c *Client) Close() {
	c.http().CloseIdleConnections()
}

// Error is an error the daemon answered with: the HTTP status, a stable code
// (apitype.Code*) and a message that says what failed and what to do.
type Error struct {
	Status  int
	Code    string
	Message string
}

func (e *Error) Error() string { return e.Message + " (" + e.Code + ")" }

// IsCode reports whether err is an *Error with code.
func IsCode(err error, code string) bool { return hasCode(err, code) }

// IsNotFound reports whether err says that what was named does not exist: a
// binding, a run, a history cursor or an endpoint.
func IsNotFound(err error) bool {
	return hasCode(err, apitype.CodeUnknownBinding, apitype.CodeUnknownRun, apitype.CodeNotFound)
}

// IsBusy reports whether err says the daemon could not take the turn now
// and a later try may succeed: every slot stayed busy, or the binding's
// agent is backing off after repeated failures.
func IsBusy(err error) bool {
	return hasCode(err, apitype.CodeQueueFull, apitype.CodeQueueTimeout, apitype.CodeAgentBackoff)
}

// hasCode reports whether err is an *Error with one of codes.
func hasCode(err error, codes ...string) bool {
	var e *Error
	return errors.As(err, &e) && slices.Contains(codes, e.Code)
}

// do sends a JSON request and decodes a JSON response into out (nil: the
// body is discarded).
func (c *Client) do(ctx context.Context, method, path string, in, out any) error {
	resp, err := c.send(ctx, method, path, nil, in)
	if err != nil {
		return err
	}
	defer closeBody(resp)
	if out == nil {
		return nil
	}
	return decodeJSON(resp, out)
}

func decodeJSON(resp *http.Response, out any) error {
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		return fmt.Errorf("client: %s %s: decode response: %w", resp.Request.Method, resp.Request.URL.Path, err)
	}
	return nil
}

// send issues one request; an error response becomes an *Error.
func (c *Client) send(ctx context.Context, method, path string, header http.Header, in any) (*http.Response, error) {
	var body io.Reader
	if in != nil {
		data, err := json.Marshal(in)
		if err != nil {
			return nil, fmt.Errorf("client: %s %s: encode request: %w", method, path, err)
		}
		body = bytes.NewReader(data)
	}
	req, err := http.NewRequestWithContext(ctx, method, "http://residentd"+path, body)
	if err != nil {
		return nil, fmt.Errorf("client: %s %s: %w", method, path, err)
	}
	for k, v := range header {
		req.Header[k] = v
	}
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.http().Do(req)
	if err != nil {
		// *url.Error repeats the method and URL; say them once.
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		if ctx.Err() != nil {
			return nil, fmt.Errorf("client: %s %s on %s: %w", method, req.URL.Path, c.where(), err)
		}
		return nil, fmt.Errorf("client: %s %s on %s: %w (is the daemon running? start it with `residentd serve`)", method, req.URL.Path, c.where(), err)
	}
	if resp.StatusCode >= 300 {
		defer closeBody(resp)
		data, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		var env apitype.ErrorBody
		if json.Unmarshal(data, &env) != nil || env.Error.Code == "" {
			// Not the daemon's error envelope (a proxy, an old daemon).
			return nil, &Error{Status: resp.StatusCode, Code: "http_" + strconv.Itoa(resp.StatusCode), Message: string(bytes.TrimSpace(data))}
		}
		return nil, &Error{Status: resp.StatusCode, Code: env.Error.Code, Message: env.Error.Message}
	}
	return resp, nil
}

func (c *Client) where() string {
	if c.Dial != nil {
		return "the dialed connection"
	}
	return c.SocketPath()
}

// closeBody reads the rest of a body before closing it, so the connection
// goes back to the pool instead of being torn down.
func closeBody(resp *http.Response) {
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20))
	_ = resp.Body.Close()
}

// Health returns the daemon's health.
func (c *Client) Health(ctx context.Context) (apitype.Health, error) {
	var h apitype.Health
	err := c.do(ctx, http.MethodGet, "/v1/health", nil, &h)
	return h, err
}

// Turn submits a mention and follows its run: on (when not nil) gets each
// event as it arrives, keepalives left out. It returns the done event, or
// the error the daemon reported; an error that arrives as the stream's last
// line is an *Error too. Ending ctx stops following; the run goes on (see
// Cancel), and Follow picks it up again.
func (c *Client) Turn(ctx context.Context, req apitype.TurnRequest, on func(apitype.Event)) (apitype.Event, error) {
	resp, err := c.send(ctx, http.MethodPost, "/v1/turns?lean=true", nil, req)
	if err != nil {
		return apitype.Event{}, err
	}
	defer closeBody(resp)
	return c.readStream(ctx, resp.Body, on)
}

// Submit starts a run for a mention without following it and returns the
// run as it stands (queued, usually).
func (c *Client) Submit(ctx context.Context, req apitype.TurnRequest) (apitype.Run, error) {
	var out apitype.Run
	err := c.do(ctx, http.MethodPost, "/v1/turns?stream=false", req, &out)
	return out, err
}

// ErrNothingAfter is what Follow returns, wrapped in a *NothingAfterError,
// when the run ended without an event after the sequence number asked for.
var ErrNothingAfter = errors.New("no events after the given sequence number")

// NothingAfterError says that a followed run ended with nothing after the
// sequence number asked for: Run is the run as it ended (its LastSeq and
// Result).
type NothingAfterError struct {
	After int64
	Run   apitype.Run
}

func (e *NothingAfterError) Error() string {
	return fmt.Sprintf("run %q ended (%s) at seq %d; nothing after seq %d", e.Run.ID, e.Run.State, e.Run.LastSeq, e.After)
}

func (e *NothingAfterError) Unwrap() error { return ErrNothingAfter }

// Follow re-attaches to run runID: on gets the events after sequence
// number after (0: all the run still holds), then the live ones, and Follow
// returns the final event as Turn does. When the events asked for fell out
// of the run's buffer the error has code apitype.CodeEventsGone; Run still
// has the final result. When after is at or beyond the run's last event,
// Follow waits for events numbered above it and, if the run ends first,
// returns the run's final event with a *NothingAfterError
// (errors.Is(err, ErrNothingAfter)).
func (c *Client) Follow(ctx context.Context, runID string, after int64, on func(apitype.Event)) (apitype.Event, error) {
	resp, err := c.send(ctx, http.MethodGet, "/v1/runs/"+url.PathEscape(runID)+"/events?lean=true&after="+strconv.FormatInt(after, 10), nil, nil)
	if err != nil {
		return apitype.Event{}, err
	}
	defer closeBody(resp)
	ev, err := c.readStream(ctx, resp.Body, on)
	if errors.Is(err, errEmptyStream) {
		run, rerr := c.Run(ctx, runID)
		if rerr != nil {
			return apitype.Event{}, fmt.Errorf("client: run %q ended with nothing after seq %d; reading its result: %w", runID, after, rerr)
		}
		if run.Result == nil {
			// The stream ended (the daemon stopping, a proxy closing an
			// idle connection) while the run goes on.
			return apitype.Event{}, fmt.Errorf("client: run %q: the stream ended while the run is %s, with nothing after seq %d yet: %w", runID, run.State, after, errEmptyStream)
		}
		return *run.Result, &NothingAfterError{After: after, Run: run}
	}
	return ev, err
}

// Events follows the daemon-wide feed (GET /v1/events): on gets every
// announcement of a run's start and end numbered above after (0: all the
// feed still holds), as they come, until ctx ends (Events then returns
// ctx's error) or the stream does. A position beyond the newest waits for
// the next announcement. When the announcements asked for fell out of the
// feed the error has code apitype.CodeEventsGone: list the runs and follow
// on from the seq its message names.
func (c *Client) Events(ctx context.Context, after int64, on func(apitype.FeedEvent)) error {
	resp, err := c.send(ctx, http.MethodGet, "/v1/events?after="+strconv.FormatInt(after, 10), nil, nil)
	if err != nil {
		return err
	}
	defer closeBody(resp)
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		var ev apitype.FeedEvent
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			return fmt.Errorf("client: event feed: bad line: %w", err)
		}
		if ev.Event != apitype.EventKeepalive {
			on(ev)
		}
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("client: event feed: %w", err)
	}
	return nil
}

// errEmptyStream is a stream that ended cleanly without a single event.
var errEmptyStream = errors.New("client: the stream ended without an event")

// Run returns one run: its state and, once it ended, its result.
func (c *Client) Run(ctx context.Context, runID string) (apitype.Run, error) {
	var out apitype.Run
	err := c.do(ctx, http.MethodGet, "/v1/runs/"+url.PathEscape(runID), nil, &out)
	return out, err
}

// Runs lists the queued, running and recently ended runs, oldest first.
func (c *Client) Runs(ctx context.Context) ([]apitype.Run, error) {
	var out apitype.Runs
	err := c.do(ctx, http.MethodGet, "/v1/runs", nil, &out)
	return out.Runs, err
}

// Answer answers permission request requestID of run runID with one of the
// options its permission_request event listed.
func (c *Client) Answer(ctx context.Context, runID, requestID, optionID string) error {
	return c.do(ctx, http.MethodPost, "/v1/runs/"+url.PathEscape(runID)+"/permissions/"+url.PathEscape(requestID), apitype.PermissionAnswer{OptionID: optionID}, nil)
}

// AnswerAs is Answer naming who answers (answered_by, the chat's user id),
// which a binding with approvers requires.
func (c *Client) AnswerAs(ctx context.Context, runID, requestID, optionID, by string) error {
	return c.do(ctx, http.MethodPost, "/v1/runs/"+url.PathEscape(runID)+"/permissions/"+url.PathEscape(requestID), apitype.PermissionAnswer{OptionID: optionID, AnsweredBy: by}, nil)
}

// AnswerElicitation answers elicitation request requestID of run runID:
// Action accept with the filled-in form as Content, decline or cancel;
// AnsweredBy names who answers.
func (c *Client) AnswerElicitation(ctx context.Context, runID, requestID string, ans apitype.ElicitationAnswer) error {
	return c.do(ctx, http.MethodPost, "/v1/runs/"+url.PathEscape(runID)+"/elicitations/"+url.PathEscape(requestID), ans, nil)
}

// Version returns the daemon's version, API version and capabilities.
func (c *Client) Version(ctx context.Context) (apitype.Version, error) {
	var out apitype.Version
	err := c.do(ctx, http.MethodGet, "/v1/version", nil, &out)
	return out, err
}

// updatePrefix opens every update event line the daemon writes (the event
// name is an Event's first field).
var updatePrefix = []byte(`{"event":"update",`)

// startedPrefix opens every started event line the daemon writes.
var startedPrefix = []byte(`{"event":"started",`)

// leanUpdate is what readStream needs of an update nobody else sees: its
// seq, whether it is a chunk of the reply, and its text, decoded without a
// string made for either.
type leanUpdate struct {
	Seq    int64 `json:"seq"`
	Update struct {
		Kind chunkKind `json:"kind"`
		Text chunkText `json:"text"`
	} `json:"update"`
}

// leanSeq is what readStream needs of a started event nobody else sees.
type leanSeq struct {
	Seq int64 `json:"seq"`
}

// chunkKind is an update's kind as whether it is apitype.UpdateMessage;
// anything but a string is refused as a string field refuses it.
type chunkKind bool

func (k *chunkKind) UnmarshalJSON(b []byte) error {
	if len(b) > 0 && b[0] == '"' && bytes.IndexByte(b, '\\') < 0 {
		*k = string(b) == `"`+apitype.UpdateMessage+`"`
		return nil
	}
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return err
	}
	*k = s == apitype.UpdateMessage
	return nil
}

// chunkText is an update's text decoded into a buffer kept from one line
// to the next; anything but a string is refused as a string field
// refuses it.
type chunkText []byte

func (t *chunkText) UnmarshalJSON(b []byte) error {
	if len(b) >= 2 && b[0] == '"' && bytes.IndexByte(b, '\\') < 0 && utf8.Valid(b) {
		*t = append((*t)[:0], b[1:len(b)-1]...)
		return nil
	}
	var s string // escapes, or bytes that are not UTF-8: as Unmarshal reads them
	if err := json.Unmarshal(b, &s); err != nil {
		return err
	}
	*t = append((*t)[:0], s...)
	return nil
}

// streamReader is what readStream reuses from one stream to the next: its
// scanner's buffer (most of a turn's bytes on the client), its line
// decoder and its decoding targets. Nothing read keeps a reference into
// the buffer: decoding copies.
type streamReader struct {
	buf   []byte
	lines apitype.LineDecoder
	u     leanUpdate
	seq   leanSeq
	ev    apitype.Event
}

var streamReaders = sync.Pool{New: func() any { return &streamReader{buf: make([]byte, 64<<10)} }}

// readStream reads NDJSON events up to the done or error line. The stream's
// done event leaves out the reply text its chunks already carried; the
// returned one has it, joined from the chunks when the stream held every
// event from the first, else read from the run's result.
func (c *Client) readStream(ctx context.Context, r io.Reader, on func(apitype.Event)) (apitype.Event, error) {
	rs := streamReaders.Get().(*streamReader)
	defer streamReaders.Put(rs)
	sc := bufio.NewScanner(r)
	sc.Buffer(rs.buf, 16<<20)
	lines := &rs.lines
	var text strings.Builder
	var seq int64 // the last seq read; whole while every one followed the one before
	whole := true
	// One of each, decoded into line after line: a decoding target is
	// an allocation.
	u, ls, ev := &rs.u, &rs.seq, &rs.ev
	defer func() { *ev = apitype.Event{} }() // nothing it points to stays in the pool
	for sc.Scan() {
		if on == nil && bytes.HasPrefix(sc.Bytes(), updatePrefix) {
			// Nobody sees the update itself: only its seq and text count.
			u.Seq, u.Update.Kind, u.Update.Text = 0, false, u.Update.Text[:0]
			if err := lines.Decode(sc.Bytes(), u); err != nil {
				return apitype.Event{}, fmt.Errorf("client: turn stream: bad event line: %w", err)
			}
			if u.Seq != seq+1 {
				whole = false
			}
			seq = u.Seq
			if u.Update.Kind {
				text.Write(u.Update.Text)
			}
			continue
		}
		if on == nil && bytes.HasPrefix(sc.Bytes(), startedPrefix) {
			// Nobody sees the started event: only its seq counts.
			*ls = leanSeq{}
			if err := lines.Decode(sc.Bytes(), ls); err != nil {
				return apitype.Event{}, fmt.Errorf("client: turn stream: bad event line: %w", err)
			}
			if ls.Seq != seq+1 {
				whole = false
			}
			seq = ls.Seq
			continue
		}
		*ev = apitype.Event{} // fresh pointers: the last one went to on
		if err := lines.Decode(sc.Bytes(), ev); err != nil {
			return apitype.Event{}, fmt.Errorf("client: turn stream: bad event line: %w", err)
		}
		if ev.Event == apitype.EventKeepalive {
			continue
		}
		if ev.Seq != seq+1 {
			whole = false
		}
		seq = ev.Seq
		if ev.Update != nil && ev.Update.Kind == apitype.UpdateMessage {
			text.WriteString(ev.Update.Text)
		}
		if ev.Event == apitype.EventDone && ev.Text == "" {
			if whole {
				ev.Text = text.String()
			} else {
				run, err := c.Run(ctx, ev.RunID)
				if err != nil {
					return *ev, fmt.Errorf("client: read the reply of run %q: %w", ev.RunID, err)
				}
				if run.Result != nil {
					ev.Text = run.Result.Text
				}
			}
		}
		if on != nil {
			on(*ev)
		}
		switch ev.Event {
		case apitype.EventDone:
			return *ev, nil
		case apitype.EventError:
			return *ev, &Error{Status: http.StatusOK, Code: ev.Code, Message: ev.Message}
		}
	}
	if err := sc.Err(); err != nil {
		return apitype.Event{}, fmt.Errorf("client: turn stream: %w", err)
	}
	if seq == 0 {
		return apitype.Event{}, errEmptyStream
	}
	return apitype.Event{}, errors.New("client: turn stream ended without a done or error event")
}

// Cancel cancels a run by its id.
func (c *Client) Cancel(ctx context.Context, runID string) error {
	return c.do(ctx, http.MethodPost, "/v1/runs/"+url.PathEscape(runID)+"/cancel", nil, nil)
}

// Sessions lists the live agent processes.
func (c *Client) Sessions(ctx context.Context) ([]apitype.Session, error) {
	var out apitype.Sessions
	err := c.do(ctx, http.MethodGet, "/v1/sessions", nil, &out)
	return out.Sessions, err
}

// Worktrees lists every key's git worktree (bindings with workspace
// worktree), with its uncommitted changes.
func (c *Client) Worktrees(ctx context.Context) ([]apitype.Worktree, error) {
	out, err := c.Listing(ctx)
	return out.Worktrees, err
}

// Listing is the whole sessions listing: the live sessions, the spares
// and the keys' worktrees.
func (c *Client) Listing(ctx context.Context) (apitype.Sessions, error) {
	var out apitype.Sessions
	err := c.do(ctx, http.MethodGet, "/v1/sessions", nil, &out)
	return out, err
}

// Bindings lists the configured bindings.
func (c *Client) Bindings(ctx context.Context) ([]apitype.Binding, error) {
	var out apitype.Bindings
	err := c.do(ctx, http.MethodGet, "/v1/bindings", nil, &out)
	return out.Bindings, err
}

// Fresh starts the (channel, binding) session fresh: its process, saved
// native session, conversation and watermarks go. It reports whether a
// process was stopped (or will be, as a running turn ends).
func (c *Client) Fresh(ctx context.Context, channelID, binding string) (bool, error) {
	var out apitype.FreshResponse
	err := c.do(ctx, http.MethodPost, "/v1/sessions/fresh", apitype.FreshRequest{Channel: channelID, Binding: binding}, &out)
	return out.StoppedProcess, err
}

// FreshWith starts the key req names fresh, as Fresh and FreshThread do;
// with req.ResetWorktree it also resets the key's git worktree, refused
// (409 worktree_has_changes, nothing done) while it has uncommitted
// changes.
func (c *Client) FreshWith(ctx context.Context, req apitype.FreshRequest) (apitype.FreshResponse, error) {
	var out apitype.FreshResponse
	err := c.do(ctx, http.MethodPost, "/v1/sessions/fresh", req, &out)
	return out, err
}

// FreshThread starts a thread's own session over (a binding of scope
// thread): the thread of root message root in the channel.
func (c *Client) FreshThread(ctx context.Context, channelID, binding, root string) (bool, error) {
	var out apitype.FreshResponse
	err := c.do(ctx, http.MethodPost, "/v1/sessions/fresh", apitype.FreshRequest{Channel: channelID, Binding: binding, ThreadRoot: &root}, &out)
	return out.StoppedProcess, err
}

// ReloadConfig has the daemon read its config file again (as SIGHUP does)
// and returns what changed and how each change took effect. A file that
// does not load or validate is an *Error with code invalid_config (the
// config in force stays); a daemon started without a file answers
// no_config_file.
func (c *Client) ReloadConfig(ctx context.Context) (apitype.ConfigReload, error) {
	var out apitype.ConfigReload
	err := c.do(ctx, http.MethodPost, "/v1/config/reload", nil, &out)
	return out, err
}

// SessionOptions returns a key's session options: its own and those in
// effect (the binding's with the key's on top).
func (c *Client) SessionOptions(ctx context.Context, channelID, binding string) (apitype.SessionOptions, error) {
	var out apitype.SessionOptions
	q := url.Values{"channel_id": {channelID}, "binding_id": {binding}}
	err := c.do(ctx, http.MethodGet, "/v1/sessions/options?"+q.Encode(), nil, &out)
	return out, err
}

// SetSessionOptions replaces a key's own session options (empty clears
// them); the key's next turn applies what changed.
func (c *Client) SetSessionOptions(ctx context.Context, channelID, binding string, opts map[string]string) (apitype.SessionOptions, error) {
	if opts == nil {
		opts = map[string]string{}
	}
	var out apitype.SessionOptions
	err := c.do(ctx, http.MethodPut, "/v1/sessions/options", apitype.SessionOptionsRequest{Channel: channelID, Binding: binding, Options: opts}, &out)
	return out, err
}

// Budgets returns the daily budgets and what the day has cost.
func (c *Client) Budgets(ctx context.Context) (apitype.Budgets, error) {
	var out apitype.Budgets
	err := c.do(ctx, http.MethodGet, "/v1/budgets", nil, &out)
	return out, err
}

// PutMessages pushes channel messages.
func (c *Client) PutMessages(ctx context.Context, msgs []apitype.Message) (apitype.MessagesResponse, error) {
	var out apitype.MessagesResponse
	err := c.do(ctx, http.MethodPost, "/v1/messages", apitype.MessagesRequest{Messages: msgs}, &out)
	return out, err
}

// DeleteMessage deletes a channel message for good: no session is shown
// it again and channel_history leaves it out. IsNotFound tells a message
// the channel does not hold.
func (c *Client) DeleteMessage(ctx context.Context, channelID, messageID string) error {
	return c.do(ctx, http.MethodDelete, "/v1/messages/"+url.PathEscape(channelID)+"/"+url.PathEscape(messageID), nil, nil)
}

// SetLogLevel changes the daemon's log level (debug, info, warn or error).
func (c *Client) SetLogLevel(ctx context.Context, level string) error {
	return c.do(ctx, http.MethodPut, "/v1/log/level", apitype.LogLevel{Level: level}, nil)
}

// LogLevel returns the daemon's current log level.
func (c *Client) LogLevel(ctx context.Context) (string, error) {
	var out apitype.LogLevel
	err := c.do(ctx, http.MethodGet, "/v1/log/level", nil, &out)
	return out.Level, err
}

// Metrics returns the daemon's Prometheus exposition text.
func (c *Client) Metrics(ctx context.Context) (string, error) {
	resp, err := c.send(ctx, http.MethodGet, "/metrics", nil, nil)
	if err != nil {
		return "", err
	}
	defer closeBody(resp)
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return "", fmt.Errorf("client: GET /metrics: %w", err)
	}
	return string(data), nil
}
