package api

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"github.com/residentd/residentd/apitype"
	"github.com/residentd/residentd/client"
	"github.com/residentd/residentd/internal/config"
	"github.com/residentd/residentd/internal/daemontest"
	"github.com/residentd/residentd/internal/permission"
	"github.com/residentd/residentd/internal/testkit"
	"github.com/residentd/residentd/internal/workspace"
)

// capEnv is a daemon started from a config file with a binding for each
// capability that needs one, served on a real socket.
type capEnv struct {
	dir, file string
	h         *daemontest.Daemon
	hc        *http.Client
	c         *client.Client
}

func newCapEnv(t *testing.T) *capEnv {
	t.Helper()
	dir := t.TempDir()
	e := &capEnv{dir: dir, file: filepath.Join(dir, "config.json")}
	builtin := func(id string, args ...string) config.Binding {
		b, err := daemontest.Builtin(id, dir)
		if err != nil {
			t.Fatal(err)
		}
		b.Args = append(b.Args, args...)
		return b
	}
	ask := builtin("b-ask")
	ask.Permission, ask.PermissionTimeout = permission.Ask, config.Duration(time.Hour)
	co := builtin("b-coalesce")
	co.Bursts = config.BurstsCoalesce
	steer := builtin("b-steer", "--record", e.steerRecord())
	steer.Bursts = config.BurstsSteer
	thread := builtin("b-thread")
	thread.Scope = config.ScopeThread
	approve := builtin("b-approve")
	approve.Permission, approve.PermissionTimeout = permission.Ask, config.Duration(time.Hour)
	approve.Approvers = config.Approvers{Users: []string{"u-ana"}}
	v2 := builtin("b-v2")
	v2.Protocol = "auto"
	wt := builtin("b-wt")
	wt.Dir, wt.Workspace = testkit.GitRepo(t), workspace.Worktree
	cfg := config.Config{
		Bindings: []config.Binding{builtin("b-builtin", "--cost", "0.4"), ask, co, steer, thread, wt, approve, v2},
		Runs:     config.Runs{Keepalive: config.Duration(200 * time.Millisecond)},
		Budgets:  config.Budgets{Timezone: "UTC", Bindings: map[string]float64{"b-builtin": 100}},
	}
	data, err := json.MarshalIndent(cfg, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(e.file, data, 0o600); err != nil {
		t.Fatal(err)
	}
	load := daemontest.FileLoader(e.file, dir)
	c, err := load()
	if err != nil {
		t.Fatal(err)
	}
	log := zaptest.NewLogger(t, zaptest.Level(zap.ErrorLevel))
	e.h = daemontest.New(t, c, daemontest.Options{Log: log, Reload: load, ConfigFile: e.file, AgentQuiet: 100 * time.Millisecond})
	_, sock := serve(t, "api.sock", ServerOptions{Turns: e.h, Sessions: e.h, Channel: e.h.Inbox, Log: log, Version: "test",
		Keepalive: time.Duration(c.Runs.Keepalive), Config: e.h.Daemon})
	e.hc, e.c = unixHTTP(sock), &client.Client{Socket: sock}
	t.Cleanup(func() { e.c.Close() })
	return e
}

func (e *capEnv) steerRecord() string { return filepath.Join(e.dir, "steer.jsonl") }

// do sends body as-is and returns the status and the whole body.
func (e *capEnv) do(t *testing.T, method, path, body string) (int, string) {
	t.Helper()
	code, data := sendRaw(t, e.hc, method, path, body)
	return code, string(data)
}

// want sends body and fails unless the answer has status.
func (e *capEnv) want(t *testing.T, status int, method, path, body string) string {
	t.Helper()
	got, data := e.do(t, method, path, body)
	if got != status {
		t.Fatalf("%s %s: %d %s, want %d", method, path, got, data, status)
	}
	return data
}

// detach starts a turn without following it.
func (e *capEnv) detach(t *testing.T, binding, ch, runID, msg, text string) {
	t.Helper()
	body, _ := json.Marshal(apitype.TurnRequest{Channel: ch, Binding: binding, RunID: runID, MessageID: msg, Text: text})
	e.want(t, http.StatusAccepted, http.MethodPost, "/v1/turns?stream=false", string(body))
}

// events reads a run's stream (path with its query) to its end: the
// lines, and the events the lines decode to.
func (e *capEnv) events(t *testing.T, path string) ([]string, []apitype.Event) {
	t.Helper()
	data := e.want(t, http.StatusOK, http.MethodGet, path, "")
	lines := strings.Split(strings.TrimSuffix(data, "\n"), "\n")
	var evs []apitype.Event
	for _, l := range lines {
		var ev apitype.Event
		if err := json.Unmarshal([]byte(l), &ev); err != nil {
			t.Fatalf("GET %s: line %q: %v", path, l, err)
		}
		evs = append(evs, ev)
	}
	return lines, evs
}

// end is the run's last event, once it has ended.
func (e *capEnv) end(t *testing.T, runID string) apitype.Event {
	t.Helper()
	_, evs := e.events(t, "/v1/runs/"+runID+"/events")
	return evs[len(evs)-1]
}

// feed reads GET /v1/events?after=N line by line until match says stop;
// it fails the test when the feed goes quiet for longer than a minute.
func (e *capEnv) feed(t *testing.T, after string, match func(apitype.FeedEvent) bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://residentd/v1/events?after="+after, nil)
	resp, err := e.hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /v1/events?after=%s: %s", after, resp.Status)
	}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		var ev apitype.FeedEvent
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			t.Fatalf("feed line %q: %v", sc.Bytes(), err)
		}
		if match(ev) {
			return
		}
	}
	t.Fatalf("the feed ended without what was awaited: %v", sc.Err())
}

// queued waits until run is queued behind the key's running turn.
func (e *capEnv) queued(t *testing.T, runID string) {
	t.Helper()
	if _, evs := e.events(t, "/v1/runs/"+runID+"/events?until=queued"); evs[len(evs)-1].Event != apitype.EventQueued {
		t.Fatalf("run %s ended without waiting: %s", runID, kinds(evs))
	}
}

// started waits until run has its process (and its key).
func (e *capEnv) started(t *testing.T, runID string) {
	t.Helper()
	if _, evs := e.events(t, "/v1/runs/"+runID+"/events?until=started"); evs[len(evs)-1].Event != apitype.EventStarted {
		t.Fatalf("run %s ended without starting: %s", runID, kinds(evs))
	}
}

// holding waits until run's agent says it holds the turn ([[hold:PATH]]).
func (e *capEnv) holding(t *testing.T, runID string) {
	t.Helper()
	for after := int64(0); ; {
		_, evs := e.events(t, fmt.Sprintf("/v1/runs/%s/events?after=%d&until=update", runID, after))
		ev := evs[len(evs)-1]
		if ev.Event != apitype.EventUpdate {
			t.Fatalf("run %s ended before its agent held the turn: %s", runID, kinds(evs))
		}
		if ev.Update.Kind == apitype.UpdateThought && strings.HasPrefix(ev.Update.Text, "holding until") {
			return
		}
		after = ev.Seq
	}
}

// release creates the file a [[hold:PATH]] waits for.
func release(t *testing.T, path string) {
	t.Helper()
	if err := os.WriteFile(path, nil, 0o600); err != nil {
		t.Fatal(err)
	}
}

// capabilityProbes exercise, over the socket, the feature each capability
// promises. The order matters only for durable_runs, which restarts the
// daemon and so comes last.
var capabilityProbes = []struct {
	name  string
	probe func(t *testing.T, e *capEnv)
}{
	{apitype.CapabilityRuns, func(t *testing.T, e *capEnv) {
		e.detach(t, "b-builtin", "ch-runs", "run-runs", "", "@agent hi")
		if end := e.end(t, "run-runs"); end.Event != apitype.EventDone {
			t.Fatalf("run-runs ended %+v", end)
		}
		if list := e.want(t, http.StatusOK, http.MethodGet, "/v1/runs", ""); !strings.Contains(list, `"run_id":"run-runs"`) {
			t.Fatalf("GET /v1/runs does not list run-runs: %s", list)
		}
		if run := e.want(t, http.StatusOK, http.MethodGet, "/v1/runs/run-runs", ""); !strings.Contains(run, `"state":"succeeded"`) {
			t.Fatalf("GET /v1/runs/run-runs: %s", run)
		}
		if _, evs := e.events(t, "/v1/runs/run-runs/events?after=1"); evs[0].Seq != 2 {
			t.Fatalf("re-attached after seq 1: first event %+v", evs[0])
		}
	}},
	{apitype.CapabilityPermissions, func(t *testing.T, e *capEnv) {
		e.detach(t, "b-ask", "ch-perm", "run-perm", "", "@agent [[permission:execute]] run the tests")
		_, evs := e.events(t, "/v1/runs/run-perm/events?until=permission_request")
		asked := evs[len(evs)-1]
		if asked.Event != apitype.EventPermissionRequest {
			t.Fatalf("run-perm: %s, want a permission request", kinds(evs))
		}
		e.want(t, http.StatusOK, http.MethodPost, "/v1/runs/run-perm/permissions/"+asked.Permission.ID, `{"option_id":"allow"}`)
		_, evs = e.events(t, "/v1/runs/run-perm/events?until=permission_decision")
		if d := evs[len(evs)-1]; d.Decision == nil || d.Decision.DecidedBy != apitype.DecidedByPerson {
			t.Fatalf("run-perm's decision %+v", d)
		}
	}},
	{apitype.CapabilityElicitation, func(t *testing.T, e *capEnv) {
		e.detach(t, "b-ask", "ch-form", "run-form", "", "@agent [[elicit:deploy]]")
		_, evs := e.events(t, "/v1/runs/run-form/events?until=elicitation_request")
		asked := evs[len(evs)-1]
		if asked.Event != apitype.EventElicitationRequest {
			t.Fatalf("run-form: %s, want an elicitation request", kinds(evs))
		}
		e.want(t, http.StatusBadRequest, http.MethodPost, "/v1/runs/run-form/elicitations/"+asked.Elicitation.ID, `{"action":"accept","content":{"env":"moon","confirm":true}}`)
		e.want(t, http.StatusOK, http.MethodPost, "/v1/runs/run-form/elicitations/"+asked.Elicitation.ID, `{"action":"accept","content":{"env":"staging","confirm":true}}`)
		_, evs = e.events(t, "/v1/runs/run-form/events?until=elicitation_answer")
		if a := evs[len(evs)-1]; a.Elicited == nil || a.Elicited.Action != apitype.ElicitAccept || a.Elicited.DecidedBy != apitype.DecidedByPerson {
			t.Fatalf("run-form's answer %+v", a)
		}
		e.end(t, "run-form")
	}},
	{apitype.CapabilityApprovers, func(t *testing.T, e *capEnv) {
		e.detach(t, "b-approve", "ch-approve", "run-approve", "", "@agent [[permission:execute]]")
		_, evs := e.events(t, "/v1/runs/run-approve/events?until=permission_request")
		asked := evs[len(evs)-1]
		if asked.Event != apitype.EventPermissionRequest {
			t.Fatalf("run-approve: %s, want a permission request", kinds(evs))
		}
		path := "/v1/runs/run-approve/permissions/" + asked.Permission.ID
		e.want(t, http.StatusForbidden, http.MethodPost, path, `{"option_id":"allow","answered_by":"u-bo"}`)
		e.want(t, http.StatusOK, http.MethodPost, path, `{"option_id":"allow","answered_by":"u-ana"}`)
		_, evs = e.events(t, "/v1/runs/run-approve/events?until=permission_decision")
		if d := evs[len(evs)-1]; d.Decision == nil || d.Decision.AnsweredBy != "u-ana" {
			t.Fatalf("run-approve's decision %+v", d)
		}
		e.end(t, "run-approve")
	}},
	{apitype.CapabilityKeepalive, func(t *testing.T, e *capEnv) {
		e.feed(t, "9223372036854775807", func(ev apitype.FeedEvent) bool { return ev.Event == apitype.EventKeepalive })
	}},
	{apitype.CapabilityLeanStream, func(t *testing.T, e *capEnv) {
		e.detach(t, "b-builtin", "ch-lean", "run-lean", "", "@agent hi")
		lines, evs := e.events(t, "/v1/runs/run-lean/events?lean=true")
		chunks := 0
		for i, ev := range evs {
			if ev.Update != nil && ev.Update.Kind == apitype.UpdateMessage {
				chunks++
				if ev.Update.Raw != nil {
					t.Fatalf("a lean text chunk with raw: %s", lines[i])
				}
			}
		}
		if done := evs[len(evs)-1]; chunks == 0 || done.Event != apitype.EventDone || done.Text != "" {
			t.Fatalf("lean stream: %d chunks, end %+v; want chunks and a done without text", chunks, done)
		}
	}},
	{apitype.CapabilityEventFeed, func(t *testing.T, e *capEnv) {
		e.detach(t, "b-builtin", "ch-feed", "run-feed", "", "@agent hi")
		e.end(t, "run-feed")
		started := false
		e.feed(t, "0", func(ev apitype.FeedEvent) bool {
			if ev.RunID != "run-feed" {
				return false
			}
			started = started || ev.Event == apitype.FeedRunStarted
			return started && ev.Event == apitype.FeedRunEnded && ev.State == apitype.RunSucceeded
		})
	}},
	{apitype.CapabilityAgentRuns, func(t *testing.T, e *capEnv) {
		e.detach(t, "b-builtin", "ch-later", "run-later", "", "@agent [[later:20ms]] and then")
		e.end(t, "run-later")
		var agentRun string
		e.feed(t, "0", func(ev apitype.FeedEvent) bool {
			if ev.Event == apitype.FeedRunStarted && ev.Kind == apitype.RunKindAgent && ev.Channel == "ch-later" {
				agentRun = ev.RunID
			}
			return agentRun != ""
		})
		_, evs := e.events(t, "/v1/runs/"+agentRun+"/events")
		if evs[0].Shape != apitype.ShapeAgent || evs[len(evs)-1].Event != apitype.EventDone || !strings.Contains(evs[len(evs)-1].Text, "later output") {
			t.Fatalf("agent run %s: %+v … %+v", agentRun, evs[0], evs[len(evs)-1])
		}
	}},
	{apitype.CapabilityEventsUntil, func(t *testing.T, e *capEnv) {
		e.detach(t, "b-builtin", "ch-until", "run-until", "", "@agent hi")
		// It may wait for a slot first (queued no_slot).
		if _, evs := e.events(t, "/v1/runs/run-until/events?until=started"); evs[len(evs)-1].Event != apitype.EventStarted || slices.ContainsFunc(evs, func(ev apitype.Event) bool { return ev.Event == apitype.EventUpdate }) {
			t.Fatalf("until=started: %s", kinds(evs))
		}
	}},
	{apitype.CapabilityAttachments, func(t *testing.T, e *capEnv) {
		e.want(t, http.StatusOK, http.MethodPost, "/v1/messages", `{"messages":[{"id":"a1","channel_id":"ch-att","author":"aiko","author_kind":"user","created_at":"2026-12-01T09:00:00Z","body":"log",`+
			`"attachments":[{"name":"a.txt","type":"text/plain","data":"aGVsbG8="}]}]}`)
		if body := e.want(t, http.StatusBadRequest, http.MethodPost, "/v1/messages", `{"messages":[{"id":"a2","channel_id":"ch-att","author":"aiko","author_kind":"user","created_at":"2026-12-01T09:00:00Z","body":"img",`+
			`"attachments":[{"name":"a.png","type":"image/png","data":"aGVsbG8="}]}]}`); !strings.Contains(body, apitype.CodeInvalidAttachment) {
			t.Fatalf("a PNG that is text: %s", body)
		}
	}},
	{apitype.CapabilityMessageDelete, func(t *testing.T, e *capEnv) {
		e.want(t, http.StatusOK, http.MethodPost, "/v1/messages", `{"messages":[{"id":"d1","channel_id":"ch-del","author":"aiko","author_kind":"user","created_at":"2026-12-01T09:00:00Z","body":"oops"}]}`)
		e.want(t, http.StatusOK, http.MethodDelete, "/v1/messages/ch-del/d1", "")
		e.want(t, http.StatusNotFound, http.MethodDelete, "/v1/messages/ch-del/d1", "")
	}},
	{apitype.CapabilityBurstsCoalesce, func(t *testing.T, e *capEnv) {
		hold := filepath.Join(e.dir, "hold-coalesce")
		e.detach(t, "b-coalesce", "ch-co", "run-co-1", "", "@agent first [[hold:"+hold+"]]")
		e.started(t, "run-co-1") // it has the key: the next two wait behind it
		e.detach(t, "b-coalesce", "ch-co", "run-co-2", "c2", "@agent second")
		e.detach(t, "b-coalesce", "ch-co", "run-co-3", "c3", "@agent third")
		e.queued(t, "run-co-2")
		e.queued(t, "run-co-3")
		release(t, hold)
		lead, taken := e.end(t, "run-co-2"), e.end(t, "run-co-3")
		if !slices.Equal(lead.Answers, []apitype.Answered{{RunID: "run-co-2", MessageID: "c2"}, {RunID: "run-co-3", MessageID: "c3"}}) || taken.AnsweredBy != "run-co-2" {
			t.Fatalf("coalesced: run-co-2 ended %+v, run-co-3 %+v", lead, taken)
		}
	}},
	{apitype.CapabilityBurstsSteer, func(t *testing.T, e *capEnv) {
		hold := filepath.Join(e.dir, "hold-steer")
		e.detach(t, "b-steer", "ch-steer", "run-st-1", "s1", "@agent first [[hold:"+hold+"]]")
		e.holding(t, "run-st-1") // its agent works on the turn: a mention can join it
		e.detach(t, "b-steer", "ch-steer", "run-st-2", "s2", "@agent second")
		testkit.WaitFor(t, 30*time.Second, func() bool {
			data, _ := os.ReadFile(e.steerRecord())
			return strings.Contains(string(data), `"_session/steering"`)
		}, testkit.Waiting("run-st-2 to be steered into run-st-1"))
		release(t, hold)
		head, taken := e.end(t, "run-st-1"), e.end(t, "run-st-2")
		if len(head.Answers) != 2 || head.Answers[1] != (apitype.Answered{RunID: "run-st-2", MessageID: "s2"}) || taken.AnsweredBy != "run-st-1" {
			t.Fatalf("steered: run-st-1 ended %+v, run-st-2 %+v", head, taken)
		}
	}},
	{apitype.CapabilityContextHeld, func(t *testing.T, e *capEnv) {
		hold := filepath.Join(e.dir, "hold-held")
		e.detach(t, "b-builtin", "ch-held", "run-held-1", "", "@agent first [[hold:"+hold+"]]")
		e.started(t, "run-held-1")
		e.want(t, http.StatusOK, http.MethodPost, "/v1/messages", `{"messages":[`+
			`{"id":"h2","channel_id":"ch-held","author":"aiko","author_kind":"user","created_at":"2026-12-01T09:00:00Z","body":"@agent second"},`+
			`{"id":"h3","channel_id":"ch-held","author":"ben","author_kind":"user","created_at":"2026-12-01T09:00:01Z","body":"@agent third"}]}`)
		e.detach(t, "b-builtin", "ch-held", "run-held-2", "h2", "@agent second")
		e.detach(t, "b-builtin", "ch-held", "run-held-3", "h3", "@agent third")
		e.queued(t, "run-held-2")
		e.queued(t, "run-held-3")
		release(t, hold)
		lines, evs := e.events(t, "/v1/runs/run-held-2/events")
		done := evs[len(evs)-1]
		if done.Context == nil || done.Context.Held != 1 || !strings.Contains(lines[len(lines)-1], `"held":1`) || slices.Contains(done.Context.Shown, "h3") {
			t.Fatalf("run-held-2's context %+v, want h3 held out of it", done.Context)
		}
	}},
	{apitype.CapabilityThreadScope, func(t *testing.T, e *capEnv) {
		if b := e.want(t, http.StatusOK, http.MethodGet, "/v1/bindings", ""); !strings.Contains(b, `"id":"b-thread"`) || !strings.Contains(b, `"scope":"thread"`) {
			t.Fatalf("bindings: %s", b)
		}
		e.want(t, http.StatusOK, http.MethodPost, "/v1/messages", `{"messages":[{"id":"root","channel_id":"ch-th","author":"aiko","author_kind":"user","created_at":"2026-12-01T09:00:00Z","body":"a thread"}]}`)
		body, _ := json.Marshal(apitype.TurnRequest{Channel: "ch-th", Binding: "b-thread", RunID: "run-th", ThreadRoot: new("root"), Text: "@agent in the thread"})
		e.want(t, http.StatusAccepted, http.MethodPost, "/v1/turns?stream=false", string(body))
		if end := e.end(t, "run-th"); end.Event != apitype.EventDone {
			t.Fatalf("run-th ended %+v", end)
		}
		if s := e.want(t, http.StatusOK, http.MethodGet, "/v1/sessions", ""); !strings.Contains(s, `"thread_root_id":"root"`) {
			t.Fatalf("sessions without the thread's: %s", s)
		}
		e.want(t, http.StatusOK, http.MethodPost, "/v1/sessions/fresh", `{"channel_id":"ch-th","binding_id":"b-thread","thread_root_id":"root"}`)
	}},
	{apitype.CapabilitySessionOptions, func(t *testing.T, e *capEnv) {
		e.want(t, http.StatusOK, http.MethodPut, "/v1/sessions/options", `{"channel_id":"ch-opt","binding_id":"b-builtin","options":{"model":"builtin-large"}}`)
		if o := e.want(t, http.StatusOK, http.MethodGet, "/v1/sessions/options?channel_id=ch-opt&binding_id=b-builtin", ""); !strings.Contains(o, `"model":"builtin-large"`) {
			t.Fatalf("options: %s", o)
		}
	}},
	{apitype.CapabilityBudgets, func(t *testing.T, e *capEnv) {
		if b := e.want(t, http.StatusOK, http.MethodGet, "/v1/budgets", ""); !strings.Contains(b, `"scope":"binding","id":"b-builtin"`) {
			t.Fatalf("budgets: %s", b)
		}
	}},
	{apitype.CapabilityExactMoney, func(t *testing.T, e *capEnv) {
		e.detach(t, "b-builtin", "ch-money", "run-money", "", "@agent what does it cost")
		lines, _ := e.events(t, "/v1/runs/run-money/events")
		if !strings.Contains(lines[len(lines)-1], `"cost":"0.4"`) {
			t.Fatalf("done without a cost of \"0.4\": %s", lines[len(lines)-1])
		}
		if b := e.want(t, http.StatusOK, http.MethodGet, "/v1/budgets", ""); !strings.Contains(b, `"limit":"100"`) {
			t.Fatalf("budgets without a limit of \"100\": %s", b)
		}
	}},
	{apitype.CapabilityConfigReload, func(t *testing.T, e *capEnv) {
		if r := e.want(t, http.StatusOK, http.MethodPost, "/v1/config/reload", ""); !strings.Contains(r, fmt.Sprintf(`"file":%q`, e.file)) {
			t.Fatalf("reload: %s", r)
		}
	}},
	{apitype.CapabilityTraces, func(t *testing.T, _ *capEnv) {
		// A daemon that traces: its own environment.
		e := newTracedEnv(t)
		until(t, e.postBody(t, `{"channel_id":"ch","binding_id":"b-builtin","run_id":"run-tr","text":"@agent hi"}`, "traceparent", "00-"+clientTrace+"-"+clientSpan+"-01"))
		if r, err := e.c.Run(context.Background(), "run-tr"); err != nil || r.TraceID != clientTrace || r.SpanID == "" {
			t.Fatalf("run-tr's trace %q span %q (%v), want the client's trace", r.TraceID, r.SpanID, err)
		}
	}},
	{apitype.CapabilityAgentTools, func(t *testing.T, e *capEnv) {
		e.want(t, http.StatusOK, http.MethodPut, "/v1/channels/ch-tools/roster", `{"members":[{"handle":"aiko","kind":"user","reachable":true}]}`)
		e.want(t, http.StatusOK, http.MethodPut, "/v1/channels/ch-tools/project", `{"project":"p1"}`)
		e.want(t, http.StatusOK, http.MethodPost, "/v1/projects/p1/activity", `{"items":[{"kind":"ci","summary":"refund spec failed on main","link":"https://ci.example/42","at":"2026-12-01T09:00:00Z"}]}`)
	}},
	{apitype.CapabilityWorktrees, func(t *testing.T, e *capEnv) {
		if b := e.want(t, http.StatusOK, http.MethodGet, "/v1/bindings", ""); !strings.Contains(b, `"id":"b-wt"`) || !strings.Contains(b, `"workspace":"worktree"`) {
			t.Fatalf("bindings: %s", b)
		}
		e.want(t, http.StatusAccepted, http.MethodPost, "/v1/turns?stream=false", `{"channel_id":"ch-wt","binding_id":"b-wt","run_id":"run-wt","text":"@agent [[write-cwd:notes.txt]]"}`)
		if end := e.end(t, "run-wt"); end.Event != apitype.EventDone {
			t.Fatalf("run-wt ended %+v", end)
		}
		var l apitype.Sessions
		if err := json.Unmarshal([]byte(e.want(t, http.StatusOK, http.MethodGet, "/v1/sessions", "")), &l); err != nil {
			t.Fatal(err)
		}
		if len(l.Worktrees) != 1 || l.Worktrees[0].Changes != 1 || len(l.Worktrees[0].Changed) != 1 || l.Worktrees[0].Changed[0] != "?? notes.txt" {
			t.Fatalf("worktrees %+v, want ch-wt's with the agent's notes.txt", l.Worktrees)
		}
		var row *apitype.Worktree
		for _, s := range l.Sessions {
			if s.Channel == "ch-wt" {
				row = s.Worktree
			}
		}
		if row == nil || row.Path != l.Worktrees[0].Path || row.Branch != "residentd/b-wt/ch-wt" {
			t.Fatalf("ch-wt's session row has worktree %+v", row)
		}
		fresh := `{"channel_id":"ch-wt","binding_id":"b-wt","reset_worktree":true}`
		if r := e.want(t, http.StatusConflict, http.MethodPost, "/v1/sessions/fresh", fresh); !strings.Contains(r, `"code":"worktree_has_changes"`) || !strings.Contains(r, "notes.txt") {
			t.Fatalf("reset of a worktree with changes: %s", r)
		}
		if err := os.Remove(filepath.Join(row.Path, "notes.txt")); err != nil {
			t.Fatal(err)
		}
		if r := e.want(t, http.StatusOK, http.MethodPost, "/v1/sessions/fresh", fresh); !strings.Contains(r, `"removed":true`) {
			t.Fatalf("reset of a clean worktree: %s", r)
		}
	}},
	{apitype.CapabilityBackgroundWork, func(t *testing.T, e *capEnv) {
		e.want(t, http.StatusAccepted, http.MethodPost, "/v1/turns?stream=false", `{"channel_id":"ch-v2","binding_id":"b-v2","run_id":"run-v2","text":"@agent [[bg:terminal:1h]]"}`)
		if end := e.end(t, "run-v2"); end.Event != apitype.EventDone {
			t.Fatalf("run-v2 ended %+v", end)
		}
		var l apitype.Sessions
		if err := json.Unmarshal([]byte(e.want(t, http.StatusOK, http.MethodGet, "/v1/sessions", "")), &l); err != nil {
			t.Fatal(err)
		}
		var item apitype.BackgroundItem
		for _, s := range l.Sessions {
			if s.Channel == "ch-v2" && s.AgentState == "idle" && len(s.Background) == 1 {
				item = s.Background[0]
			}
		}
		if item.Type != "terminal" || !item.Cancelable {
			t.Fatalf("ch-v2's row: %+v", l.Sessions)
		}
		e.want(t, http.StatusOK, http.MethodPost, "/v1/sessions/background/cancel", `{"channel_id":"ch-v2","binding_id":"b-v2","type":"terminal","item_id":"`+item.ID+`"}`)
	}},
	{apitype.CapabilityDurableRuns, func(t *testing.T, e *capEnv) {
		turn := `{"channel_id":"ch-dur","binding_id":"b-builtin","run_id":"run-dur","message_id":"m-dur","text":"@agent remember"}`
		e.want(t, http.StatusAccepted, http.MethodPost, "/v1/turns?stream=false", turn)
		if _, evs := e.events(t, "/v1/runs/run-dur/events?until=started"); evs[len(evs)-1].Attempt != 1 {
			t.Fatalf("started %+v, want attempt 1", evs[len(evs)-1])
		}
		e.end(t, "run-dur")
		if err := e.h.Restart(); err != nil {
			t.Fatal(err)
		}
		if r := e.want(t, http.StatusAccepted, http.MethodPost, "/v1/turns?stream=false", turn); !strings.Contains(r, `"state":"succeeded"`) || !strings.Contains(r, `"attempt":1`) {
			t.Fatalf("the mention sent again after a restart: %s, want its run, succeeded", r)
		}
	}},
}

// Every capability /v1/version lists has a probe, and each probe's feature
// answers as docs/API.md ("Capabilities") promises.
func TestCapabilitiesAnswer(t *testing.T) {
	e := newCapEnv(t)
	v, err := e.c.Version(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var probed []string
	for _, p := range capabilityProbes {
		probed = append(probed, p.name)
	}
	sameSet(t, "capabilities", "GET /v1/version", union(v.Capabilities), "the probes", union(probed))
	for _, p := range capabilityProbes {
		if !t.Run(p.name, func(t *testing.T) { p.probe(t, e) }) {
			return // a probe that failed may leave the daemon busy
		}
	}
}
