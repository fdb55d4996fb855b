package api

import (
	"context"
	"net"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/residentd/residentd/apitype"
	"github.com/residentd/residentd/client"
)

// A lean stream (?lean=true, what the Go client asks for) carries the
// reply once: in its chunks, which have no raw copy of themselves; the done
// line leaves the text out. The client joins the chunks, a follower that
// missed some reads the run's result, and the result keeps the whole text.
// A client that does not ask reads the stream as /v1 always sent it.
func TestStreamCarriesTheReplyOnce(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	req := apitype.TurnRequest{Channel: "ch", Binding: "b-builtin", Text: "@agent hello"}
	s := e.postTo(t, "/v1/turns?lean=true", req)
	evs := s.until(apitype.EventDone)
	s.hangUp()
	var chunks strings.Builder
	for _, ev := range evs {
		if ev.Update == nil {
			continue
		}
		if ev.Update.Kind == apitype.UpdateMessage {
			chunks.WriteString(ev.Update.Text)
		}
		if ev.Update.Kind == apitype.UpdateMessage && len(ev.Update.Raw) > 0 {
			t.Fatalf("a text chunk carries a raw copy of itself: %s", ev.Update.Raw)
		}
	}
	done := evs[len(evs)-1]
	if chunks.Len() == 0 || done.Text != "" {
		t.Fatalf("chunks %q, done text %q: want the reply in the chunks only", chunks.String(), done.Text)
	}
	run, err := e.c.Run(ctx, done.RunID)
	if err != nil || run.Result == nil || run.Result.Text != chunks.String() {
		t.Fatalf("run result %+v (err %v), want the text %q", run.Result, err, chunks.String())
	}

	// Without lean: every chunk with its raw form, done with the text.
	s = e.post(t, req)
	evs = s.until(apitype.EventDone)
	s.hangUp()
	chunks.Reset()
	for _, ev := range evs {
		if ev.Update != nil && ev.Update.Kind == apitype.UpdateMessage {
			chunks.WriteString(ev.Update.Text)
			if !strings.Contains(string(ev.Update.Raw), `"sessionUpdate":"agent_message_chunk"`) {
				t.Fatalf("a chunk of the whole stream without its raw form: %+v", ev.Update)
			}
		}
	}
	if done := evs[len(evs)-1]; done.Text == "" || done.Text != chunks.String() {
		t.Fatalf("whole stream: done text %q, chunks %q", done.Text, chunks.String())
	}

	ev, err := e.c.Turn(ctx, req, nil)
	if err != nil || ev.Text == "" || !strings.Contains(ev.Text, "builtin") {
		t.Fatalf("client turn: text %q, err %v", ev.Text, err)
	}
	// A follower from seq 2 has not seen every chunk of the stream it joins
	// only when there are some before it; the reply is whole either way.
	followed, err := e.c.Follow(ctx, ev.RunID, 3, nil)
	if err != nil || followed.Text != ev.Text {
		t.Fatalf("follow after 3: text %q (err %v), want %q", followed.Text, err, ev.Text)
	}

}

// A started event that nothing follows (the agent is thinking) still
// reaches the client: it waits for the first output only briefly.
func TestStartedAloneIsFlushed(t *testing.T) {
	e := newEnv(t)
	s := e.post(t, apitype.TurnRequest{Channel: "ch", Binding: "b-builtin", RunID: "run-hang", Text: "@agent [[fault:hang-turn]]"})
	if ev := s.next(); ev.Event != apitype.EventStarted {
		t.Fatalf("first event %+v, want started", ev)
	}
	if err := e.c.Cancel(context.Background(), "run-hang"); err != nil {
		t.Fatal(err)
	}
	s.until(apitype.EventError)
	s.hangUp()
}

// The client reads every response to its end, so turns, listings and
// follows one after another share one connection.
func TestClientReusesItsConnection(t *testing.T) {
	e := newEnv(t)
	var dials atomic.Int32
	c := &client.Client{Dial: func(ctx context.Context) (net.Conn, error) {
		dials.Add(1)
		var d net.Dialer
		return d.DialContext(ctx, "unix", e.sock)
	}}
	defer c.Close()
	ctx := context.Background()
	for i := range 20 {
		ev, err := c.Turn(ctx, apitype.TurnRequest{Channel: "ch", Binding: "b-builtin", Text: "@agent again"}, nil)
		if err != nil {
			t.Fatalf("turn %d: %v", i, err)
		}
		if _, err := c.Follow(ctx, ev.RunID, 0, nil); err != nil {
			t.Fatalf("follow %d: %v", i, err)
		}
		if _, err := c.Runs(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if n := dials.Load(); n != 1 {
		t.Fatalf("60 requests one after another opened %d connections, want 1", n)
	}
}
