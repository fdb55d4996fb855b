package interop

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"github.com/residentd/residentd/apitype"
	"github.com/residentd/residentd/internal/channel"
	"github.com/residentd/residentd/internal/child"
	"github.com/residentd/residentd/internal/config"
	"github.com/residentd/residentd/internal/daemon"
	"github.com/residentd/residentd/internal/daemontest"
	"github.com/residentd/residentd/internal/inbox"
	"github.com/residentd/residentd/internal/metrics"
	"github.com/residentd/residentd/internal/run"
	"github.com/residentd/residentd/internal/store"
)

// skipEnv, set to 1, skips these tests where the real agents are not installed.
const skipEnv = "RESIDENTD_SKIP_REAL_AGENTS"

// testTimeout bounds every interop test: two claude-agent-acp versions
// start cold and restore in them, which on a loaded two-core machine takes
// 20 to 30 s each.
const testTimeout = 2 * time.Minute

// repoRoot is the directory holding go.mod, found upwards from the test's
// working directory (the package directory under go test).
func repoRoot(t testing.TB) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("interop: no go.mod above the test's working directory")
		}
		dir = parent
	}
}

// realAgent returns the path of an installed real agent under .ci/agents.
// When it is missing the test is skipped with a notice saying how to
// install it, except in CI (CI=true), where the real agents are required.
func realAgent(t testing.TB, rel string) string {
	t.Helper()
	p := filepath.Join(repoRoot(t), ".ci", "agents", rel)
	if st, err := os.Stat(p); err == nil && !st.IsDir() && st.Mode()&0o111 != 0 {
		return p
	}
	msg := fmt.Sprintf("real ACP agent %s is not installed: run .ci/real-agents from the repository root (needs node, npm and go)", p)
	switch {
	case os.Getenv(skipEnv) == "1":
		t.Skipf("%s; skipped because %s=1", msg, skipEnv)
	case os.Getenv("CI") == "true":
		t.Fatalf("%s; CI requires the real agents (%s=1 skips them on purpose)", msg, skipEnv)
	}
	t.Skipf("%s; skipped outside CI (./test.sh installs them)", msg)
	return ""
}

// harness is a daemon on a real bbolt file whose bindings run real agents.
type harness struct {
	t   testing.TB
	dir string
	cfg *config.Config
	st  *store.Store
	m   *metrics.Metrics
	d   *daemon.Daemon
	log *zap.Logger

	td    *daemontest.Daemon
	inbox *inbox.Inbox
	// spares hears of every spare process as it becomes ready (pid 0: one
	// that failed to start).
	spares chan int
}

func newHarness(t testing.TB, bindings ...config.Binding) *harness {
	t.Helper()
	return newHarnessCfg(t, nil, bindings...)
}

// newHarnessCfg is newHarness with tweak applied to the config first.
func newHarnessCfg(t testing.TB, tweak func(*config.Config), bindings ...config.Binding) *harness {
	t.Helper()
	dir := t.TempDir()
	cfg := &config.Config{StateDir: dir, AgentGrace: config.Duration(5 * time.Second), Bindings: bindings}
	if tweak != nil {
		tweak(cfg)
	}
	cfg.SetDefaults()
	for i := range cfg.Bindings {
		cfg.Bindings[i].TurnTimeout = config.Duration(testTimeout / 2)
	}
	h := &harness{t: t, dir: dir, cfg: cfg, log: zaptest.NewLogger(t, zaptest.Level(zap.InfoLevel)), spares: make(chan int, 64)}
	h.open()
	t.Cleanup(h.close)
	return h
}

func (h *harness) open() {
	h.t.Helper()
	d, err := daemontest.Start(h.cfg, daemontest.Options{Log: h.log, OnSpare: func(_ string, pid int) {
		select {
		case h.spares <- pid:
		default:
		}
	}})
	if err != nil {
		h.t.Fatal(err)
	}
	h.td, h.d, h.st, h.m, h.inbox = d, d.Daemon, d.Store, d.Metrics, d.Inbox
}

func (h *harness) close() {
	if h.td != nil {
		h.td.Close()
		h.td, h.d, h.st = nil, nil, nil
	}
}

// restart stops the daemon (and its agents) and opens a new one on the same
// store, as a daemon restart would.
func (h *harness) restart() {
	h.t.Helper()
	h.close()
	h.open()
}

// result is what one turn streamed, with its timings.
type result struct {
	start, done apitype.Event
	updates     []apitype.Event
	queued      []apitype.Event
	err         error
	ready       time.Duration // Turn call -> start event (spawn + session ready when cold)
	total       time.Duration // Turn call -> return
}

// chunks is the text of the agent_message_chunk updates, in order.
func (r result) chunks() []string {
	var out []string
	for _, u := range r.updates {
		if u.Update != nil && u.Update.Kind == "agent_message_chunk" {
			out = append(out, u.Update.Text)
		}
	}
	return out
}

func (h *harness) turn(ctx context.Context, req apitype.TurnRequest, onStart func(apitype.Event)) result {
	h.t.Helper()
	var r result
	var mu sync.Mutex
	t0 := time.Now()
	done, err := h.d.Turn(ctx, req, func(ev apitype.Event) {
		mu.Lock()
		defer mu.Unlock()
		switch ev.Event {
		case "started":
			r.start = ev
			r.ready = time.Since(t0)
			if onStart != nil {
				onStart(ev)
			}
		case "queued":
			r.queued = append(r.queued, ev)
		default:
			r.updates = append(r.updates, ev)
		}
	})
	mu.Lock()
	r.done, r.err = done, err
	mu.Unlock()
	r.total = time.Since(t0)
	return r
}

var clock = struct {
	sync.Mutex
	t time.Time
}{t: time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)}

// mention posts text to ch and asks binding to answer it.
func (h *harness) mention(ctx context.Context, ch, binding, id, text string) result {
	h.t.Helper()
	h.post(channel.Message{ID: id, Channel: ch, Author: "carla", AuthorKind: apitype.AuthorUser, Body: text})
	return h.turn(ctx, apitype.TurnRequest{Channel: ch, Binding: binding, MessageID: id, Text: text}, nil)
}

// post stores messages with strictly increasing times.
func (h *harness) post(msgs ...channel.Message) {
	h.t.Helper()
	for i := range msgs {
		clock.Lock()
		clock.t = clock.t.Add(time.Second)
		msgs[i].CreatedAt = clock.t
		clock.Unlock()
		if msgs[i].AuthorKind == "" {
			msgs[i].AuthorKind = apitype.AuthorUser
		}
	}
	if _, err := h.inbox.PutMessages(msgs); err != nil {
		h.t.Fatal(err)
	}
}

// descendants returns pid and every process below it, by parent links.
func descendants(pid int) []int {
	all, _ := child.All()
	children := map[int][]int{}
	for _, st := range all {
		children[st.Ppid] = append(children[st.Ppid], st.Pid)
	}
	out := []int{pid}
	for i := 0; i < len(out); i++ {
		out = append(out, children[out[i]]...)
	}
	sort.Ints(out)
	return out
}

// alive reports whether pid exists and is not a zombie.
func alive(pid int) bool {
	st, err := child.Read(pid)
	return err == nil && !st.Zombie()
}

// cmdline is a process's command line, for failure messages.
func cmdline(pid int) string {
	b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	return strings.TrimSpace(strings.ReplaceAll(string(b), "\x00", " "))
}

// waitGone polls (bounded) until none of pids is alive, returning the
// survivors.
func waitGone(pids []int, within time.Duration) []int {
	deadline := time.Now().Add(within)
	for {
		var left []int
		for _, p := range pids {
			if alive(p) {
				left = append(left, p)
			}
		}
		if len(left) == 0 || time.Now().After(deadline) {
			return left
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// testCtx bounds a test's turns.
func testCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	t.Cleanup(cancel)
	return ctx
}

// stopLeavesNoChildren checks that the agent process pid started a tree
// of at least two processes, one of them native (its command line), and
// that closing h leaves none of them running.
func stopLeavesNoChildren(t *testing.T, h *harness, pid int, want string, native func(cmdline string) bool) {
	t.Helper()
	tree := descendants(pid)
	var names []string
	found := false
	for _, p := range tree {
		c := cmdline(p)
		found = found || native(c)
		if len(c) > 100 {
			c = c[:100] + "…"
		}
		names = append(names, c)
	}
	t.Logf("agent tree before stop: %d processes: %q", len(tree), names)
	if len(tree) < 2 || !found {
		t.Fatalf("agent tree %q: want %s", names, want)
	}
	h.close()
	if left := waitGone(tree, 10*time.Second); len(left) > 0 {
		for _, p := range left {
			t.Errorf("pid %d still running after stop: %s", p, cmdline(p))
		}
	}
}

// submitWhileStalled posts text as message id on channel ch and submits it
// to binding with f's model calls stalled, and returns once the turn's
// model call is waiting: the run, the count of f's requests before it,
// and the release of the stall.
func submitWhileStalled(t *testing.T, ctx context.Context, h *harness, f *fakeModel, ch, binding, id, text string) (r *run.Run, before int, release func()) {
	t.Helper()
	release = f.stallModel()
	t.Cleanup(release)
	h.post(channel.Message{ID: id, Channel: ch, Author: "aiko", Body: text})
	before = len(f.requests())
	r, err := h.d.Submit(apitype.TurnRequest{Channel: ch, Binding: binding, MessageID: id, Text: text})
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-f.stalled:
	case <-ctx.Done():
		t.Fatal("the running turn never called the model")
	}
	return r, before, release
}

// answerWith answers permission request p of run with the option of
// kind (allow_once, reject_once, …) the agent offered.
func answerWith(t *testing.T, h *harness, runID string, p *apitype.PermissionRequest, kind string) {
	t.Helper()
	for _, o := range p.Options {
		if o.Kind == kind {
			if err := h.d.Answer(runID, p.ID, o.ID); err != nil {
				t.Errorf("answer %s: %v", o.ID, err)
			}
			return
		}
	}
	t.Errorf("no %s option in %+v", kind, p.Options)
}
