package daemon_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"github.com/residentd/residentd/apitype"
	"github.com/residentd/residentd/internal/channel"
	"github.com/residentd/residentd/internal/config"
	"github.com/residentd/residentd/internal/daemon"
	"github.com/residentd/residentd/internal/daemontest"
	"github.com/residentd/residentd/internal/inbox"
	"github.com/residentd/residentd/internal/metrics"
	"github.com/residentd/residentd/internal/pool"
	"github.com/residentd/residentd/internal/run"
	"github.com/residentd/residentd/internal/session"
	"github.com/residentd/residentd/internal/store"
	"github.com/residentd/residentd/internal/testkit"
)

// TestMain lets the test binary double as the built-in agent, so every
// daemon test drives real child processes over ACP.
func TestMain(m *testing.M) { testkit.Main(m) }

// harness is a daemon on a real bbolt file with the built-in agent bound as
// "b-builtin" (and whatever bindings a test adds).
type harness struct {
	t     *testing.T
	dir   string
	cfg   *config.Config
	st    *store.Store
	m     *metrics.Metrics
	d     *daemon.Daemon
	inbox *inbox.Inbox
	td    *daemontest.Daemon // the daemon, its store and channel data
	log   *zap.Logger
	now   func() time.Time // the daemon's clock; nil is time.Now
	// backoffBase and backoffCap shape the crash-loop backoff (0: defaults).
	backoffBase, backoffCap time.Duration
	agentQuiet              time.Duration // how long an agent run waits for more output (0: the default)
	// tendEvery and pressure are the daemon's residency loop period (below
	// 0: the test calls Tend) and PSI file (Options.TendEvery, PressureFile).
	tendEvery time.Duration
	pressure  string
	mu        sync.Mutex
	evic      []string // "key reason", in order
	// spares hears of every spare process as it becomes ready (pid 0: one
	// that failed to start).
	spares chan readySpare
}

// readySpare is a spare process that became ready.
type readySpare struct {
	binding string
	pid     int
}

// recordTo makes the first binding's agent record what it gets (--record)
// in a file of the state dir, and sets *path to it.
func recordTo(path *string) func(*config.Config) {
	return func(c *config.Config) {
		*path = filepath.Join(c.StateDir, "record.jsonl")
		c.Bindings[0].Args = append(c.Bindings[0].Args, "--record", *path)
	}
}

// testBinding runs this test binary as the built-in agent.
func testBinding(t *testing.T, id, stateDir string, extra ...string) config.Binding {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	b := config.Builtin(exe, filepath.Join(stateDir, "agent-"+id))
	b.ID, b.Args = id, append(b.Args, extra...)
	b.Env = map[string]string{"RESIDENTD_TEST_AGENT": "1"}
	return b
}

func newHarness(t *testing.T, tweak ...func(*config.Config)) *harness {
	t.Helper()
	return newHarnessAt(t, nil, tweak...)
}

// newHarnessAt is newHarness with the daemon's clock.
func newHarnessAt(t *testing.T, now func() time.Time, tweak ...func(*config.Config)) *harness {
	t.Helper()
	dir := t.TempDir()
	cfg := &config.Config{StateDir: dir, AgentGrace: config.Duration(2 * time.Second)}
	cfg.Bindings = []config.Binding{testBinding(t, "b-builtin", dir)}
	for _, f := range tweak {
		f(cfg)
	}
	h := &harness{t: t, dir: dir, cfg: cfg, now: now, log: zaptest.NewLogger(t, zaptest.Level(zap.WarnLevel)), spares: make(chan readySpare, 256)}
	h.open()
	t.Cleanup(h.close)
	return h
}

func (h *harness) open() {
	h.t.Helper()
	td, err := daemontest.Start(h.cfg, daemontest.Options{Log: h.log, Now: h.now, BackoffBase: h.backoffBase, BackoffCap: h.backoffCap, AgentQuiet: h.agentQuiet, TendEvery: h.tendEvery, PressureFile: h.pressure, OnSpare: func(b string, pid int) {
		select {
		case h.spares <- readySpare{b, pid}:
		default: // a test that waits for spares reads them long before 256
		}
	}, OnEvict: func(k session.Key, r pool.Reason) {
		h.mu.Lock()
		h.evic = append(h.evic, k.String()+" "+string(r))
		h.mu.Unlock()
	}})
	if err != nil {
		h.t.Fatal(err)
	}
	h.td, h.d, h.st, h.m, h.inbox = td, td.Daemon, td.Store, td.Metrics, td.Inbox
}

func (h *harness) close() {
	if h.td != nil {
		h.td.Close()
		h.td, h.d, h.st = nil, nil, nil
	}
}

// restart stops the daemon and opens a new one on the same state, as a
// daemon restart would.
func (h *harness) restart() {
	h.t.Helper()
	h.close()
	h.open()
}

func (h *harness) evictions() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]string(nil), h.evic...)
}

// result is what one turn streamed.
type result struct {
	start, done apitype.Event
	updates     []apitype.Event
	queued      []apitype.Event
	err         error
}

func (h *harness) turn(req apitype.TurnRequest) result {
	h.t.Helper()
	return h.turnCtx(context.Background(), req)
}

func (h *harness) turnCtx(ctx context.Context, req apitype.TurnRequest) result {
	r := h.td.Turn(ctx, req)
	return result{start: r.Start, done: r.Done, updates: r.Updates, queued: r.Queued, err: r.Err}
}

// mention posts text to ch as a message and asks binding to answer it.
func (h *harness) mention(ch, binding, id, text string) result {
	h.t.Helper()
	h.post(channel.Message{ID: id, Channel: ch, Author: "carla", AuthorKind: channel.KindUser, Body: text})
	return h.turn(apitype.TurnRequest{Channel: ch, Binding: binding, MessageID: id, Text: text})
}

var clock = struct {
	sync.Mutex
	t time.Time
}{t: time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)}

// post stores messages, stamping each with a strictly increasing time.
func (h *harness) post(msgs ...channel.Message) {
	h.t.Helper()
	for i := range msgs {
		if msgs[i].CreatedAt.IsZero() {
			clock.Lock()
			clock.t = clock.t.Add(time.Second)
			msgs[i].CreatedAt = clock.t
			clock.Unlock()
		}
		if msgs[i].AuthorKind == "" {
			msgs[i].AuthorKind = channel.KindUser
		}
	}
	if _, err := h.inbox.PutMessages(msgs); err != nil {
		h.t.Fatal(err)
	}
}

// say posts n user lines to ch with ids prefix1..prefixN.
func (h *harness) say(ch, prefix string, n int) {
	h.t.Helper()
	for i := 1; i <= n; i++ {
		h.post(channel.Message{ID: fmt.Sprintf("%s%d", prefix, i), Channel: ch, Author: "aiko", Body: fmt.Sprintf("line %s%d about the refund spec", prefix, i)})
	}
}

// reply parses the built-in agent's one-line summary into a map.
func reply(t *testing.T, r result) map[string]string {
	t.Helper()
	if r.err != nil {
		t.Fatalf("turn failed: %v", r.err)
	}
	out := map[string]string{}
	for _, f := range strings.Fields(r.done.Text) {
		if k, v, ok := strings.Cut(f, "="); ok {
			out[k] = v
		}
	}
	if len(out) == 0 {
		t.Fatalf("reply %q is not the built-in agent's summary", r.done.Text)
	}
	return out
}

// ended is run id of the daemon once it has ended; an unknown run, or one
// that does not end, ends the test.
func (h *harness) ended(id string) *run.Run {
	h.t.Helper()
	r, err := h.d.Run(id)
	if err != nil {
		h.t.Fatal(err)
	}
	select {
	case <-ended(r):
	case <-time.After(30 * time.Second):
		h.t.Fatalf("run %s never ended", id)
	}
	return r
}

// writeConfigFile writes cfg to file as the JSON config file a reload reads.
func writeConfigFile(t *testing.T, file string, cfg config.Config) {
	t.Helper()
	data, err := json.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(file, data, 0o600); err != nil {
		t.Fatal(err)
	}
}
