package run

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/residentd/residentd/apitype"
	"github.com/residentd/residentd/internal/elicit"
)

var form = apitype.ElicitationRequest{Message: "which env?", Schema: json.RawMessage(`{"type":"object","properties":{"env":{"type":"string","enum":["a","b"]}},"required":["env"]}`)}

// pendingForm waits for r's first waiting elicitation request.
func pendingForm(t *testing.T, r *Run) apitype.ElicitationRequest {
	t.Helper()
	for {
		// The channel is taken before the look: a change between the two
		// closes it, so the wake-up is not lost.
		changed := r.Wait()
		if p := r.Snapshot().PendingElicitations; len(p) > 0 {
			return p[0]
		}
		<-changed
	}
}

// TestElicitAnswered: a form waits for a person; an answer that does not
// fit the form is refused and the form still waits; the first fitting
// answer wins and names who gave it; the request and the answer are
// events.
func TestElicitAnswered(t *testing.T) {
	_, r, _ := newRun(t, Limits{})
	done := make(chan apitype.ElicitationAnswer, 1)
	go func() { done <- r.Elicit(context.Background(), form, time.Hour) }()
	req := pendingForm(t, r)
	if err := r.AnswerElicitation(req.ID, apitype.ElicitationAnswer{Action: "accept", Content: map[string]any{"env": "c"}}); !errors.Is(err, elicit.ErrBadContent) {
		t.Fatalf("content outside the enum: %v", err)
	}
	if err := r.AnswerElicitation(req.ID, apitype.ElicitationAnswer{Action: "later"}); !errors.Is(err, ErrBadAction) {
		t.Fatalf("unknown action: %v", err)
	}
	if err := r.AnswerElicitation(req.ID, apitype.ElicitationAnswer{Action: "accept", Content: map[string]any{"env": "b"}, AnsweredBy: "u-ana"}); err != nil {
		t.Fatal(err)
	}
	if err := r.AnswerElicitation(req.ID, apitype.ElicitationAnswer{Action: "decline"}); !errors.Is(err, ErrAlreadyAnswered) {
		t.Fatalf("second answer: %v", err)
	}
	ans := <-done
	if ans.Action != "accept" || ans.Content["env"] != "b" || ans.DecidedBy != apitype.DecidedByPerson || ans.AnsweredBy != "u-ana" {
		t.Fatalf("answer %+v", ans)
	}
}

// TestElicitCappedWithPermissions: a run's waiting permission and
// elicitation requests share Limits.Pending; a form past it is cancelled at
// once (limit), as is one whose schema is outside the subset
// (unsupported); a cancel ends a waiting form.
func TestElicitCappedWithPermissions(t *testing.T) {
	_, r, _ := newRun(t, Limits{Pending: 1})
	ctx, cancel := context.WithCancel(context.Background())
	asked := make(chan string, 1)
	go func() { _, by := r.Ask(ctx, tool, options, time.Hour); asked <- by }()
	pendingRequest(t, r)
	if a := r.Elicit(context.Background(), form, time.Hour); a.Action != "cancel" || a.DecidedBy != apitype.DecidedByLimit {
		t.Fatalf("a form past the cap: %+v", a)
	}
	cancel()
	<-asked
	bad := apitype.ElicitationRequest{Message: "x", Schema: json.RawMessage(`{"properties":{"o":{"type":"object"}}}`)}
	if a := r.Elicit(context.Background(), bad, time.Hour); a.Action != "cancel" || a.DecidedBy != apitype.DecidedByUnsupported {
		t.Fatalf("a form outside the subset: %+v", a)
	}
	ctx2, cancel2 := context.WithCancel(context.Background())
	done := make(chan apitype.ElicitationAnswer, 1)
	go func() { done <- r.Elicit(ctx2, form, time.Hour) }()
	pendingForm(t, r)
	cancel2()
	if a := <-done; a.Action != "cancel" || a.DecidedBy != apitype.DecidedByCancel {
		t.Fatalf("a cancelled form: %+v", a)
	}
}
