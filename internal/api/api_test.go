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
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"github.com/residentd/residentd/apitype"
	"github.com/residentd/residentd/client"
	"github.com/residentd/residentd/internal/config"
	"github.com/residentd/residentd/internal/daemon"
	"github.com/residentd/residentd/internal/daemontest"
	"github.com/residentd/residentd/internal/inbox"
	"github.com/residentd/residentd/internal/testkit"
)

// TestMain lets the test binary double as the built-in agent and as a
// client running under another uid (see TestPeerUIDRefused).
func TestMain(m *testing.M) {
	testkit.Dispatch(testkit.Role{Env: "RESIDENTD_TEST_PEER", Main: func() int { return peerMain(os.Getenv("RESIDENTD_TEST_PEER")) }},
		testkit.Role{Env: probeEnv, Main: probeMain})
	os.Exit(runRecorded(m))
}

// peerMain GETs /v1/health over sock (as uid 65534 with
// RESIDENTD_TEST_PEER_NOBODY set) and prints "<status> <body>", or
// "dial-error <err>" when it cannot connect.
func peerMain(sock string) int {
	// Drop to nobody before dialing, when asked: SO_PEERCRED records who
	// connected.
	if os.Getenv("RESIDENTD_TEST_PEER_NOBODY") != "" {
		for _, drop := range []func() error{
			func() error { return syscall.Setgroups(nil) },
			func() error { return syscall.Setgid(65534) },
			func() error { return syscall.Setuid(65534) },
		} {
			if err := drop(); err != nil {
				fmt.Printf("drop to uid 65534: %v\n", err)
				return 1
			}
		}
	}
	hc := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", sock)
	}}}
	resp, err := hc.Get("http://residentd/v1/health")
	if err != nil {
		fmt.Printf("dial-error %v\n", err)
		return 0
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	fmt.Printf("%d %s", resp.StatusCode, body)
	return 0
}

// env is a daemon with the built-in agent, served on a real socket.
type env struct {
	d     *daemon.Daemon
	h     *daemontest.Daemon // what Restart restarts
	inbox *inbox.Inbox
	srv   *Server
	sock  string
	c     *client.Client
	hc    *http.Client // for requests the client would not send
}

// unixHTTP is an HTTP client that dials sock.
func unixHTTP(sock string) *http.Client {
	return &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", sock)
	}}}
}

// serve serves a Server with options so on the socket sub in a testkit.ShortDir
// until the test ends, then shuts it down and checks that it served
// without error. It returns the server and the socket's path.
func serve(t testing.TB, sub string, so ServerOptions) (*Server, string) {
	t.Helper()
	sock := filepath.Join(testkit.ShortDir(t), sub)
	ln, err := Listen(sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := NewServer(so)
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	t.Cleanup(func() {
		srv.Shutdown(context.Background())
		if err := <-served; err != nil {
			t.Errorf("serve: %v", err)
		}
	})
	return srv, sock
}

func newEnv(t *testing.T, tweak ...func(*config.Config)) *env {
	t.Helper()
	return newEnvWith(t, nil, tweak...)
}

// newEnvWith is newEnv with the server's options adjusted by opts.
func newEnvWith(t *testing.T, opts func(*ServerOptions, *daemon.Daemon), tweak ...func(*config.Config)) *env {
	t.Helper()
	exe := testkit.Exe(t)
	dir := t.TempDir()
	cfg := &config.Config{StateDir: dir, AgentGrace: config.Duration(time.Second)}
	builtin := config.Builtin(exe, dir)
	builtin.Env = map[string]string{"RESIDENTD_TEST_AGENT": "1"}
	cfg.Bindings = []config.Binding{builtin, {ID: "b-missing", Handle: "@missing", Command: "/nonexistent/residentd-agent-xyz"}}
	for _, f := range tweak {
		f(cfg)
	}
	log := zaptest.NewLogger(t, zaptest.Level(zap.ErrorLevel))
	h := daemontest.New(t, cfg, daemontest.Options{Log: log})
	level := zap.NewAtomicLevel()
	so := ServerOptions{Turns: h, Sessions: h, Channel: h.Inbox, Log: log, Level: &level, Metrics: h.Metrics.Handler(), Version: "test", Keepalive: time.Duration(cfg.Runs.Keepalive)}
	if opts != nil {
		opts(&so, h.Daemon)
	}
	srv, sock := serve(t, filepath.Join("s", "api.sock"), so)
	e := &env{d: h.Daemon, h: h, inbox: h.Inbox, srv: srv, sock: sock, c: &client.Client{Socket: sock}, hc: unixHTTP(sock)}
	t.Cleanup(func() { e.c.Close() })
	return e
}

// raw sends body as-is and returns the status and decoded error envelope.
func (e *env) raw(t *testing.T, method, path, body string, hdr ...string) (int, apitype.Error) {
	t.Helper()
	req, err := http.NewRequest(method, "http://residentd"+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := e.hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	var envl apitype.ErrorBody
	if resp.StatusCode >= 300 {
		if err := json.Unmarshal(data, &envl); err != nil {
			t.Fatalf("%s %s: status %d body %q is not an error envelope: %v", method, path, resp.StatusCode, data, err)
		}
	}
	return resp.StatusCode, envl.Error
}

func TestBadInput(t *testing.T) {
	e := newEnv(t)
	big := `{"channel_id":"ch","binding_id":"b-builtin","text":"` + strings.Repeat("x", MaxTurnBody) + `"}`
	bigSmall := `{"channel_id":"ch","binding_id":"` + strings.Repeat("x", MaxSmallBody) + `"}`
	tests := []struct {
		name, method, path, body string
		status                   int
		code                     string
		msg                      string
	}{
		{"malformed turn", "POST", "/v1/turns", `{"channel_id":`, 400, "bad_request", "malformed request"},
		{"not an object", "POST", "/v1/turns", `[1,2]`, 400, "bad_request", "must be a JSON object, got array"},
		{"field case", "POST", "/v1/turns", `{"Channel_ID":"ch","binding_id":"b-builtin","text":"x"}`, 400, "bad_request", `field names are case-sensitive: did you mean "channel_id"?`},
		{"duplicate key", "POST", "/v1/turns", `{"channel_id":"ch","channel_id":"ch2","binding_id":"b-builtin","text":"x"}`, 400, "bad_request", `field "channel_id" is given twice`},
		{"invalid utf-8", "POST", "/v1/turns", "{\"channel_id\":\"ch\",\"binding_id\":\"b-builtin\",\"text\":\"\xff\xfe\"}", 400, "bad_request", `field "text" is not valid UTF-8`},
		{"blank text", "POST", "/v1/turns", `{"channel_id":"ch","binding_id":"b-builtin","text":" \n "}`, 400, "bad_request", "text is blank"},
		{"unknown field", "POST", "/v1/turns", `{"channel_id":"ch","binding_id":"b-builtin","text":"x","colour":"red"}`, 400, "bad_request", `unknown field "colour"`},
		{"wrong type", "POST", "/v1/turns", `{"channel_id":7,"binding_id":"b-builtin","text":"x"}`, 400, "bad_request", "channel_id"},
		{"trailing data", "POST", "/v1/turns", `{"channel_id":"ch","binding_id":"b-builtin","text":"x"} {}`, 400, "bad_request", "trailing data"},
		{"empty body", "POST", "/v1/turns", ``, 400, "bad_request", "body is empty"},
		{"cut short", "POST", "/v1/turns", `{"channel_id":"ch"`, 400, "bad_request", "EOF"},
		{"oversized turn", "POST", "/v1/turns", big, 413, "payload_too_large", fmt.Sprintf("%d-byte limit", MaxTurnBody)},
		{"missing channel", "POST", "/v1/turns", `{"binding_id":"b-builtin","text":"x"}`, 400, "bad_request", "channel_id is required"},
		{"missing binding", "POST", "/v1/turns", `{"channel_id":"ch","text":"x"}`, 400, "bad_request", "binding_id is required"},
		{"missing text", "POST", "/v1/turns", `{"channel_id":"ch","binding_id":"b-builtin"}`, 400, "bad_request", "text is required"},
		{"empty thread root", "POST", "/v1/turns", `{"channel_id":"ch","binding_id":"b-builtin","text":"x","thread_root_id":""}`, 400, "bad_request", "thread_root_id"},
		{"negative recipients", "POST", "/v1/turns", `{"channel_id":"ch","binding_id":"b-builtin","text":"x","max_recipients":-1}`, 400, "bad_request", "max_recipients"},
		{"unknown binding", "POST", "/v1/turns", `{"channel_id":"ch","binding_id":"b-nope","text":"x"}`, 404, "unknown_binding", "b-builtin"},
		{"agent missing", "POST", "/v1/turns", `{"channel_id":"ch","binding_id":"b-missing","text":"x"}`, 502, "agent_start_failed", "/nonexistent/residentd-agent-xyz"},
		{"unknown run", "POST", "/v1/turns/run-nope/cancel", ``, 404, "unknown_run", "run-nope"},
		{"fresh missing fields", "POST", "/v1/sessions/fresh", `{"channel_id":"ch"}`, 400, "bad_request", "binding_id"},
		{"fresh unknown binding", "POST", "/v1/sessions/fresh", `{"channel_id":"ch","binding_id":"b-nope"}`, 404, "unknown_binding", "b-nope"},
		{"fresh unknown field", "POST", "/v1/sessions/fresh", `{"channel_id":"ch","binding_id":"b-builtin","x":1}`, 400, "bad_request", `unknown field "x"`},
		{"fresh oversized", "POST", "/v1/sessions/fresh", bigSmall, 413, "payload_too_large", fmt.Sprintf("%d-byte limit", MaxSmallBody)},
		{"options missing fields", "PUT", "/v1/sessions/options", `{"channel_id":"ch","options":{}}`, 400, "bad_request", "binding_id"},
		{"options missing options", "PUT", "/v1/sessions/options", `{"channel_id":"ch","binding_id":"b-builtin"}`, 400, "bad_request", "options is required"},
		{"options empty value", "PUT", "/v1/sessions/options", `{"channel_id":"ch","binding_id":"b-builtin","options":{"model":""}}`, 400, "bad_request", `option "model" = ""`},
		{"options wrong type", "PUT", "/v1/sessions/options", `{"channel_id":"ch","binding_id":"b-builtin","options":{"verbose":true}}`, 400, "bad_request", "options"},
		{"options unknown binding", "PUT", "/v1/sessions/options", `{"channel_id":"ch","binding_id":"b-nope","options":{"model":"x"}}`, 404, "unknown_binding", "b-nope"},
		{"options query missing", "GET", "/v1/sessions/options?channel_id=ch", ``, 400, "bad_request", "binding_id"},
		{"options query unknown binding", "GET", "/v1/sessions/options?channel_id=ch&binding_id=b-nope", ``, 404, "unknown_binding", "b-nope"},
		{"POST on options", "POST", "/v1/sessions/options", `{}`, 405, "method_not_allowed", "GET"},
		{"POST on budgets", "POST", "/v1/budgets", `{}`, 405, "method_not_allowed", "GET"},
		{"messages empty", "POST", "/v1/messages", `{"messages":[]}`, 400, "bad_request", "at least one"},
		{"messages wrong type", "POST", "/v1/messages", `{"messages":{}}`, 400, "bad_request", "messages"},
		{"message invalid", "POST", "/v1/messages", `{"messages":[{"id":"m1","channel_id":"ch","author":"a","author_kind":"robot","created_at":"2026-01-01T00:00:00Z","body":"x"}]}`, 400, "invalid_message", "author_kind"},
		{"message bad time", "POST", "/v1/messages", `{"messages":[{"id":"m1","channel_id":"ch","author":"a","author_kind":"user","created_at":"yesterday"}]}`, 400, "invalid_message", `"m1" (message 0 of 1): created_at "yesterday"`},
		{"message without author", "POST", "/v1/messages", `{"messages":[{"id":"m1","channel_id":"ch","author_kind":"user","created_at":"2026-01-01T00:00:00Z","body":"x"}]}`, 400, "invalid_message", `"m1": missing author`},
		{"message body invalid utf-8", "POST", "/v1/messages", "{\"messages\":[{\"id\":\"m1\",\"channel_id\":\"ch\",\"author\":\"a\",\"author_kind\":\"user\",\"created_at\":\"2026-01-01T00:00:00Z\",\"body\":\"a\x80b\"}]}", 400, "bad_request", `field "messages[0].body" is not valid UTF-8`},
		{"message wrong type", "POST", "/v1/messages", `{"messages":[{"id":7}]}`, 400, "bad_request", `field "messages.id" must be a JSON string, got number`},
		{"unknown thread", "POST", "/v1/turns", `{"channel_id":"ch","binding_id":"b-builtin","text":"x","thread_root_id":"r-nope"}`, 404, "unknown_thread", `"r-nope" in channel "ch": push the thread's root message`},
		{"delete unknown message", "DELETE", "/v1/messages/ch/m-nope", ``, 404, "not_found", `"m-nope"`},
		{"GET on a message", "GET", "/v1/messages/ch/m1", ``, 405, "method_not_allowed", "DELETE"},
		{"roster unknown kind", "PUT", "/v1/channels/ch/roster", `{"members":[{"handle":"ann","kind":"robot","reachable":true}]}`, 400, "bad_request", `kind "robot" must be "user" or "agent"`},
		{"log level bad", "PUT", "/v1/log/level", `{"level":"loud"}`, 400, "bad_request", "loud"},
		{"GET on turns", "GET", "/v1/turns", ``, 405, "method_not_allowed", "POST"},
		{"GET on messages", "GET", "/v1/messages", ``, 405, "method_not_allowed", "POST"},
		{"GET on fresh", "GET", "/v1/sessions/fresh", ``, 405, "method_not_allowed", "POST"},
		{"GET on cancel", "GET", "/v1/turns/r1/cancel", ``, 405, "method_not_allowed", "POST"},
		{"POST on health", "POST", "/v1/health", `{}`, 405, "method_not_allowed", "GET"},
		{"no such endpoint", "GET", "/v1/nope", ``, 404, "not_found", "/v1/nope"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			status, er := e.raw(t, tt.method, tt.path, tt.body, "Content-Type", "application/json")
			if status != tt.status || er.Code != tt.code || !strings.Contains(er.Message, tt.msg) {
				t.Fatalf("%s %s: got %d %s %q, want %d %s containing %q", tt.method, tt.path, status, er.Code, er.Message, tt.status, tt.code, tt.msg)
			}
			for _, goism := range []string{"Go value", "Go struct", "apitype.", "api.", "daemon.", "[]", "json: "} {
				if strings.Contains(er.Message, goism) {
					t.Errorf("message %q shows Go internals (%q)", er.Message, goism)
				}
			}
		})
	}
	// The daemon is still healthy and answers a turn after all of that.
	ev, err := e.c.Turn(context.Background(), apitype.TurnRequest{Channel: "ch", Binding: "b-builtin", Text: "@agent hi"}, nil)
	if err != nil || !strings.HasPrefix(ev.Text, "builtin") {
		t.Fatalf("turn after bad input: %+v %v", ev, err)
	}
}

// Push, edit, delete through the socket: the counts, a 404 for what is
// gone, and channel_history without the deleted message, the edit marked.
func TestMessageEditAndDelete(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	at := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
	m := func(id, body string) apitype.Message {
		return apitype.Message{ID: id, Channel: "team/a", Author: "aiko", AuthorKind: apitype.AuthorUser, CreatedAt: at, Body: body}
	}
	if res, err := e.c.PutMessages(ctx, []apitype.Message{m("m1", "one"), m("m/2", "two")}); err != nil || res != (apitype.MessagesResponse{Added: 2}) {
		t.Fatalf("push: %+v %v", res, err)
	}
	if res, err := e.c.PutMessages(ctx, []apitype.Message{m("m1", "one, fixed"), m("m/2", "two")}); err != nil || res != (apitype.MessagesResponse{Edited: 1, Duplicates: 1}) {
		t.Fatalf("edit: %+v %v", res, err)
	}
	// Both the channel and the id hold a slash: escaped in the path.
	if err := e.c.DeleteMessage(ctx, "team/a", "m/2"); err != nil {
		t.Fatalf("delete: %v", err)
	}
	if err := e.c.DeleteMessage(ctx, "team/a", "m/2"); !client.IsNotFound(err) {
		t.Fatalf("second delete: %v, want not found", err)
	}
	if res, _ := e.c.PutMessages(ctx, []apitype.Message{m("m/2", "two")}); res != (apitype.MessagesResponse{Duplicates: 1}) {
		t.Fatalf("a deleted id came back: %+v", res)
	}
	page, _, err := e.inbox.History("team/a", "", "", 10)
	if err != nil || len(page) != 1 || page[0].ID != "m1" || page[0].Body != "one, fixed" || !page[0].Edited {
		t.Fatalf("history after edit and delete: %+v %v", page, err)
	}
}

func TestClientSeesCodes(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	_, err := e.c.Turn(ctx, apitype.TurnRequest{Channel: "ch", Binding: "b-missing", Text: "x"}, nil)
	if !client.IsCode(err, "agent_start_failed") || !strings.Contains(err.Error(), "/nonexistent/residentd-agent-xyz") {
		t.Fatalf("missing agent: %v", err)
	}
	if err := e.c.Cancel(ctx, "run-nope"); !client.IsCode(err, "unknown_run") {
		t.Fatalf("cancel unknown run: %v", err)
	}
	// A turn cancelled through the API ends in-stream with code cancelled,
	// and its error event names the run, both when the daemon generated the
	// id and when the client chose one that needs escaping in a path.
	for _, runID := range []string{"", "team/42 #1"} {
		var once sync.Once
		started := make(chan string, 1)
		type end struct {
			ev  apitype.Event
			err error
		}
		done := make(chan end, 1)
		go func() {
			ev, err := e.c.Turn(ctx, apitype.TurnRequest{Channel: "ch", Binding: "b-builtin", RunID: runID, Text: "@agent [[fault:hang-turn]]"}, func(ev apitype.Event) {
				if ev.Event == "started" {
					once.Do(func() { started <- ev.RunID })
				}
			})
			done <- end{ev, err}
		}()
		run := <-started
		if runID != "" && run != runID {
			t.Fatalf("start event run id %q, want %q", run, runID)
		}
		if err := e.c.Cancel(ctx, run); err != nil {
			t.Fatalf("cancel %q: %v", run, err)
		}
		r := <-done
		if !client.IsCode(r.err, "cancelled") || !strings.Contains(r.err.Error(), "cancelled by a client") {
			t.Fatalf("cancelled turn %q: %v", run, r.err)
		}
		if r.ev.Event != "error" || r.ev.RunID != run {
			t.Errorf("error event %+v, want run id %q", r.ev, run)
		}
	}
}

// TestOptionsAndBudgetsOverTheSocket: a key's options through the client,
// refused with invalid_option once the agent has listed its own; a spent
// budget refuses a turn with 429 budget_exceeded and a Retry-After until
// the reset; GET /v1/budgets lists it.
func TestOptionsAndBudgetsOverTheSocket(t *testing.T) {
	e := newEnv(t, func(c *config.Config) {
		c.Bindings[0].Args = append(c.Bindings[0].Args, "--cost", "0.5")
		c.Budgets = config.Budgets{Timezone: "UTC", Bindings: map[string]float64{"b-builtin": 1}}
	})
	ctx := context.Background()
	o, err := e.c.SetSessionOptions(ctx, "ch", "b-builtin", map[string]string{"model": "builtin-large"})
	if err != nil || o.Effective["model"] != "builtin-large" {
		t.Fatalf("set options before any session: %+v %v", o, err)
	}
	var warned *apitype.Budget
	for i := range 2 {
		ev, err := e.c.Turn(ctx, apitype.TurnRequest{Channel: "ch", Binding: "b-builtin", Text: fmt.Sprint("@agent ", i)}, func(ev apitype.Event) {
			if ev.Event == apitype.EventBudget {
				warned = ev.Budget
			}
		})
		if err != nil || ev.Event != apitype.EventDone {
			t.Fatalf("turn %d: %+v %v", i, ev, err)
		}
	}
	if warned == nil || warned.Level != "exceeded" || warned.Spent != apitype.AmountOf(1) {
		t.Fatalf("the second turn's budget event: %+v", warned)
	}
	if _, err := e.c.SetSessionOptions(ctx, "ch", "b-builtin", map[string]string{"model": "gpt-9"}); !client.IsCode(err, apitype.CodeInvalidOption) || !strings.Contains(err.Error(), "builtin-small, builtin-large") {
		t.Fatalf("set an unlisted value once the agent listed its own: %v", err)
	}
	if got, err := e.c.SessionOptions(ctx, "ch", "b-builtin"); err != nil || got.Options["model"] != "builtin-large" {
		t.Fatalf("options after a refused change: %+v %v", got, err)
	}
	ss, err := e.c.Sessions(ctx)
	if err != nil || len(ss) != 1 || ss[0].Options["model"] != "builtin-large" {
		t.Fatalf("sessions %+v %v", ss, err)
	}

	req, _ := http.NewRequest("POST", "http://residentd/v1/turns", strings.NewReader(`{"channel_id":"ch","binding_id":"b-builtin","text":"@agent more"}`))
	resp, err := e.hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var body apitype.ErrorBody
	json.NewDecoder(resp.Body).Decode(&body)
	resp.Body.Close()
	retry, _ := strconv.Atoi(resp.Header.Get("Retry-After"))
	now := time.Now().UTC()
	midnight := time.Date(now.Year(), now.Month(), now.Day()+1, 0, 0, 0, 0, time.UTC)
	if resp.StatusCode != http.StatusTooManyRequests || body.Error.Code != apitype.CodeBudgetExceeded || retry < 1 || retry > int(time.Until(midnight).Seconds())+2 {
		t.Fatalf("turn on a spent budget: %d %+v Retry-After %q", resp.StatusCode, body.Error, resp.Header.Get("Retry-After"))
	}
	b, err := e.c.Budgets(ctx)
	if err != nil || len(b.Budgets) != 1 || b.Budgets[0].Level != "exceeded" || b.Currency != "USD" || b.Day != b.ResetsAt.Add(-24*time.Hour).Format(time.DateOnly) {
		t.Fatalf("budgets %+v %v", b, err)
	}
}

func TestClassifyBackoff(t *testing.T) {
	status, code := classify(fmt.Errorf("pool: spawn: %w: binding %q", daemon.ErrBackoff, "b"))
	if status != http.StatusServiceUnavailable || code != "agent_backoff" {
		t.Fatalf("backoff: %d %s", status, code)
	}
}

func TestBrowserOriginRefused(t *testing.T) {
	e := newEnv(t)
	for _, h := range [][]string{{"Origin", "http://evil.example"}, {"Sec-Fetch-Site", "cross-site"}} {
		status, er := e.raw(t, "GET", "/v1/health", "", h...)
		if status != http.StatusForbidden || er.Code != "forbidden_origin" {
			t.Fatalf("%s: %d %+v", h[0], status, er)
		}
	}
	if status, _ := e.raw(t, "GET", "/v1/health", ""); status != http.StatusOK {
		t.Fatalf("plain health: %d", status)
	}
}

func TestSocketModesUnderOpenUmask(t *testing.T) {
	old := syscall.Umask(0)
	defer syscall.Umask(old)
	base := testkit.ShortDir(t)
	sock := filepath.Join(base, "run", "api.sock")
	ln, err := Listen(sock)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	for path, want := range map[string]os.FileMode{filepath.Dir(sock): 0o700, sock: 0o600} {
		fi, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm() != want {
			t.Errorf("%s: mode %v, want %v", path, fi.Mode().Perm(), want)
		}
	}
	// An existing directory with loose modes is tightened.
	loose := filepath.Join(base, "loose")
	if err := os.Mkdir(loose, 0o777); err != nil {
		t.Fatal(err)
	}
	ln2, err := Listen(filepath.Join(loose, "api.sock"))
	if err != nil {
		t.Fatal(err)
	}
	defer ln2.Close()
	if fi, _ := os.Stat(loose); fi.Mode().Perm() != 0o700 {
		t.Errorf("loose dir: mode %v, want 0700", fi.Mode().Perm())
	}
}

func TestStaleAndLiveSocket(t *testing.T) {
	base := testkit.ShortDir(t)
	sock := filepath.Join(base, "api.sock")
	// A socket file nobody listens on, as a killed daemon leaves it.
	stale, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	stale.(*net.UnixListener).SetUnlinkOnClose(false)
	stale.Close()
	if _, err := os.Lstat(sock); err != nil {
		t.Fatalf("stale socket not left behind: %v", err)
	}
	ln, err := Listen(sock)
	if err != nil {
		t.Fatalf("stale socket not replaced: %v", err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	if _, err := Listen(sock); !errors.Is(err, ErrSocketInUse) || !strings.Contains(err.Error(), sock) {
		t.Fatalf("live socket: err = %v, want ErrSocketInUse naming the path", err)
	}
	// A regular file in the way is not deleted.
	file := filepath.Join(base, "file.sock")
	os.WriteFile(file, []byte("x"), 0o600)
	if _, err := Listen(file); err == nil || !strings.Contains(err.Error(), "not a socket") {
		t.Fatalf("regular file: err = %v", err)
	}
	if _, err := os.Stat(file); err != nil {
		t.Fatalf("Listen removed a regular file: %v", err)
	}
}

// TestPeerUIDRefused runs a client as uid 65534: it cannot reach the real
// socket (its directory is 0700), and on a socket it can reach (an
// abstract one, which has no file modes) the server's peer check answers
// 403. The helper starts as root and drops to 65534 itself, so no path on
// the way to a binary it could execute is needed (CI's / and /tmp are 0700).
func TestPeerUIDRefused(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("needs root to run a client under another uid (CI runs as root)")
	}
	e := newEnv(t)
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	asNobody := func(sock string) string {
		t.Helper()
		cmd := exec.Command(self)
		cmd.Env = append(os.Environ(), "RESIDENTD_TEST_PEER="+sock, "RESIDENTD_TEST_PEER_NOBODY=1")
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("peer helper: %v: %s", err, out)
		}
		return string(out)
	}

	if fi, err := os.Stat(filepath.Dir(e.sock)); err != nil || fi.Mode().Perm() != 0o700 {
		t.Fatalf("socket dir: %v, %v; want mode 0700", fi, err)
	}
	if out := asNobody(e.sock); !strings.HasPrefix(out, "dial-error") || !strings.Contains(out, "permission denied") {
		t.Fatalf("uid 65534 on the 0700 socket dir: %q, want permission denied", out)
	}

	ln, err := net.Listen("unix", fmt.Sprintf("@residentd-peer-test-%d", os.Getpid()))
	if err != nil {
		t.Fatal(err)
	}
	hs := &http.Server{Handler: e.srv.srv.Handler, ConnContext: e.srv.srv.ConnContext}
	go hs.Serve(ln)
	defer hs.Close()
	out := asNobody(ln.Addr().String())
	if !strings.HasPrefix(out, "403 ") || !strings.Contains(out, `"forbidden"`) || !strings.Contains(out, "peer uid 65534") {
		t.Fatalf("uid 65534 through the guard: %q, want 403 forbidden", out)
	}
}

func TestSessionsListing(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	if got, err := e.c.Sessions(ctx); err != nil || len(got) != 0 {
		t.Fatalf("sessions before any turn: %+v, %v", got, err)
	}
	for _, text := range []string{"@agent one", "@agent two"} {
		if _, err := e.c.Turn(ctx, apitype.TurnRequest{Channel: "ch", Binding: "b-builtin", Text: text}, nil); err != nil {
			t.Fatal(err)
		}
	}
	got, err := e.c.Sessions(ctx)
	if err != nil || len(got) != 1 {
		t.Fatalf("sessions after two turns: %+v, %v", got, err)
	}
	s := got[0]
	if s.Channel != "ch" || s.Binding != "b-builtin" || s.Pid <= 0 || s.Native == "" || s.State != "idle" || s.Turns["cold"] != 1 || s.Turns["warm"] != 1 {
		t.Errorf("session row %+v", s)
	}
	if _, err := os.Stat("/proc/self/statm"); err == nil && s.RSSBytes <= 0 {
		t.Errorf("rss_bytes %d for a live agent", s.RSSBytes)
	}
}

// rawBody sends body as-is and returns the status and the whole body.
func (e *env) rawBody(t *testing.T, method, path, body string) (int, []byte) {
	t.Helper()
	return sendRaw(t, e.hc, method, path, body)
}

// sendRaw sends body as-is with hc and returns the status and the whole
// body.
func sendRaw(t *testing.T, hc *http.Client, method, path, body string) (int, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, "http://residentd"+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, data
}

// TestThreadSessionsOverTheSocket: with a binding of scope thread, a
// mention in a thread gets a session row of its own (thread_root_id,
// restored_by fork), the bindings listing says the scope, and start fresh
// with thread_root_id stops the thread's process alone.
func TestThreadSessionsOverTheSocket(t *testing.T) {
	e := newEnv(t, func(c *config.Config) {
		c.Bindings[0].Scope = config.ScopeThread
		c.Bindings[0].Args = append(c.Bindings[0].Args, "--fork")
	})
	ctx := context.Background()
	at := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
	e.push(t, apitype.Message{ID: "r1", Channel: "ch", Author: "aiko", AuthorKind: apitype.AuthorUser, CreatedAt: at, Body: "the refund spec is flaky"},
		apitype.Message{ID: "q1", Channel: "ch", Author: "ben", AuthorKind: apitype.AuthorUser, CreatedAt: at.Add(time.Second), Body: "@agent why?"})
	if _, err := e.c.Turn(ctx, apitype.TurnRequest{Channel: "ch", Binding: "b-builtin", MessageID: "q1", Text: "@agent why?"}, nil); err != nil {
		t.Fatal(err)
	}
	root := "r1"
	e.push(t, apitype.Message{ID: "q2", Channel: "ch", ThreadRoot: root, Author: "ben", AuthorKind: apitype.AuthorUser, CreatedAt: at.Add(2 * time.Second), Body: "@agent and here?"})
	done, err := e.c.Turn(ctx, apitype.TurnRequest{Channel: "ch", Binding: "b-builtin", MessageID: "q2", ThreadRoot: &root, Text: "@agent and here?"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	rows, err := e.c.Sessions(ctx)
	if err != nil || len(rows) != 2 {
		t.Fatalf("sessions %+v, %v; want the channel's and the thread's", rows, err)
	}
	i := slices.IndexFunc(rows, func(s apitype.Session) bool { return s.ThreadRoot == root })
	if i < 0 || rows[i].Native != done.Native || rows[i].RestoredBy != "fork" || rows[1-i].ThreadRoot != "" {
		t.Fatalf("sessions %+v, want a row for thread %s restored_by fork", rows, root)
	}
	bs, err := e.c.Bindings(ctx)
	if err != nil || bs[0].Scope != config.ScopeThread || bs[1].Scope != config.ScopeChannel {
		t.Fatalf("bindings %+v, %v; want scopes thread, channel", bs, err)
	}
	stopped, err := e.c.FreshThread(ctx, "ch", "b-builtin", root)
	if err != nil || !stopped {
		t.Fatalf("start fresh of the thread: stopped %v, %v", stopped, err)
	}
	rows, err = e.c.Sessions(ctx)
	if err != nil || len(rows) != 1 || rows[0].ThreadRoot != "" {
		t.Fatalf("sessions after the thread's start fresh %+v, %v; want the channel's alone", rows, err)
	}
	if code, body := e.raw(t, "POST", "/v1/sessions/fresh", `{"channel_id":"ch","binding_id":"b-builtin","thread_root_id":""}`); code != 400 || body.Code != "bad_request" {
		t.Fatalf("empty thread_root_id: %d %+v", code, body)
	}
}
