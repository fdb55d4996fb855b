package api

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"testing"

	"github.com/residentd/residentd/apitype"
	"github.com/residentd/residentd/client"
	"github.com/residentd/residentd/internal/config"
	"github.com/residentd/residentd/internal/permission"
)

// asked runs one turn of the built-in agent and hands each request event
// (permission or elicitation) to answer, on a goroutine of its own, as a
// UI would; it returns the run's events.
func (e *env) asked(t *testing.T, req apitype.TurnRequest, answer func(ev apitype.Event)) []apitype.Event {
	t.Helper()
	var (
		mu   sync.Mutex
		evs  []apitype.Event
		wg   sync.WaitGroup
		kind = map[string]bool{apitype.EventPermissionRequest: true, apitype.EventElicitationRequest: true}
	)
	done, err := e.c.Turn(context.Background(), req, func(ev apitype.Event) {
		mu.Lock()
		evs = append(evs, ev)
		mu.Unlock()
		if kind[ev.Event] {
			wg.Go(func() { answer(ev) })
		}
	})
	wg.Wait()
	if err != nil {
		t.Fatalf("turn %s: %v", req.RunID, err)
	}
	mu.Lock()
	defer mu.Unlock()
	return append(evs, done)
}

// thoughtOf is the text of the agent's thoughts in evs that start with
// prefix.
func thoughtOf(evs []apitype.Event, prefix string) string {
	for _, ev := range evs {
		if ev.Update != nil && strings.HasPrefix(ev.Update.Text, prefix) {
			return ev.Update.Text
		}
	}
	return ""
}

func eventOf(evs []apitype.Event, kind string) *apitype.Event {
	for i := range evs {
		if evs[i].Event == kind {
			return &evs[i]
		}
	}
	return nil
}

// TestElicitationThroughTheSocket: the built-in agent's form reaches the
// run's stream with its schema; an answer that does not fit the form is
// refused 400 invalid_content and the request still waits; an accept
// that fits goes back to the agent, which reports it; a second answer is
// 409; a decline and a timeout reach the agent as decline and cancel.
func TestElicitationThroughTheSocket(t *testing.T) {
	e := newEnv(t, func(c *config.Config) { c.Bindings[0].PermissionTimeout = config.Duration(1 << 40) })
	ctx := context.Background()
	evs := e.asked(t, apitype.TurnRequest{Channel: "ch", Binding: "b-builtin", MessageID: "m1", RunID: "run-form", Text: "@agent [[elicit:deploy]]"}, func(ev apitype.Event) {
		req := ev.Elicitation
		var schema struct {
			Properties map[string]json.RawMessage `json:"properties"`
			Required   []string                   `json:"required"`
		}
		if err := json.Unmarshal(req.Schema, &schema); err != nil || len(schema.Properties) != 4 || len(schema.Required) != 2 || req.Message != "builtin asks: deploy" {
			t.Errorf("elicitation request %+v (%v)", req, err)
		}
		r, err := e.c.Run(ctx, "run-form")
		if err != nil || len(r.PendingElicitations) != 1 || r.PendingElicitations[0].ID != req.ID {
			t.Errorf("pending elicitations of the run: %+v, %v", r.PendingElicitations, err)
		}
		bad := apitype.ElicitationAnswer{Action: apitype.ElicitAccept, Content: map[string]any{"env": "dev", "confirm": true}}
		if err := e.c.AnswerElicitation(ctx, "run-form", req.ID, bad); !client.IsCode(err, apitype.CodeInvalidContent) || err.(*client.Error).Status != 400 {
			t.Errorf("content outside the enum: %v", err)
		}
		if err := e.c.AnswerElicitation(ctx, "run-form", req.ID, apitype.ElicitationAnswer{Action: "maybe"}); !client.IsCode(err, apitype.CodeBadRequest) {
			t.Errorf("unknown action: %v", err)
		}
		good := apitype.ElicitationAnswer{Action: apitype.ElicitAccept, Content: map[string]any{"env": "staging", "confirm": true, "replicas": 3}, AnsweredBy: "u-ana"}
		if err := e.c.AnswerElicitation(ctx, "run-form", req.ID, good); err != nil {
			t.Errorf("answer: %v", err)
		}
		if err := e.c.AnswerElicitation(ctx, "run-form", req.ID, apitype.ElicitationAnswer{Action: apitype.ElicitDecline}); !client.IsCode(err, apitype.CodeAlreadyAnswered) {
			t.Errorf("second answer: %v", err)
		}
	})
	if got := thoughtOf(evs, "elicit deploy"); got != `elicit deploy ok: accept confirm=true env="staging" replicas=3` {
		t.Errorf("the agent got %q", got)
	}
	ans := eventOf(evs, apitype.EventElicitationAnswer)
	if ans == nil || ans.Elicited.Action != apitype.ElicitAccept || ans.Elicited.DecidedBy != apitype.DecidedByPerson || ans.Elicited.AnsweredBy != "u-ana" {
		t.Errorf("elicitation_answer event %+v", ans)
	}

	// The run's log replays the request and its answer to a late reader.
	var replay []string
	if _, err := e.c.Follow(ctx, "run-form", 0, func(ev apitype.Event) { replay = append(replay, ev.Event) }); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(strings.Join(replay, " "), "elicitation_request elicitation_answer") {
		t.Errorf("replayed events %v", replay)
	}

	evs = e.asked(t, apitype.TurnRequest{Channel: "ch", Binding: "b-builtin", MessageID: "m2", RunID: "run-decline", Text: "@agent [[elicit:again]]"}, func(ev apitype.Event) {
		if err := e.c.AnswerElicitation(ctx, "run-decline", ev.Elicitation.ID, apitype.ElicitationAnswer{Action: apitype.ElicitDecline, Content: map[string]any{"env": "staging"}}); !client.IsCode(err, apitype.CodeBadRequest) {
			t.Errorf("decline with content: %v", err)
		}
		if err := e.c.AnswerElicitation(ctx, "run-decline", ev.Elicitation.ID, apitype.ElicitationAnswer{Action: apitype.ElicitDecline}); err != nil {
			t.Errorf("decline: %v", err)
		}
	})
	if got := thoughtOf(evs, "elicit again"); got != "elicit again ok: decline" {
		t.Errorf("the agent got %q", got)
	}
}

// TestElicitationTimesOut: a form nobody answers within the binding's
// permission_timeout is cancelled, decided by the timeout.
func TestElicitationTimesOut(t *testing.T) {
	e := newEnv(t, func(c *config.Config) { c.Bindings[0].PermissionTimeout = config.Duration(1) })
	evs := e.asked(t, apitype.TurnRequest{Channel: "ch", Binding: "b-builtin", MessageID: "m1", RunID: "run-late", Text: "@agent [[elicit:late]]"}, func(apitype.Event) {})
	if got := thoughtOf(evs, "elicit late"); got != "elicit late ok: cancel" {
		t.Errorf("the agent got %q", got)
	}
	ans := eventOf(evs, apitype.EventElicitationAnswer)
	if ans == nil || ans.Elicited.Action != apitype.ElicitCancel || ans.Elicited.DecidedBy != apitype.DecidedByTimeout {
		t.Errorf("elicitation_answer event %+v", ans)
	}
}

// TestApproversDecideWhoAnswers: with approvers "author" only the turn's
// author may answer a permission or an elicitation request; anyone else,
// or an answer naming nobody, gets 403 not_an_approver and the request
// still waits; the author's answer names them in the decision. With a
// list, only the listed ids may answer.
func TestApproversDecideWhoAnswers(t *testing.T) {
	e := newEnv(t, func(c *config.Config) {
		c.Bindings[0].Permission = permission.Ask
		c.Bindings[0].Approvers = config.Approvers{Mode: config.ApproversAuthor}
		c.Bindings[0].PermissionTimeout = config.Duration(1 << 40)
	})
	ctx := context.Background()
	refuse := func(err error, who string) {
		if !client.IsCode(err, apitype.CodeNotAnApprover) || err.(*client.Error).Status != 403 {
			t.Errorf("answer by %q: %v, want 403 not_an_approver", who, err)
		}
	}
	evs := e.asked(t, apitype.TurnRequest{Channel: "ch", Binding: "b-builtin", MessageID: "m1", RunID: "run-auth", Author: "u-ana", Text: "@agent [[permission:execute]] [[elicit:deploy]]"}, func(ev apitype.Event) {
		if p := ev.Permission; p != nil {
			refuse(e.c.AnswerAs(ctx, "run-auth", p.ID, "allow", "u-bo"), "u-bo")
			refuse(e.c.Answer(ctx, "run-auth", p.ID, "allow"), "")
			if err := e.c.AnswerAs(ctx, "run-auth", p.ID, "allow", "u-ana"); err != nil {
				t.Errorf("the author's answer: %v", err)
			}
			return
		}
		f := apitype.ElicitationAnswer{Action: apitype.ElicitAccept, Content: map[string]any{"env": "production", "confirm": false}, AnsweredBy: "u-bo"}
		refuse(e.c.AnswerElicitation(ctx, "run-auth", ev.Elicitation.ID, f), "u-bo")
		f.AnsweredBy = "u-ana"
		if err := e.c.AnswerElicitation(ctx, "run-auth", ev.Elicitation.ID, f); err != nil {
			t.Errorf("the author's answer: %v", err)
		}
	})
	if d := eventOf(evs, apitype.EventPermissionDecision); d == nil || d.Decision.AnsweredBy != "u-ana" || d.Decision.OptionID != "allow" {
		t.Errorf("permission_decision %+v", d)
	}
	if a := eventOf(evs, apitype.EventElicitationAnswer); a == nil || a.Elicited.AnsweredBy != "u-ana" {
		t.Errorf("elicitation_answer %+v", a)
	}
	if got := thoughtOf(evs, "elicit deploy"); got != `elicit deploy ok: accept confirm=false env="production"` {
		t.Errorf("the agent got %q", got)
	}
	r, err := e.c.Run(ctx, "run-auth")
	if err != nil || r.Author != "u-ana" {
		t.Errorf("run %+v, %v", r, err)
	}
}

// TestElicitationOff: a binding with elicitation off advertises no form;
// a form its agent sends anyway is cancelled at once, and no request
// reaches the run.
func TestElicitationOff(t *testing.T) {
	off := false
	e := newEnv(t, func(c *config.Config) {
		c.Bindings[0].Elicitation = &off
		c.Bindings[0].PermissionTimeout = config.Duration(1 << 40)
	})
	evs := e.asked(t, apitype.TurnRequest{Channel: "ch", Binding: "b-builtin", MessageID: "m1", RunID: "run-off", Text: "@agent [[elicit:deploy]]"}, func(ev apitype.Event) {
		t.Errorf("a request reached the run: %+v", ev)
	})
	if got := thoughtOf(evs, "elicit deploy"); got != "elicit deploy ok: cancel" {
		t.Errorf("the agent got %q", got)
	}
	if ev := eventOf(evs, apitype.EventElicitationRequest); ev != nil {
		t.Errorf("elicitation_request %+v", ev)
	}
}
