package daemon

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"

	"go.uber.org/zap"

	"github.com/residentd/residentd/apitype"
	"github.com/residentd/residentd/internal/config"
	"github.com/residentd/residentd/internal/run"
	"github.com/residentd/residentd/internal/session"
)

// A binding with bursts "coalesce" answers the mentions that queued behind
// its key's running turn in one turn: the run that gets the key next takes
// every run still waiting for it, lists each mention in its prompt, and
// lists them in its done; each taken run ends, once that turn has, with a
// pointer to it (answered_by).

// burst is a run of a coalescing binding waiting for its key.
type burst struct {
	r      *run.Run
	req    apitype.TurnRequest
	cancel context.CancelCauseFunc
}

// coalesced is the cancel cause of a run another run's turn took in.
type coalesced struct{ by *run.Run }

func (c *coalesced) Error() string { return "coalesced into run " + c.by.ID }

// joinBurst registers r as waiting for its busy key.
func (d *Daemon) joinBurst(k session.Key, bu *burst) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, o := range d.bursts[k] {
		if o.r == bu.r {
			return
		}
	}
	d.bursts[k] = append(d.bursts[k], bu)
}

// takeBurst removes r from its key's waiting runs and, when b coalesces,
// takes the others in: they stop waiting, and end when r's turn has.
func (d *Daemon) takeBurst(k session.Key, r *run.Run, b config.Binding) []*burst {
	d.mu.Lock()
	defer d.mu.Unlock()
	var taken, rest []*burst
	for _, o := range d.bursts[k] {
		switch {
		case o.r == r:
		case b.Bursts == config.BurstsCoalesce:
			taken = append(taken, o)
		default:
			rest = append(rest, o)
		}
	}
	if len(rest) == 0 {
		delete(d.bursts, k)
	} else {
		d.bursts[k] = rest
	}
	for _, o := range taken {
		o.cancel(&coalesced{by: r})
	}
	return taken
}

// steerTarget is the running turn of a steering binding's key, while its
// agent works on it.
type steerTarget struct {
	r *run.Run
	s steerer

	mu       sync.Mutex // guards taken and closed
	taken    []*burst   // the mentions steered into the turn
	closed   bool       // the prompt returned: no more steering
	inflight sync.WaitGroup
}

// steerer is a running session that takes text into its turn.
type steerer interface {
	Steer(ctx context.Context, text string) error
}

// steerable registers the running turn of r on its key for steering and
// returns the func that ends that and returns the mentions that joined it.
func (d *Daemon) steerable(r *run.Run, s steerer) func() []*burst {
	t := &steerTarget{r: r, s: s}
	d.mu.Lock()
	d.steering[r.Key] = t
	d.mu.Unlock()
	return func() []*burst {
		d.mu.Lock()
		if d.steering[r.Key] == t {
			delete(d.steering, r.Key)
		}
		d.mu.Unlock()
		t.mu.Lock()
		t.closed = true
		t.mu.Unlock()
		t.inflight.Wait()
		return t.taken
	}
}

// steer puts r's mention into its key's running turn, when there is one
// and its agent takes it, and returns that turn's run.
func (d *Daemon) steer(ctx context.Context, r *run.Run, req apitype.TurnRequest) (*run.Run, bool) {
	d.mu.Lock()
	t := d.steering[r.Key]
	d.mu.Unlock()
	if t == nil {
		return nil, false
	}
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		return nil, false
	}
	t.inflight.Add(1)
	t.mu.Unlock()
	defer t.inflight.Done()
	if err := t.s.Steer(ctx, d.mentionLine(req)); err != nil {
		// No turn running after all, or no steering: a turn of its own.
		d.log.Debug("steering refused; the mention queues", zap.String("run", r.ID), zap.Error(err))
		return nil, false
	}
	t.mu.Lock()
	t.taken = append(t.taken, &burst{r: r, req: req})
	t.mu.Unlock()
	return t.r, true
}

// mentionLine is one mention as a coalesced or steered prompt lists it:
// message id, author and text.
func (d *Daemon) mentionLine(q apitype.TurnRequest) string {
	author := "someone"
	if q.MessageID != "" {
		if m, ok, err := d.st.Message(q.Channel, q.MessageID); err == nil && ok {
			author = m.Author
		}
	}
	id := q.MessageID
	if id == "" {
		id = "-"
	}
	return fmt.Sprintf("- [%s] %s: %s", id, author, strings.ReplaceAll(q.Text, "\n", " "))
}

// coalescedText is the user text of a turn that answers several mentions:
// each with its message id, author and text, the turn's own first.
func (d *Daemon) coalescedText(req apitype.TurnRequest, taken []*burst) string {
	var sb strings.Builder
	sb.WriteString("Several mentions arrived while you were busy; they are answered together in this turn. Answer each of them, naming its message id:\n")
	line := func(q apitype.TurnRequest) { sb.WriteString(d.mentionLine(q) + "\n") }
	line(req)
	for _, o := range taken {
		line(o.req)
	}
	return sb.String()
}

// answers lists the mentions a turn answered: its own, then those taken in.
func answers(r *run.Run, taken []*burst) []apitype.Answered {
	if len(taken) == 0 {
		return nil
	}
	out := []apitype.Answered{{RunID: r.ID, MessageID: r.MessageID}}
	for _, o := range taken {
		out = append(out, apitype.Answered{RunID: o.r.ID, MessageID: o.r.MessageID})
	}
	return out
}

// awaitAnswer waits for the run that took r in to end and returns r's own
// last event: done (or that run's error) with a pointer to it.
func awaitAnswer(by *run.Run) (apitype.Event, error) {
	for {
		changed := by.Wait() // before the check: a change in between closes it
		ev, err, ok := by.Result()
		if ok {
			if err != nil {
				return apitype.Event{}, &answerFailed{by: by.ID, err: err}
			}
			return apitype.Event{Event: apitype.EventDone, AnsweredBy: by.ID, Shape: ev.Shape, StopReason: ev.StopReason, Watermark: apitype.WatermarkNone}, nil
		}
		<-changed
	}
}

// answerFailed is the error of a run whose mention another run's failed
// turn took in.
type answerFailed struct {
	by  string
	err error
}

func (e *answerFailed) Error() string {
	return fmt.Sprintf("coalesced into run %q, which failed: %v", e.by, e.err)
}
func (e *answerFailed) Unwrap() error { return e.err }

// coalescedBy returns the run that took in the run whose context is ctx.
func coalescedBy(ctx context.Context) (*run.Run, bool) {
	var c *coalesced
	if errors.As(context.Cause(ctx), &c) {
		return c.by, true
	}
	return nil, false
}
