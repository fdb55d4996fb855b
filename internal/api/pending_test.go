package api

import (
	"context"
	"testing"
	"time"

	"github.com/residentd/residentd/apitype"
	"github.com/residentd/residentd/internal/config"
	"github.com/residentd/residentd/internal/permission"
)

// An agent that asks ten permissions at once, on a run that keeps at most
// four waiting: four are put to a person, six are rejected at once (a
// permission_decision decided by the limit each, no request event), the
// run lists no more than four pending, and the agent sees every answer.
func TestPendingPermissionsCapped(t *testing.T) {
	e := newEnv(t, withAsk(permission.Ask, time.Hour), func(c *config.Config) { c.Runs.PendingPermissions = 4 })
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	s := e.post(t, apitype.TurnRequest{Channel: "ch", Binding: "b-ask", RunID: "run-flood", Text: "@agent [[permission-flood:10]]"})
	defer s.hangUp()
	var asked []string
	limited := 0
	for len(asked) < 4 || limited < 6 {
		ev := s.next()
		switch ev.Event {
		case apitype.EventPermissionRequest:
			asked = append(asked, ev.Permission.ID)
		case apitype.EventPermissionDecision:
			d := ev.Decision
			if d.DecidedBy != apitype.DecidedByLimit || d.Kind != permission.RejectOnce || d.OptionID != "reject" || d.RequestID == "" {
				t.Fatalf("decision before any answer: %+v; want rejected by the limit", d)
			}
			limited++
		case apitype.EventDone, apitype.EventError:
			t.Fatalf("the run ended before its requests were answered: %+v", ev)
		}
		if len(asked) > 4 || limited > 6 {
			t.Fatalf("%d requests put to a person, %d rejected by the limit; want 4 and 6", len(asked), limited)
		}
	}
	r, err := e.c.Run(ctx, "run-flood")
	if err != nil || len(r.Pending) != 4 {
		t.Fatalf("run with the limit reached: %d pending (%v), want 4", len(r.Pending), err)
	}
	for _, id := range asked {
		if err := e.c.Answer(ctx, "run-flood", id, "allow"); err != nil {
			t.Fatalf("answer %s: %v", id, err)
		}
	}
	var thought string
	for _, ev := range s.until(apitype.EventDone) {
		if ev.Update != nil && ev.Update.Kind == apitype.UpdateThought {
			thought = ev.Update.Text
		}
		if ev.Event == apitype.EventPermissionRequest || ev.Decision != nil && ev.Decision.DecidedBy == apitype.DecidedByLimit {
			t.Fatalf("more requests after the answers: %+v", ev)
		}
	}
	if thought != "permission-flood 10 ok: allow=4 reject=6" {
		t.Fatalf("the agent's count of its answers: %q", thought)
	}
}
