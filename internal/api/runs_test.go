package api

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/residentd/residentd/apitype"
	"github.com/residentd/residentd/client"
	"github.com/residentd/residentd/internal/config"
	"github.com/residentd/residentd/internal/permission"
)

// withAsk adds b-ask: the built-in agent with a permission policy that puts
// requests to a person.
func withAsk(policy permission.Policy, timeout time.Duration) func(*config.Config) {
	return func(c *config.Config) {
		b := c.Bindings[0]
		b.ID, b.Permission, b.PermissionTimeout = "b-ask", policy, config.Duration(timeout)
		c.Bindings = append(c.Bindings, b)
	}
}

// stream is one NDJSON response read line by line.
type stream struct {
	t      *testing.T
	resp   *http.Response
	sc     *bufio.Scanner
	cancel context.CancelFunc
}

// post sends a turn and returns its open stream.
func (e *env) post(t *testing.T, req apitype.TurnRequest) *stream {
	t.Helper()
	return e.postTo(t, "/v1/turns", req)
}

// postTo sends a turn to path (with its query) and returns the stream.
func (e *env) postTo(t *testing.T, path string, req apitype.TurnRequest) *stream {
	t.Helper()
	body, _ := json.Marshal(req)
	ctx, cancel := context.WithCancel(context.Background())
	hr, _ := http.NewRequestWithContext(ctx, "POST", "http://residentd"+path, strings.NewReader(string(body)))
	resp, err := e.hc.Do(hr)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "application/x-ndjson" {
		cancel()
		t.Fatalf("turn: status %d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	return &stream{t: t, resp: resp, sc: sc, cancel: cancel}
}

// next returns the next line's event.
func (s *stream) next() apitype.Event {
	s.t.Helper()
	if !s.sc.Scan() {
		s.t.Fatalf("stream ended: %v", s.sc.Err())
	}
	var ev apitype.Event
	if err := json.Unmarshal(s.sc.Bytes(), &ev); err != nil {
		s.t.Fatalf("line %q: %v", s.sc.Bytes(), err)
	}
	return ev
}

// until reads events up to the first of kind and returns them all.
func (s *stream) until(kind string) []apitype.Event {
	s.t.Helper()
	var evs []apitype.Event
	for {
		ev := s.next()
		evs = append(evs, ev)
		if ev.Event == kind {
			return evs
		}
	}
}

// hangUp closes the client's side of the connection.
func (s *stream) hangUp() {
	s.cancel()
	s.resp.Body.Close()
}

func kinds(evs []apitype.Event) string {
	var k []string
	for _, ev := range evs {
		k = append(k, ev.Event)
	}
	return strings.Join(k, ",")
}

// A run keeps going when its client goes away; a second client re-attaches
// after the last event it has, gets exactly the missing ones in order, then
// the live ones, and answers the run's permission request.
func TestRunOutlivesItsConnection(t *testing.T) {
	e := newEnv(t, withAsk(permission.Ask, time.Hour))
	ctx := context.Background()
	s := e.post(t, apitype.TurnRequest{Channel: "ch", Binding: "b-ask", RunID: "run-keep", Text: "@agent run the tests [[permission:execute]]"})
	started := s.next()
	if started.Event != apitype.EventStarted || started.Seq != 1 || started.RunID != "run-keep" || started.Shape != "cold" || started.Pid <= 0 {
		t.Fatalf("first event %+v", started)
	}
	// Wait, on another connection, until the agent asks; then hang up
	// having read only the started event.
	var req apitype.PermissionRequest
	for {
		r, err := e.c.Run(ctx, "run-keep")
		if err != nil {
			t.Fatal(err)
		}
		if len(r.Pending) > 0 {
			req = r.Pending[0]
			break
		}
		if r.Result != nil {
			t.Fatalf("run ended before it asked: %+v", r.Result)
		}
		time.Sleep(5 * time.Millisecond) // polling the API as a UI would; the condition is checked, not assumed
	}
	s.hangUp()
	r, err := e.c.Run(ctx, "run-keep")
	if err != nil || r.State != apitype.RunRunning || len(r.Pending) != 1 {
		t.Fatalf("run after its client left: %+v, %v", r, err)
	}

	var got []apitype.Event
	var mu sync.Mutex
	asked := make(chan apitype.Event, 1)
	type end struct {
		ev  apitype.Event
		err error
	}
	ended := make(chan end, 1)
	go func() {
		ev, err := e.c.Follow(ctx, "run-keep", 1, func(ev apitype.Event) {
			mu.Lock()
			got = append(got, ev)
			mu.Unlock()
			if ev.Event == apitype.EventPermissionRequest {
				asked <- ev
			}
		})
		ended <- end{ev, err}
	}()
	p := <-asked
	if p.Seq != 2 || p.Permission == nil || p.Permission.ID != req.ID || p.Permission.ToolCall.Kind != "execute" || len(p.Permission.Options) != 4 {
		t.Fatalf("replayed permission request %+v", p)
	}
	if err := e.c.Answer(ctx, "run-keep", req.ID, "maybe"); !client.IsCode(err, apitype.CodeBadOption) || err.(*client.Error).Status != 400 {
		t.Fatalf("wrong option: %v", err)
	}
	if err := e.c.Answer(ctx, "run-keep", req.ID, "allow"); err != nil {
		t.Fatal(err)
	}
	if err := e.c.Answer(ctx, "run-keep", req.ID, "reject"); !client.IsCode(err, apitype.CodeAlreadyAnswered) || err.(*client.Error).Status != 409 {
		t.Fatalf("second answer: %v", err)
	}
	res := <-ended
	if res.err != nil || res.ev.Event != apitype.EventDone {
		t.Fatalf("followed run ended with %+v, %v", res.ev, res.err)
	}
	mu.Lock()
	defer mu.Unlock()
	for i, ev := range got {
		if ev.Seq != int64(i+2) || ev.RunID != "run-keep" {
			t.Fatalf("event %d has seq %d run %q; want %d in order: %s", i, ev.Seq, ev.RunID, i+2, kinds(got))
		}
	}
	if res.ev.Seq != int64(len(got)+1) || got[len(got)-1].Event != apitype.EventDone {
		t.Fatalf("done has seq %d after %d events", res.ev.Seq, len(got))
	}
	decision, thought := decided(got)
	if decision == nil || decision.DecidedBy != apitype.DecidedByPerson || decision.OptionID != "allow" || decision.Kind != "allow_once" {
		t.Fatalf("decision %+v", decision)
	}
	if thought != "permission execute ok: selected allow" {
		t.Fatalf("the agent's own report of the answer: %q", thought)
	}
	if r, _ := e.c.Run(ctx, "run-keep"); r.State != apitype.RunSucceeded || r.Result == nil || r.Result.Event != apitype.EventDone || r.EndedAt == nil {
		t.Fatalf("ended run %+v", r)
	}
}

// A reader asking for events that fell out of the buffer gets events_gone
// and the run's final result.
func TestEventsGone(t *testing.T) {
	e := newEnv(t, func(c *config.Config) { c.Runs.Events = 3 })
	ctx := context.Background()
	// Submitted, not followed: a live reader could itself fall behind a
	// buffer this small.
	if _, err := e.c.Submit(ctx, apitype.TurnRequest{Channel: "ch", Binding: "b-builtin", RunID: "run-gone", Text: "@agent hi"}); err != nil {
		t.Fatal(err)
	}
	rn, err := e.d.Run("run-gone")
	if err != nil {
		t.Fatal(err)
	}
	var done apitype.Event
	for {
		ch := rn.Wait()
		if ev, _, ended := rn.Result(); ended {
			done = ev
			break
		}
		<-ch
	}
	if done.Seq <= 3 {
		t.Fatalf("the turn had only %d events; the test needs more than the buffer's 3", done.Seq)
	}
	_, err = e.c.Follow(ctx, "run-gone", 0, nil)
	if !client.IsCode(err, apitype.CodeEventsGone) || err.(*client.Error).Status != http.StatusGone {
		t.Fatalf("follow from the start: %v", err)
	}
	status, body := e.rawBody(t, "GET", "/v1/runs/run-gone/events?after=1", "")
	var gone apitype.EventsGone
	if err := json.Unmarshal(body, &gone); err != nil || status != http.StatusGone || gone.Run.Result == nil || gone.Run.Result.Text != done.Text || gone.Run.State != apitype.RunSucceeded ||
		!strings.Contains(gone.Error.Message, "runs.events and runs.bytes") {
		t.Fatalf("events_gone body (%d): %s", status, body)
	}
	// What is still buffered is served.
	var tail []apitype.Event
	last, err := e.c.Follow(ctx, "run-gone", done.Seq-3, func(ev apitype.Event) { tail = append(tail, ev) })
	if err != nil || last.Seq != done.Seq || len(tail) != 3 {
		t.Fatalf("the buffered tail: %d events, last %+v, %v", len(tail), last, err)
	}
	for _, q := range []string{"after=-1", "after=x"} {
		if status, _ := e.raw(t, "GET", "/v1/runs/run-gone/events?"+q, ""); status != 400 {
			t.Errorf("events?%s: status %d", q, status)
		}
	}
	if status, er := e.raw(t, "GET", "/v1/runs/run-nope/events", ""); status != 404 || er.Code != apitype.CodeUnknownRun {
		t.Errorf("events of an unknown run: %d %+v", status, er)
	}
}

// A run behind a busy key and one waiting for a slot each say why they
// wait and where they stand, get keepalives while they wait, and then start.
func TestQueuedStartedAndKeepalive(t *testing.T) {
	e := newEnv(t, withAsk(permission.Ask, time.Hour), func(c *config.Config) {
		c.MaxLive = 1
		c.Runs.Keepalive = config.Duration(20 * time.Millisecond)
	})
	ctx := context.Background()
	// The blocker holds ch's session and the only slot until answered.
	blocker := e.post(t, apitype.TurnRequest{Channel: "ch", Binding: "b-ask", RunID: "run-block", Text: "@agent [[permission:edit]]"})
	req := blocker.until(apitype.EventPermissionRequest)
	sameKey := e.post(t, apitype.TurnRequest{Channel: "ch", Binding: "b-ask", RunID: "run-key", Text: "@agent next"})
	q := sameKey.next()
	if q.Event != apitype.EventQueued || q.Reason != apitype.QueueKeyBusy || q.Position != 1 || q.Seq != 1 {
		t.Fatalf("run behind a busy key: %+v", q)
	}
	noSlot := e.post(t, apitype.TurnRequest{Channel: "ch-other", Binding: "b-builtin", RunID: "run-slot", Text: "@agent other"})
	q = noSlot.next()
	if q.Event != apitype.EventQueued || q.Reason != apitype.QueueNoSlot || q.Position != 1 {
		t.Fatalf("run waiting for a slot: %+v", q)
	}
	for _, s := range []*stream{sameKey, noSlot} {
		if ka := s.next(); ka.Event != apitype.EventKeepalive || ka.Seq != 0 {
			t.Fatalf("while waiting: %+v, want a keepalive line without a seq", ka)
		}
	}
	list, err := e.c.Runs(ctx)
	if err != nil || len(list) != 3 {
		t.Fatalf("runs: %+v, %v", list, err)
	}
	states := map[string]string{}
	for _, r := range list {
		states[r.ID] = r.State + "/" + r.QueueReason
	}
	if states["run-block"] != "running/" || states["run-key"] != "queued/key_busy" || states["run-slot"] != "queued/no_slot" {
		t.Fatalf("run states %v", states)
	}
	if err := e.c.Answer(ctx, "run-block", req[len(req)-1].Permission.ID, "allow"); err != nil {
		t.Fatal(err)
	}
	blocker.until(apitype.EventDone)
	for _, s := range []*stream{sameKey, noSlot} {
		evs := s.until(apitype.EventDone)
		var started *apitype.Event
		for i := range evs {
			if evs[i].Event == apitype.EventStarted {
				started = &evs[i]
			}
		}
		if started == nil || started.Pid <= 0 || started.Native == "" {
			t.Fatalf("after the wait: %s", kinds(evs))
		}
		s.hangUp()
	}
}

// The permission round trip with the built-in agent asking: each way a
// request can be answered.
func TestPermissionAnswers(t *testing.T) {
	for _, tt := range []struct {
		name    string
		policy  permission.Policy
		timeout time.Duration
		kind    string
		answer  func(e *env, runID, reqID string) // nil: the request is not asked
		by      string
		option  string
		thought string
		outcome string // done or error code
	}{
		{name: "allow once", policy: permission.Ask, kind: "edit", answer: answerWith("allow"), by: "person", option: "allow", thought: "selected allow", outcome: "done"},
		{name: "reject", policy: permission.Ask, kind: "edit", answer: answerWith("reject"), by: "person", option: "reject", thought: "selected reject", outcome: "done"},
		{name: "allow always", policy: permission.Ask, kind: "delete", answer: answerWith("allow-always"), by: "person", option: "allow-always", thought: "selected allow-always", outcome: "done"},
		{name: "timeout rejects", policy: permission.Ask, timeout: 30 * time.Millisecond, kind: "edit", by: "timeout", option: "reject", thought: "selected reject", outcome: "done"},
		{name: "read-only+ask allows reads itself", policy: permission.ReadOnlyAsk, kind: "read", by: "policy", option: "allow", thought: "selected allow", outcome: "done"},
		{name: "read-only+ask asks the rest", policy: permission.ReadOnlyAsk, kind: "execute", answer: answerWith("reject"), by: "person", option: "reject", thought: "selected reject", outcome: "done"},
		{name: "cancel while pending", policy: permission.Ask, kind: "edit", answer: func(e *env, runID, _ string) {
			if err := e.c.Cancel(context.Background(), runID); err != nil {
				panic(err)
			}
		}, by: "cancel", outcome: apitype.CodeCancelled},
	} {
		t.Run(tt.name, func(t *testing.T) {
			timeout := tt.timeout
			if timeout == 0 {
				timeout = time.Hour
			}
			e := newEnv(t, withAsk(tt.policy, timeout))
			runID := "run-" + strings.ReplaceAll(tt.name, " ", "-")
			var evs []apitype.Event
			done, err := e.c.Turn(context.Background(), apitype.TurnRequest{Channel: "ch", Binding: "b-ask", RunID: runID, Text: "@agent [[permission:" + tt.kind + "]]"}, func(ev apitype.Event) {
				evs = append(evs, ev)
				if ev.Event == apitype.EventPermissionRequest {
					if tt.answer == nil && tt.by != "timeout" {
						t.Errorf("asked although the policy decides: %+v", ev.Permission)
					}
					if tt.answer != nil {
						go tt.answer(e, runID, ev.Permission.ID)
					}
				}
			})
			switch {
			case tt.outcome == "done" && (err != nil || done.Event != "done"):
				t.Fatalf("turn: %+v %v", done, err)
			case tt.outcome != "done" && !client.IsCode(err, tt.outcome):
				t.Fatalf("turn: %v, want %s", err, tt.outcome)
			}
			d, thought := decided(evs)
			if d == nil || d.DecidedBy != tt.by || d.OptionID != tt.option {
				t.Fatalf("decision %+v, want by %s option %q (events %s)", d, tt.by, tt.option, kinds(evs))
			}
			if tt.thought != "" && !strings.HasSuffix(thought, tt.thought) {
				t.Fatalf("the agent saw %q, want %q", thought, tt.thought)
			}
		})
	}
}

// decided is the last permission decision among evs and the text of the
// last thought, which the agent fills with what it made of the answer.
func decided(evs []apitype.Event) (*apitype.PermissionDecision, string) {
	var d *apitype.PermissionDecision
	thought := ""
	for _, ev := range evs {
		if ev.Event == apitype.EventPermissionDecision {
			d = ev.Decision
		}
		if ev.Update != nil && ev.Update.Kind == apitype.UpdateThought {
			thought = ev.Update.Text
		}
	}
	return d, thought
}

func answerWith(option string) func(e *env, runID, reqID string) {
	return func(e *env, runID, reqID string) {
		if err := e.c.Answer(context.Background(), runID, reqID, option); err != nil {
			panic(fmt.Sprintf("answer %s: %v", option, err))
		}
	}
}

// Two clients race to answer: exactly one wins, the other gets 409.
func TestPermissionRace(t *testing.T) {
	e := newEnv(t, withAsk(permission.Ask, time.Hour))
	results := make(chan error, 2)
	_, err := e.c.Turn(context.Background(), apitype.TurnRequest{Channel: "ch", Binding: "b-ask", RunID: "run-race", Text: "@agent [[permission:edit]]"}, func(ev apitype.Event) {
		if ev.Event != apitype.EventPermissionRequest {
			return
		}
		for _, opt := range []string{"allow", "reject"} {
			c := &client.Client{Socket: e.sock}
			go func() { results <- c.Answer(context.Background(), "run-race", ev.Permission.ID, opt) }()
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	var won, lost int
	for range 2 {
		switch err := <-results; {
		case err == nil:
			won++
		case client.IsCode(err, apitype.CodeAlreadyAnswered):
			lost++
		default:
			t.Fatalf("answer: %v", err)
		}
	}
	if won != 1 || lost != 1 {
		t.Fatalf("%d answers won, %d lost", won, lost)
	}
	if err := e.c.Answer(context.Background(), "run-race", "perm-9", "allow"); !client.IsCode(err, apitype.CodeUnknownRequest) {
		t.Fatalf("unknown request: %v", err)
	}
	if err := e.c.Cancel(context.Background(), "run-race"); !client.IsCode(err, apitype.CodeRunEnded) {
		t.Fatalf("cancel of an ended run: %v", err)
	}
}

func TestVersion(t *testing.T) {
	e := newEnv(t)
	v, err := e.c.Version(context.Background())
	if err != nil || v.Version != "test" || v.API != "1" || !slices.Equal(v.Capabilities, Features) || !slices.Contains(v.Capabilities, apitype.CapabilityLeanStream) {
		t.Fatalf("version %+v, %v", v, err)
	}
}

// Submit without following: the run goes on and can be followed later.
func TestSubmitDetached(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	r, err := e.c.Submit(ctx, apitype.TurnRequest{Channel: "ch", Binding: "b-builtin", RunID: "run-detached", Text: "@agent hi"})
	if err != nil || r.ID != "run-detached" || r.Channel != "ch" || r.Binding != "b-builtin" {
		t.Fatalf("submit: %+v, %v", r, err)
	}
	done, err := e.c.Follow(ctx, r.ID, 0, nil)
	if err != nil || done.Event != apitype.EventDone || !strings.HasPrefix(done.Text, "builtin turn=1") {
		t.Fatalf("follow: %+v, %v", done, err)
	}
	if _, err := e.c.Submit(ctx, apitype.TurnRequest{Channel: "ch", Binding: "b-builtin", RunID: "run-detached", Text: "@agent again"}); !client.IsCode(err, apitype.CodeRunInUse) {
		t.Fatalf("reusing a retained run id: %v", err)
	}
}
