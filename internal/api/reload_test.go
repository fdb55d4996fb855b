package api

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"github.com/residentd/residentd/apitype"
	"github.com/residentd/residentd/client"
	"github.com/residentd/residentd/internal/config"
	"github.com/residentd/residentd/internal/daemon"
	"github.com/residentd/residentd/internal/daemontest"
	"github.com/residentd/residentd/internal/testkit"
)

// reloadEnv is a daemon started from a config file, served on a real
// socket, whose bindings run the built-in agent, each recording what it
// receives in its own file.
type reloadEnv struct {
	dir  string
	file string
	cfg  config.Config // as written to file, before defaults
	h    *daemontest.Daemon
	c    *client.Client
}

func newReloadEnv(t testing.TB, ids ...string) *reloadEnv {
	t.Helper()
	dir := t.TempDir()
	e := &reloadEnv{dir: dir, file: filepath.Join(dir, "config.json")}
	for _, id := range ids {
		b, err := daemontest.Builtin(id, dir)
		if err != nil {
			t.Fatal(err)
		}
		b.Args = append(b.Args, "--record", e.rec(id))
		e.cfg.Bindings = append(e.cfg.Bindings, b)
	}
	e.write(t, nil)
	load := daemontest.FileLoader(e.file, dir)
	cfg, err := load()
	if err != nil {
		t.Fatal(err)
	}
	log := zaptest.NewLogger(t, zaptest.Level(zap.ErrorLevel))
	e.h = daemontest.New(t, cfg, daemontest.Options{Log: log, Reload: load, ConfigFile: e.file})
	_, sock := serve(t, "api.sock", ServerOptions{Turns: e.h, Sessions: e.h, Channel: e.h.Inbox, Log: log, Version: "test", Config: e.h.Daemon})
	e.c = &client.Client{Socket: sock}
	t.Cleanup(func() { e.c.Close() })
	return e
}

// rec is the record file of binding id's agents.
func (e *reloadEnv) rec(id string) string { return filepath.Join(e.dir, id+".jsonl") }

// write changes the config by change (nil: none) and writes the file.
func (e *reloadEnv) write(t testing.TB, change func(*config.Config)) {
	t.Helper()
	if change != nil {
		change(&e.cfg)
	}
	data, err := json.MarshalIndent(e.cfg, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(e.file, data, 0o600); err != nil {
		t.Fatal(err)
	}
}

// binding returns the written config's binding id, to change it.
func (e *reloadEnv) binding(c *config.Config, id string) *config.Binding {
	for i := range c.Bindings {
		if c.Bindings[i].ID == id {
			return &c.Bindings[i]
		}
	}
	panic("no binding " + id)
}

// reload reloads over the socket.
func (e *reloadEnv) reload(t testing.TB) apitype.ConfigReload {
	t.Helper()
	out, err := e.c.ReloadConfig(context.Background())
	if err != nil {
		t.Fatalf("reload: %v", err)
	}
	return out
}

// turnResult is one turn over the socket: its started event and its end.
type turnResult struct {
	started apitype.Event
	done    apitype.Event
	err     error
}

func (e *reloadEnv) turn(ch, binding, msg, text string, onUpdate func()) turnResult {
	var r turnResult
	r.done, r.err = e.c.Turn(context.Background(), apitype.TurnRequest{Channel: ch, Binding: binding, MessageID: msg, Text: text}, func(ev apitype.Event) {
		switch ev.Event {
		case apitype.EventStarted:
			r.started = ev
		case apitype.EventUpdate:
			if onUpdate != nil {
				onUpdate()
				onUpdate = nil
			}
		}
	})
	return r
}

func (e *reloadEnv) mustTurn(t testing.TB, ch, binding, msg string) turnResult {
	t.Helper()
	r := e.turn(ch, binding, msg, "@agent "+msg, nil)
	if r.err != nil {
		t.Fatalf("turn %s on %s/%s: %v", msg, ch, binding, r.err)
	}
	return r
}

// action returns what the reload did to binding id.
func action(t testing.TB, out apitype.ConfigReload, id string) apitype.BindingReload {
	t.Helper()
	for _, b := range out.Bindings {
		if b.Binding == id {
			return b
		}
	}
	t.Fatalf("reload answer has no binding %s: %+v", id, out)
	return apitype.BindingReload{}
}

// alive reports whether a process with pid exists.
func alive(pid int) bool { return syscall.Kill(pid, 0) == nil }

// records reads an agent's record file.
func records(t *testing.T, path string) []map[string]any {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []map[string]any
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var r map[string]any
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatal(err)
		}
		out = append(out, r)
	}
	return out
}

// TestReloadUnchangedBindingKeepsItsProcess: a reload that changes another
// binding leaves this one's warm process alone: same pid, a warm turn.
func TestReloadUnchangedBindingKeepsItsProcess(t *testing.T) {
	e := newReloadEnv(t, "b-keep", "b-other")
	r1 := e.mustTurn(t, "ch", "b-keep", "m1")
	e.mustTurn(t, "ch", "b-other", "m2")
	e.write(t, func(c *config.Config) { e.binding(c, "b-other").Brief = "a new brief" })
	out := e.reload(t)
	if a := action(t, out, "b-keep"); a.Action != apitype.ReloadUnchanged || len(a.Changes) != 0 || a.Processes != 1 {
		t.Fatalf("b-keep: %+v, want unchanged with its 1 process", a)
	}
	if a := action(t, out, "b-other"); a.Action != apitype.ReloadAppliedNext || len(a.Changes) != 1 || a.Changes[0] != (apitype.ReloadChange{Setting: "brief", Class: "next_turn"}) {
		t.Fatalf("b-other: %+v, want brief applied at the next turn", a)
	}
	if out.File != e.file || len(out.Restart) != 0 {
		t.Fatalf("answer %+v", out)
	}
	r2 := e.mustTurn(t, "ch", "b-keep", "m3")
	if r2.started.Pid != r1.started.Pid || r2.done.Shape != "warm" {
		t.Fatalf("after the reload: pid %d shape %s, want the same pid %d, warm", r2.started.Pid, r2.done.Shape, r1.started.Pid)
	}
	// The changed brief reaches b-other's warm process at its next turn, in
	// full (the brief lives in the framing of a resident binding).
	r3 := e.mustTurn(t, "ch", "b-other", "m4")
	if r3.done.Shape != "warm" {
		t.Fatalf("b-other after the reload: %s", r3.done.Shape)
	}
	recs := records(t, e.rec("b-other"))
	if last := recs[len(recs)-1]; last["method"] != "session/prompt" || !strings.Contains(last["prompt"].(string), "a new brief") {
		t.Fatalf("b-other's warm turn after the reload did not carry the new brief: %v", last)
	}
}

// TestReloadChangedCommandReplacesAtNextTurn: a changed argument keeps the
// live process until the key's next turn, which starts a new process that
// restores the key's session.
func TestReloadChangedCommandReplacesAtNextTurn(t *testing.T) {
	e := newReloadEnv(t, "b-cmd")
	r1 := e.mustTurn(t, "ch", "b-cmd", "m1")
	e.write(t, func(c *config.Config) {
		b := e.binding(c, "b-cmd")
		b.Args = append(b.Args, "--cost", "0.01")
	})
	out := e.reload(t)
	if a := action(t, out, "b-cmd"); a.Action != apitype.ReloadReplaceProcess || a.Changes[0] != (apitype.ReloadChange{Setting: "args", Class: "replace_process"}) {
		t.Fatalf("b-cmd: %+v, want args replace_process", a)
	}
	// Not before its next turn.
	ss, err := e.c.Sessions(context.Background())
	if err != nil || len(ss) != 1 || ss[0].Pid != r1.started.Pid {
		t.Fatalf("after the reload the live process is %+v (%v), want pid %d still", ss, err, r1.started.Pid)
	}
	r2 := e.mustTurn(t, "ch", "b-cmd", "m2")
	if r2.started.Pid == r1.started.Pid || r2.done.Shape != "restored" || r2.done.Native != r1.done.Native {
		t.Fatalf("next turn: pid %d shape %s native %s; want a new process that restored %s", r2.started.Pid, r2.done.Shape, r2.done.Native, r1.done.Native)
	}
	if alive(r1.started.Pid) {
		t.Fatalf("the replaced process %d still runs", r1.started.Pid)
	}
	if n := testutil.ToFloat64(e.h.Metrics.Evictions.WithLabelValues("replaced")); n != 1 {
		t.Fatalf("evictions{replaced} = %v", n)
	}
	// The new process runs the new command line: its cost shows in usage.
	if u := r2.done.Usage; u == nil || u.Cost == nil {
		t.Fatalf("the new process did not run with --cost: usage %+v", r2.done.Usage)
	}
}

// TestReloadSessionOptionOnWarmProcess: a binding's changed session option
// is set on its warm process at the key's next turn, the process kept.
func TestReloadSessionOptionOnWarmProcess(t *testing.T) {
	e := newReloadEnv(t, "b-opt")
	r1 := e.mustTurn(t, "ch", "b-opt", "m1")
	e.write(t, func(c *config.Config) {
		e.binding(c, "b-opt").SessionOptions = map[string]string{"model": "builtin-large"}
	})
	if a := action(t, e.reload(t), "b-opt"); a.Action != apitype.ReloadAppliedNext || a.Changes[0] != (apitype.ReloadChange{Setting: "session_options", Class: "next_turn"}) {
		t.Fatalf("b-opt: %+v", a)
	}
	r2 := e.mustTurn(t, "ch", "b-opt", "m2")
	if r2.started.Pid != r1.started.Pid || r2.done.Shape != "warm" {
		t.Fatalf("pid %d shape %s, want the warm process %d", r2.started.Pid, r2.done.Shape, r1.started.Pid)
	}
	var sets []string
	var last map[string]any
	for _, r := range records(t, e.rec("b-opt")) {
		switch r["method"] {
		case "session/set_config_option":
			sets = append(sets, fmt.Sprintf("%s %s=%s", r["session"], r["config_id"], r["value"]))
		case "session/prompt":
			last, _ = r["options"].(map[string]any)
		}
	}
	if want := r1.done.Native + " model=builtin-large"; len(sets) != 1 || sets[0] != want {
		t.Fatalf("option sets %q, want [%s]", sets, want)
	}
	if last["model"] != "builtin-large" {
		t.Fatalf("the turn after the reload ran with options %v", last)
	}
	// Taken back out of the file: the option goes back to the agent's own.
	e.write(t, func(c *config.Config) { e.binding(c, "b-opt").SessionOptions = nil })
	e.reload(t)
	r3 := e.mustTurn(t, "ch", "b-opt", "m3")
	if r3.started.Pid != r1.started.Pid {
		t.Fatalf("pid %d after removing the option, want %d", r3.started.Pid, r1.started.Pid)
	}
	last = nil
	for _, r := range records(t, e.rec("b-opt")) {
		if r["method"] == "session/prompt" {
			last, _ = r["options"].(map[string]any)
		}
	}
	if last["model"] != "builtin-small" {
		t.Fatalf("after removing the option the turn ran with %v, want the agent's default model back", last)
	}
}

// holdTurn starts a turn on binding that holds mid-prompt until release is
// called; started closes once the agent is inside the prompt.
func (e *reloadEnv) holdTurn(t *testing.T, ch, binding, msg string) (started <-chan struct{}, release func(), done <-chan turnResult) {
	t.Helper()
	gate := filepath.Join(e.dir, "gate-"+msg)
	in := make(chan struct{})
	out := make(chan turnResult, 1)
	go func() {
		out <- e.turn(ch, binding, msg, fmt.Sprintf("@agent [[hold:%s]] %s", gate, msg), func() { close(in) })
	}()
	return in, func() {
		if err := os.WriteFile(gate, nil, 0o600); err != nil {
			t.Error(err)
		}
	}, out
}

// TestReloadRemovedBinding: a removed binding's running turn finishes, its
// new turns are refused with unknown_binding, and its process stops after
// the turn.
func TestReloadRemovedBinding(t *testing.T) {
	e := newReloadEnv(t, "b-stay", "b-gone")
	e.mustTurn(t, "ch", "b-stay", "m0")
	in, release, done := e.holdTurn(t, "ch", "b-gone", "m1")
	<-in
	e.write(t, func(c *config.Config) { c.Bindings = c.Bindings[:1] })
	out := e.reload(t)
	if a := action(t, out, "b-gone"); a.Action != apitype.ReloadRemoved || a.Processes != 1 {
		t.Fatalf("b-gone: %+v, want removed with its 1 process", a)
	}
	_, err := e.c.Turn(context.Background(), apitype.TurnRequest{Channel: "ch2", Binding: "b-gone", Text: "@agent hi"}, nil)
	var ce *client.Error
	if !errors.As(err, &ce) || ce.Code != apitype.CodeUnknownBinding || ce.Status != http.StatusNotFound {
		t.Fatalf("a new turn of the removed binding: %v, want 404 unknown_binding", err)
	}
	release()
	r := <-done
	if r.err != nil || r.done.Event != apitype.EventDone {
		t.Fatalf("the running turn of the removed binding: %+v %v, want done", r.done, r.err)
	}
	// Release returns once the process is reaped, before the done event.
	ss, err := e.c.Sessions(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range ss {
		if s.Binding == "b-gone" {
			t.Fatalf("the removed binding's process still listed: %+v", s)
		}
	}
	if alive(r.started.Pid) {
		t.Fatalf("the removed binding's process %d still runs", r.started.Pid)
	}
	if n := testutil.ToFloat64(e.h.Metrics.Evictions.WithLabelValues("removed")); n != 1 {
		t.Fatalf("evictions{removed} = %v", n)
	}
	if len(ss) != 1 || ss[0].Binding != "b-stay" {
		t.Fatalf("sessions %+v, want b-stay's untouched", ss)
	}
}

// TestReloadInvalidFileRefused: a file that does not parse, or does not
// validate, is refused with the reason; the config in force keeps serving.
func TestReloadInvalidFileRefused(t *testing.T) {
	e := newReloadEnv(t, "b-keep")
	r1 := e.mustTurn(t, "ch", "b-keep", "m1")
	good := testkit.ReadFile(t, e.file)
	for _, tc := range []struct {
		name, body, want string
	}{
		{"syntax", `{"bindings": [`, "unexpected EOF"},
		{"unknown field", `{"bindings": [], "max_lives": 3}`, `unknown field "max_lives"`},
		{"no command", `{"bindings": [{"id": "b-keep", "handle": "@agent"}]}`, `binding "b-keep" has no command`},
	} {
		if err := os.WriteFile(e.file, []byte(tc.body), 0o600); err != nil {
			t.Fatal(err)
		}
		_, err := e.c.ReloadConfig(context.Background())
		var ce *client.Error
		if !errors.As(err, &ce) || ce.Status != http.StatusUnprocessableEntity || ce.Code != apitype.CodeInvalidConfig ||
			!strings.Contains(ce.Message, tc.want) || !strings.Contains(ce.Message, e.file) || !strings.Contains(ce.Message, "config in force stays") {
			t.Fatalf("%s: reload answered %v, want 422 invalid_config naming the file and %q", tc.name, err, tc.want)
		}
	}
	if n := testutil.ToFloat64(e.h.Metrics.ConfigReloads.WithLabelValues("refused")); n != 3 {
		t.Fatalf("reloads{refused} = %v", n)
	}
	if testutil.ToFloat64(e.h.Metrics.ReloadOK) != 0 {
		t.Fatal("last reload successful after a refusal")
	}
	r2 := e.mustTurn(t, "ch", "b-keep", "m2")
	if r2.started.Pid != r1.started.Pid || r2.done.Shape != "warm" {
		t.Fatalf("after refused reloads: pid %d shape %s, want %d warm", r2.started.Pid, r2.done.Shape, r1.started.Pid)
	}
	if err := os.WriteFile(e.file, good, 0o600); err != nil {
		t.Fatal(err)
	}
	if a := action(t, e.reload(t), "b-keep"); a.Action != apitype.ReloadUnchanged {
		t.Fatalf("the good file again: %+v", a)
	}
	if testutil.ToFloat64(e.h.Metrics.ReloadOK) != 1 || testutil.ToFloat64(e.h.Metrics.ConfigReloads.WithLabelValues("applied")) != 1 {
		t.Fatal("applied reload not counted")
	}
}

// TestReloadDuringRunningTurn: reloads (several at once, serialized) while
// a turn runs do not disturb it: it ends normally on the process it started
// on, with the binding it was accepted with; the changed binding's process
// is replaced at the next turn; pool limits apply at once.
func TestReloadDuringRunningTurn(t *testing.T) {
	e := newReloadEnv(t, "b-run")
	e.mustTurn(t, "ch", "b-run", "m0")
	in, release, done := e.holdTurn(t, "ch", "b-run", "m1")
	<-in
	e.write(t, func(c *config.Config) {
		b := e.binding(c, "b-run")
		b.Args = append(b.Args, "--cost", "0.01")
		b.TurnTimeout = config.Duration(time.Minute)
		c.MaxLive = 2
		c.Socket = filepath.Join(e.dir, "elsewhere.sock")
	})
	var wg sync.WaitGroup
	outs := make([]apitype.ConfigReload, 4)
	errs := make([]error, 4)
	for i := range outs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			outs[i], errs[i] = e.c.ReloadConfig(context.Background())
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("reload %d: %v", i, err)
		}
	}
	// Serialized: one of them saw the change, the others found it in force.
	changed := 0
	for _, out := range outs {
		if a := action(t, out, "b-run"); a.Action == apitype.ReloadReplaceProcess {
			changed++
			if a.Processes != 1 || strings.Join(out.Restart, ",") != "socket" {
				t.Fatalf("reload answer %+v", out)
			}
		} else if a.Action != apitype.ReloadUnchanged {
			t.Fatalf("a reload after the first saw %+v", a)
		}
	}
	if changed != 1 {
		t.Fatalf("%d reloads saw the change, want exactly 1: %+v", changed, outs)
	}
	h, err := e.c.Health(context.Background())
	if err != nil || h.MaxLive != 2 {
		t.Fatalf("max_live after the reload: %d (%v), want 2 at once", h.MaxLive, err)
	}
	release()
	r := <-done
	if r.err != nil || r.done.Event != apitype.EventDone || r.done.Shape != "warm" {
		t.Fatalf("the running turn: %+v %v, want done, warm", r.done, r.err)
	}
	if u := r.done.Usage; u != nil && u.Cost != nil {
		t.Fatalf("the running turn reports a cost: it ran on a new process? %+v", u)
	}
	r2 := e.mustTurn(t, "ch", "b-run", "m2")
	if r2.started.Pid == r.started.Pid || r2.done.Shape != "restored" {
		t.Fatalf("the next turn: pid %d (was %d) shape %s, want a new process that restored", r2.started.Pid, r.started.Pid, r2.done.Shape)
	}
}

// TestReloadWithoutFile: a daemon on the built-in default config has no
// file to reload.
func TestReloadWithoutFile(t *testing.T) {
	e := newEnvWith(t, func(o *ServerOptions, d *daemon.Daemon) { o.Config = d })
	_, err := e.c.ReloadConfig(context.Background())
	var ce *client.Error
	if !errors.As(err, &ce) || ce.Status != http.StatusConflict || ce.Code != apitype.CodeNoConfigFile {
		t.Fatalf("reload without a file: %v, want 409 no_config_file", err)
	}
}

// TestReloadPermissionOnWarmProcess: a changed permission policy answers
// the warm process's next requests, the process kept.
func TestReloadPermissionOnWarmProcess(t *testing.T) {
	e := newReloadEnv(t, "b-perm")
	decisions := func(text string) (turnResult, []string) {
		var kinds []string
		var r turnResult
		r.done, r.err = e.c.Turn(context.Background(), apitype.TurnRequest{Channel: "ch", Binding: "b-perm", Text: text}, func(ev apitype.Event) {
			switch ev.Event {
			case apitype.EventStarted:
				r.started = ev
			case apitype.EventPermissionDecision:
				kinds = append(kinds, ev.Decision.Kind)
			}
		})
		if r.err != nil {
			t.Fatal(r.err)
		}
		return r, kinds
	}
	r1, k1 := decisions("@agent [[permission:execute]] one")
	if strings.Join(k1, ",") != "reject_once" {
		t.Fatalf("deny answered %v", k1)
	}
	e.write(t, func(c *config.Config) { e.binding(c, "b-perm").Permission = "allow" })
	if a := action(t, e.reload(t), "b-perm"); a.Action != apitype.ReloadAppliedNext || a.Changes[0] != (apitype.ReloadChange{Setting: "permission", Class: "next_turn"}) {
		t.Fatalf("b-perm: %+v", a)
	}
	r2, k2 := decisions("@agent [[permission:execute]] two")
	if r2.started.Pid != r1.started.Pid || strings.Join(k2, ",") != "allow_once" {
		t.Fatalf("after the reload: pid %d (was %d), decisions %v; want the same process, allowed", r2.started.Pid, r1.started.Pid, k2)
	}
}

// BenchmarkReload is one reload over the socket of a daemon with 8
// bindings, 4 of them with a warm process: the file read, compared, put in
// force; each reload changes one binding's brief (applied_next_turn).
func BenchmarkReload(b *testing.B) {
	ids := []string{"b-0", "b-1", "b-2", "b-3", "b-4", "b-5", "b-6", "b-7"}
	e := newReloadEnv(b, ids...)
	for _, id := range ids[:4] {
		e.mustTurn(b, "ch", id, "m-"+id)
	}
	b.ResetTimer()
	for i := range b.N {
		b.StopTimer()
		e.write(b, func(c *config.Config) { e.binding(c, "b-0").Brief = fmt.Sprintf("brief %d", i) })
		b.StartTimer()
		if a := action(b, e.reload(b), "b-0"); a.Action != apitype.ReloadAppliedNext || a.Processes != 1 {
			b.Fatalf("reload: %+v", a)
		}
	}
}

// TestReloadBudgetsAtOnce: a daily budget added by a reload applies from
// the next turn on.
func TestReloadBudgetsAtOnce(t *testing.T) {
	e := newReloadEnv(t, "b-spend")
	e.write(t, func(c *config.Config) {
		b := e.binding(c, "b-spend")
		b.Args = append(b.Args, "--cost", "1")
	})
	e.reload(t)
	if r := e.mustTurn(t, "ch", "b-spend", "m1"); r.done.Usage == nil || r.done.Usage.Cost == nil {
		t.Fatalf("the turn reported no cost: %+v", r.done.Usage)
	}
	e.write(t, func(c *config.Config) { c.Budgets.Bindings = map[string]float64{"b-spend": 0.5} })
	out := e.reload(t)
	if len(out.Settings) != 1 || out.Settings[0] != (apitype.ReloadChange{Setting: "budgets", Class: "at_once"}) {
		t.Fatalf("settings %+v", out.Settings)
	}
	// Spending is counted while a limit applies: from the reload on.
	e.mustTurn(t, "ch", "b-spend", "m2")
	_, err := e.c.Turn(context.Background(), apitype.TurnRequest{Channel: "ch", Binding: "b-spend", Text: "@agent m3"}, nil)
	var ce *client.Error
	if !errors.As(err, &ce) || ce.Code != apitype.CodeBudgetExceeded {
		t.Fatalf("a turn over the reloaded budget: %v, want budget_exceeded", err)
	}
}

// TestReloadFramingForNewSessions: a changed system framing leaves the
// warm session as it is and reaches the key's next new session.
func TestReloadFramingForNewSessions(t *testing.T) {
	e := newReloadEnv(t, "b-frame")
	r1 := e.mustTurn(t, "ch", "b-frame", "m1")
	e.write(t, func(c *config.Config) { e.binding(c, "b-frame").System = "You are @agent, now with a new framing." })
	if a := action(t, e.reload(t), "b-frame"); a.Action != apitype.ReloadNewSession || a.Changes[0] != (apitype.ReloadChange{Setting: "system", Class: "new_session"}) {
		t.Fatalf("b-frame: %+v", a)
	}
	if r := e.mustTurn(t, "ch", "b-frame", "m2"); r.started.Pid != r1.started.Pid || r.done.Shape != "warm" {
		t.Fatalf("after the reload: pid %d shape %s, want the warm process", r.started.Pid, r.done.Shape)
	}
	if _, err := e.c.Fresh(context.Background(), "ch", "b-frame"); err != nil {
		t.Fatal(err)
	}
	if r := e.mustTurn(t, "ch", "b-frame", "m3"); r.done.Shape != "cold" {
		t.Fatalf("after start fresh: %s", r.done.Shape)
	}
	recs := records(t, e.rec("b-frame"))
	if last := recs[len(recs)-1]; !strings.HasPrefix(last["prompt"].(string), "You are @agent, now with a new framing.") {
		t.Fatalf("the new session's first prompt: %.80q", last["prompt"])
	}
}
