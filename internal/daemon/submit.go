package daemon

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"go.opentelemetry.io/otel/trace"

	"github.com/residentd/residentd/apitype"
	"github.com/residentd/residentd/internal/config"
	"github.com/residentd/residentd/internal/lease"
	"github.com/residentd/residentd/internal/run"
	"github.com/residentd/residentd/internal/session"
	"github.com/residentd/residentd/internal/tracing"
)

// validate checks a mention before anything else looks at it.
func validate(r apitype.TurnRequest) error {
	switch {
	case r.Channel == "":
		return fmt.Errorf("%w: channel_id is required", ErrBadRequest)
	case r.Binding == "":
		return fmt.Errorf("%w: binding_id is required", ErrBadRequest)
	case r.Text == "":
		return fmt.Errorf("%w: text is required (the mention's message text)", ErrBadRequest)
	case strings.TrimSpace(r.Text) == "":
		return fmt.Errorf("%w: text is blank; send the mention's message text", ErrBadRequest)
	case r.ThreadRoot != nil && *r.ThreadRoot == "":
		return fmt.Errorf("%w: thread_root_id must be null or a message id, not empty", ErrBadRequest)
	case r.MaxRecipients < 0:
		return fmt.Errorf("%w: max_recipients must not be negative", ErrBadRequest)
	}
	return nil
}

// keyOf is the key a mention runs on: its channel's, or with a binding of
// scope thread and a mention inside a thread, the thread's own.
func (d *Daemon) keyOf(req apitype.TurnRequest) session.Key {
	k := session.Key{Channel: req.Channel, Binding: req.Binding}
	if b, ok := d.conf().Binding(req.Binding); ok && b.Scope == config.ScopeThread && req.ThreadRoot != nil {
		k.Thread = *req.ThreadRoot
	}
	return k
}

// Submit starts a run for a mention and returns it at once; the run goes
// on, in a goroutine the daemon owns, until it ends, whoever follows it.
// Only Cancel, the binding's turn time limit, start fresh and shutdown end
// it early. An error means no run was created.
func (d *Daemon) Submit(req apitype.TurnRequest) (*run.Run, error) {
	if err := validate(req); err != nil {
		return nil, err
	}
	b, ok := d.conf().Binding(req.Binding)
	if !ok {
		return nil, fmt.Errorf("%w %q: configured bindings are %v", ErrUnknownBinding, req.Binding, d.conf().BindingIDs())
	}
	if req.RunID == "" {
		req.RunID = newRunID()
	} else if r, ok, err := d.known(req); err != nil || ok {
		// The same mention sent again (a blind retry) is the run it started.
		return r, err
	}
	if err := d.checkBudget(b.ID, req.Channel); err != nil {
		d.m.ObserveTurn(lease.Unstarted, lease.OutcomeRefused, 0)
		return nil, err
	}
	if err := d.checkThread(req); err != nil {
		return nil, err
	}
	t, err := d.newTurn(req, b, func(tr run.Trace) (*run.Run, error) {
		return d.runs.NewFor(req.RunID, d.keyOf(req), req.MessageID, fingerprint(req), tr)
	})
	if errors.Is(err, run.ErrInUse) {
		// Submitted twice at once: the second gets the first's run.
		if r, ok, kerr := d.known(req); kerr != nil || ok {
			return r, kerr
		}
	}
	if err != nil {
		return nil, err
	}
	if err := t.accept(); err != nil {
		// Whoever found the run meanwhile (a second submit of its id, a
		// follower) sees it end rather than wait for ever.
		t.abandon(err)
		return nil, err
	}
	crashAt("accepted")
	go t.run()
	return t.r, nil
}

// checkThread refuses a mention in a thread the channel does not know.
func (d *Daemon) checkThread(req apitype.TurnRequest) error {
	if req.ThreadRoot == nil {
		return nil
	}
	known, err := d.st.ThreadKnown(req.Channel, *req.ThreadRoot)
	if err != nil {
		return err
	}
	if !known {
		return fmt.Errorf("%w %q in channel %q: push the thread's root message (POST /v1/messages) before mentioning an agent in it", ErrUnknownThread, *req.ThreadRoot, req.Channel)
	}
	return nil
}

// newTurn makes the turn of req on binding b for the run open gives it
// (new, or restored from the state file): every run is a trace, its root
// span continuing the client's. The turn is among the daemon's live ones
// and counted in its wait group until its goroutine ends (or abandon).
func (d *Daemon) newTurn(req apitype.TurnRequest, b config.Binding, open func(run.Trace) (*run.Run, error)) (*turn, error) {
	tp, ts := req.Trace()
	tctx, span := tracing.Root(d.tracer, "run", tp, ts)
	traceID, spanID := tracing.IDs(span)
	ctx, cancel := context.WithCancelCause(tctx)
	d.mu.Lock()
	defer d.mu.Unlock()
	var r *run.Run
	err := ErrShuttingDown
	if !d.closing {
		r, err = open(run.Trace{TraceID: traceID, SpanID: spanID})
	}
	if err != nil {
		cancel(nil)
		endSpan(span, err)
		return nil, err
	}
	r.SetAuthor(req.Author)
	t := &turn{d: d, r: r, b: b, req: req, ctx: ctx, cancel: cancel, lane: d.laneLocked(r.Key)}
	d.live[r.ID] = t
	d.wg.Add(1)
	return t, nil
}

// abandon ends a turn whose run could not be recorded as accepted: its run
// is forgotten, as if it had never been submitted.
func (t *turn) abandon(err error) {
	d := t.d
	d.forget(t.r.ID)
	t.r.Finish(errorEvent(err, d.now()), err)
	d.runs.Drop(t.r.ID)
	d.wg.Done()
	t.cancel(nil)
	endSpan(trace.SpanFromContext(t.ctx), err)
}

// laneLocked is key k's lane; d.mu is held.
func (d *Daemon) laneLocked(k session.Key) *lane {
	l := d.lanes[k]
	if l == nil {
		l = newLane(k, d.now, d.pool)
		d.lanes[k] = l
	}
	return l
}

// forget takes run id off the live turns: it can no longer be cancelled.
func (d *Daemon) forget(id string) {
	d.mu.Lock()
	delete(d.live, id)
	d.mu.Unlock()
}

// Turn answers one mention and waits for it: Submit, then every event of
// the run to emit (the started event and each update or permission event),
// and the done event or the error once the run has ended and its process
// is idle again. Ending ctx cancels the run; in-process callers (the sim,
// tests) use it, the API follows runs without tying them to a connection.
func (d *Daemon) Turn(ctx context.Context, req apitype.TurnRequest, emit func(apitype.Event)) (apitype.Event, error) {
	r, err := d.Submit(req)
	if err != nil {
		return apitype.Event{}, err
	}
	stop := context.AfterFunc(ctx, func() { d.cancelRun(r.ID, context.Cause(ctx)) })
	defer stop()
	var seq int64
	for {
		b := r.Read(seq, true)
		for _, l := range b.Lines {
			ev, err := decodeEvent(l)
			if err != nil {
				return apitype.Event{}, err
			}
			if ev.Event != apitype.EventDone && ev.Event != apitype.EventError && emit != nil {
				emit(ev)
			}
		}
		seq = b.Last
		if b.Ended || b.Gone {
			break
		}
		<-b.Changed
	}
	done, err, _ := r.Result()
	if err != nil {
		return apitype.Event{}, err
	}
	return done, nil
}

// Cancel cancels run runID. A run that has ended (its result is out, as
// GET /v1/runs/{run} shows it) answers ErrRunEnded at once.
func (d *Daemon) Cancel(runID string) error {
	r, ok := d.runs.Get(runID)
	if !ok {
		return fmt.Errorf("%w %q: it never started, or it ended and was let go (the settings runs.retention and runs.ended bound how long and how many ended runs are kept)", ErrUnknownRun, runID)
	}
	if _, _, ended := r.Result(); !ended && d.cancelRun(runID, errCancelled) {
		return nil
	}
	return fmt.Errorf("%w: %q; there is nothing to cancel", ErrRunEnded, runID)
}

// cancelRun cancels live run runID with cause and reports whether it was
// live.
func (d *Daemon) cancelRun(runID string, cause error) bool {
	d.mu.Lock()
	t, ok := d.live[runID]
	d.mu.Unlock()
	if ok {
		t.cancel(cause)
	}
	return ok
}

// Run returns run runID.
func (d *Daemon) Run(runID string) (*run.Run, error) {
	r, ok := d.runs.Get(runID)
	if !ok {
		return nil, fmt.Errorf("%w %q: it never started, or it ended and was let go (the settings runs.retention and runs.ended bound how long and how many ended runs are kept)", ErrUnknownRun, runID)
	}
	return r, nil
}

// RunFeed announces every run's start and end.
func (d *Daemon) RunFeed() *run.Feed { return d.runs.Feed() }

// Runs lists the queued, running and recently ended runs, oldest first.
func (d *Daemon) Runs() []apitype.Run { return d.runs.List() }

// Answer answers permission request requestID of run runID with optionID.
func (d *Daemon) Answer(runID, requestID, optionID string) error {
	return d.AnswerAs(runID, requestID, optionID, "")
}

// AnswerAs is Answer by person by (the chat's user id; "" names nobody),
// who must be one of the binding's approvers.
func (d *Daemon) AnswerAs(runID, requestID, optionID, by string) error {
	r, err := d.approver(runID, by)
	if err != nil {
		return err
	}
	return r.AnswerBy(requestID, optionID, by)
}
