// Elicitation requests: an agent asks a person to fill in a form. They
// wait, time out, are capped and replayed exactly as permission requests
// are (one Limits.Pending for both), and an answer is checked against the
// form before it is taken.

package run

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"time"

	"github.com/residentd/residentd/apitype"
	"github.com/residentd/residentd/internal/elicit"
)

// ErrBadAction: an elicitation answer's action is not accept, decline or
// cancel, or content came with another action than accept.
var ErrBadAction = errors.New("not an elicitation action")

// elicitWait is an elicitation request waiting for a person.
type elicitWait struct {
	req    apitype.ElicitationRequest
	schema elicit.Schema
	answer chan apitype.ElicitationAnswer // buffered: the person's answer
	done   bool                           // answered, timed out or cancelled
}

// Elicit puts a form to whoever follows the run and waits for the answer,
// at most timeout (then it is cancelled, decided by the timeout). A form
// outside the subset elicit.Parse reads is cancelled at once (decided by
// DecidedByUnsupported), as is one beyond Limits.Pending waiting requests
// (DecidedByLimit); only their answer is an event. The request (its ID is
// set here) and its answer are events of the run.
func (r *Run) Elicit(ctx context.Context, req apitype.ElicitationRequest, timeout time.Duration) apitype.ElicitationAnswer {
	schema, serr := elicit.Parse(req.Schema)
	r.mu.Lock()
	if r.result != nil {
		r.mu.Unlock()
		return apitype.ElicitationAnswer{Action: apitype.ElicitCancel, DecidedBy: apitype.DecidedByCancel}
	}
	if r.pending == nil {
		r.pending, r.answered = map[string]*ask{}, map[string]bool{}
	}
	if r.elicits == nil {
		r.elicits = map[string]*elicitWait{}
	}
	r.nextAsk++
	id := "elicit-" + strconv.Itoa(r.nextAsk)
	if by := refused(serr, len(r.pending)+len(r.elicits) >= r.limits.Pending); by != "" {
		r.answered[id] = true
		a := apitype.ElicitationAnswer{RequestID: id, Action: apitype.ElicitCancel, DecidedBy: by}
		r.appendLocked(apitype.Event{Event: apitype.EventElicitationAnswer, Elicited: &a})
		r.mu.Unlock()
		return a
	}
	req.ID, req.ExpiresAt = id, r.now().Add(timeout)
	w := &elicitWait{req: req, schema: schema, answer: make(chan apitype.ElicitationAnswer, 1)}
	r.elicits[id] = w
	r.appendLocked(apitype.Event{Event: apitype.EventElicitationRequest, Elicitation: &req})
	r.mu.Unlock()

	t := time.NewTimer(timeout)
	defer t.Stop()
	ans := apitype.ElicitationAnswer{Action: apitype.ElicitCancel}
	select {
	case ans = <-w.answer:
		ans.DecidedBy = apitype.DecidedByPerson
	case <-t.C:
		ans.DecidedBy = apitype.DecidedByTimeout
	case <-ctx.Done():
		ans.DecidedBy = apitype.DecidedByCancel
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if ans.DecidedBy != apitype.DecidedByPerson && w.done && len(w.answer) > 0 {
		// An answer got in first; it was accepted, so it stands.
		ans = <-w.answer
		ans.DecidedBy = apitype.DecidedByPerson
	}
	w.done = true
	delete(r.elicits, id)
	r.answered[id] = true
	ans.RequestID = id
	if r.result == nil {
		logged := ans
		r.appendLocked(apitype.Event{Event: apitype.EventElicitationAnswer, Elicited: &logged})
	}
	return ans
}

// refused says who cancels a form at once: the schema residentd cannot
// check, or the pending cap; "" puts it to a person.
func refused(schemaErr error, full bool) string {
	switch {
	case schemaErr != nil:
		return apitype.DecidedByUnsupported
	case full:
		return apitype.DecidedByLimit
	}
	return ""
}

// AnswerElicitation answers elicitation request requestID. An accept's
// content must fit the requested schema (elicit.ErrBadContent otherwise,
// and the request still waits); decline and cancel carry none. The first
// answer wins; a later one gets ErrAlreadyAnswered.
func (r *Run) AnswerElicitation(requestID string, ans apitype.ElicitationAnswer) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	w := r.elicits[requestID]
	switch {
	case w == nil && r.answered[requestID]:
		return fmt.Errorf("%w: %q of run %q", ErrAlreadyAnswered, requestID, r.ID)
	case w == nil:
		return fmt.Errorf("%w %q on run %q", ErrUnknownRequest, requestID, r.ID)
	case w.done:
		return fmt.Errorf("%w: %q of run %q", ErrAlreadyAnswered, requestID, r.ID)
	}
	switch ans.Action {
	case apitype.ElicitAccept:
		content := ans.Content
		if content == nil {
			content = map[string]any{}
		}
		if err := w.schema.Check(content); err != nil {
			return fmt.Errorf("elicitation %q of run %q: %w", requestID, r.ID, err)
		}
		ans.Content = content
	case apitype.ElicitDecline, apitype.ElicitCancel:
		if len(ans.Content) > 0 {
			return fmt.Errorf("elicitation %q of run %q: %w: content goes with accept only", requestID, r.ID, ErrBadAction)
		}
	default:
		return fmt.Errorf("elicitation %q of run %q: %w: %q (use accept, decline or cancel)", requestID, r.ID, ErrBadAction, ans.Action)
	}
	w.done = true
	w.answer <- apitype.ElicitationAnswer{Action: ans.Action, Content: ans.Content, AnsweredBy: ans.AnsweredBy}
	return nil
}

// pendingElicitationsLocked lists the forms waiting, by id.
func (r *Run) pendingElicitationsLocked() []apitype.ElicitationRequest {
	var out []apitype.ElicitationRequest
	for _, w := range r.elicits {
		if !w.done {
			out = append(out, w.req)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

// SetAuthor records the mention's author (the turn request's author).
func (r *Run) SetAuthor(author string) {
	r.mu.Lock()
	r.author = author
	r.mu.Unlock()
}

// Author is the mention's author, as SetAuthor recorded it.
func (r *Run) Author() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.author
}
