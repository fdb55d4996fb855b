package api

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/residentd/residentd/apitype"
	"github.com/residentd/residentd/client"
	"github.com/residentd/residentd/internal/config"
	"github.com/residentd/residentd/internal/permission"
)

// openEvents starts GET /v1/runs/{id}/events?after=N and returns the
// response; the request ends with ctx.
func (e *env) openEvents(t *testing.T, ctx context.Context, runID string, after int64) *http.Response {
	t.Helper()
	req, _ := http.NewRequestWithContext(ctx, "GET", "http://residentd/v1/runs/"+runID+"/events?after="+strconv.FormatInt(after, 10), nil)
	resp, err := e.hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "application/x-ndjson" {
		t.Fatalf("events after %d: %s %s", after, resp.Status, resp.Header.Get("Content-Type"))
	}
	return resp
}

// Following a run from beyond its last event ends: at once for an ended
// run (an empty stream; the client says there was nothing after the
// number), and with the run for a running one, carrying only the events
// numbered above the one asked for.
func TestFollowBeyondTheLastEventEnds(t *testing.T) {
	e := newEnv(t, func(c *config.Config) { c.Runs.Keepalive = config.Duration(20 * time.Millisecond) })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	// An ended run.
	done, err := e.c.Turn(ctx, apitype.TurnRequest{Channel: "ch", Binding: "b-builtin", RunID: "run-short", Text: "@agent hi"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	last := done.Seq
	for _, after := range []int64{last, last + 1, last + 1000} {
		resp := e.openEvents(t, ctx, "run-short", after)
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil || len(body) != 0 {
			t.Fatalf("events after %d of a run that ended at %d: %.300q, %v; want an empty stream that ends", after, last, body, err)
		}
	}
	ev, err := e.c.Follow(ctx, "run-short", last+12, nil)
	var nothing *client.NothingAfterError
	if !errors.As(err, &nothing) || !errors.Is(err, client.ErrNothingAfter) || nothing.Run.LastSeq != last || nothing.Run.State != apitype.RunSucceeded || ev.Event != apitype.EventDone {
		t.Fatalf("client follow after %d: %+v, %v; want nothing after, the run succeeded at %d", last+12, ev, err, last)
	}

	// A running run: one follower from its started event, one from far
	// beyond. The far one is attached (it gets keepalives) and gets none of
	// the run's events; both end when the run does.
	s := e.post(t, apitype.TurnRequest{Channel: "ch", Binding: "b-builtin", RunID: "run-hang", Text: "@agent [[fault:hang-turn]]"})
	defer s.hangUp()
	started := s.next()
	if started.Event != apitype.EventStarted {
		t.Fatalf("first event %+v", started)
	}
	far := e.openEvents(t, ctx, "run-hang", started.Seq+100)
	defer far.Body.Close()
	farLines := bufio.NewScanner(far.Body)
	if !farLines.Scan() {
		t.Fatalf("the far follower's stream ended before the run: %v", farLines.Err())
	}
	var first apitype.Event
	if err := json.Unmarshal(farLines.Bytes(), &first); err != nil || first.Event != apitype.EventKeepalive {
		t.Fatalf("the far follower's first line %q, want a keepalive", farLines.Bytes())
	}
	near := e.openEvents(t, ctx, "run-hang", started.Seq)
	defer near.Body.Close()
	if err := e.c.Cancel(ctx, "run-hang"); err != nil {
		t.Fatal(err)
	}
	for farLines.Scan() {
		var ev apitype.Event
		if err := json.Unmarshal(farLines.Bytes(), &ev); err != nil || ev.Event != apitype.EventKeepalive {
			t.Fatalf("the far follower got %q; want only keepalives", farLines.Bytes())
		}
	}
	if err := farLines.Err(); err != nil {
		t.Fatalf("the far follower's stream did not end with the run: %v", err)
	}
	var nearEvents []apitype.Event
	nearLines := bufio.NewScanner(near.Body)
	for nearLines.Scan() {
		var ev apitype.Event
		json.Unmarshal(nearLines.Bytes(), &ev)
		if ev.Event != apitype.EventKeepalive {
			nearEvents = append(nearEvents, ev)
		}
	}
	if len(nearEvents) != 1 || nearEvents[0].Event != apitype.EventError || nearEvents[0].Code != apitype.CodeCancelled || nearEvents[0].Seq != started.Seq+1 {
		t.Fatalf("the follower from seq %d got %s; want the one cancelled error after it", started.Seq, kinds(nearEvents))
	}
	_, err = e.c.Follow(ctx, "run-hang", started.Seq+100, nil)
	if !errors.As(err, &nothing) || nothing.Run.State != apitype.RunCancelled {
		t.Fatalf("client follow of the cancelled run from beyond its end: %v", err)
	}
}

// ?until=KIND ends a run's stream after its first event of that kind: a
// script waits with it for a permission request before it answers. The
// request is asked live (the stream waits for it), then replayed to a
// second follower, which ends at it too; a run that ends without such an
// event ends the stream with it, and a kind that is no run event's is
// refused.
func TestFollowUntilAnEvent(t *testing.T) {
	e := newEnv(t, withAsk(permission.Ask, time.Hour))
	// Each stream ends by itself: no deadline but the test's.
	lines := func(path string) []apitype.Event {
		t.Helper()
		status, body := e.rawBody(t, http.MethodGet, path, "")
		if status != http.StatusOK {
			t.Fatalf("GET %s: %d %s", path, status, body)
		}
		var evs []apitype.Event
		for _, l := range strings.Split(strings.TrimSpace(string(body)), "\n") {
			var ev apitype.Event
			if err := json.Unmarshal([]byte(l), &ev); err != nil {
				t.Fatalf("GET %s: line %q: %v", path, l, err)
			}
			evs = append(evs, ev)
		}
		return evs
	}
	status, body := e.rawBody(t, http.MethodPost, "/v1/turns?stream=false", `{"channel_id":"ch","binding_id":"b-ask","run_id":"run-until","text":"@agent [[permission:execute]] run the tests"}`)
	if status != http.StatusAccepted {
		t.Fatalf("detached turn: %d %s", status, body)
	}
	for range 2 {
		evs := lines("/v1/runs/run-until/events?until=permission_request")
		last := evs[len(evs)-1]
		if last.Event != apitype.EventPermissionRequest || last.Permission == nil || last.Permission.ID != "perm-1" {
			t.Fatalf("until=permission_request: %s, want the stream to end with the request perm-1", kinds(evs))
		}
		for _, ev := range evs[:len(evs)-1] {
			if ev.Event == apitype.EventPermissionRequest || ev.Event == apitype.EventDone {
				t.Fatalf("until=permission_request: %s", kinds(evs))
			}
		}
	}
	if status, body := e.rawBody(t, http.MethodPost, "/v1/runs/run-until/permissions/perm-1", `{"option_id":"allow"}`); status != http.StatusOK {
		t.Fatalf("answer: %d %s", status, body)
	}
	evs := lines("/v1/runs/run-until/events?until=budget")
	if evs[len(evs)-1].Event != apitype.EventDone || !strings.Contains(kinds(evs), "permission_request,permission_decision") {
		t.Fatalf("until=budget of a run with no budget event: %s, want the whole run to its done", kinds(evs))
	}
	if evs := lines("/v1/runs/run-until/events?until=started&after=1"); evs[len(evs)-1].Event != apitype.EventDone {
		t.Fatalf("until=started after the started event: %s, want the rest of the run", kinds(evs))
	}
	for _, bad := range []string{"keepalive", "nope"} {
		code, apiErr := e.raw(t, http.MethodGet, "/v1/runs/run-until/events?until="+bad, "")
		if code != http.StatusBadRequest || apiErr.Code != apitype.CodeBadRequest || !strings.Contains(apiErr.Message, "permission_request") {
			t.Fatalf("until=%s: %d %+v, want 400 bad_request listing the kinds", bad, code, apiErr)
		}
	}
}
