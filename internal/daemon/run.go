package daemon

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	sdk "github.com/coder/acp-go-sdk"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/zap"

	"github.com/residentd/residentd/apitype"
	"github.com/residentd/residentd/internal/acp"
	"github.com/residentd/residentd/internal/config"
	"github.com/residentd/residentd/internal/lease"
	"github.com/residentd/residentd/internal/metrics"
	"github.com/residentd/residentd/internal/pool"
	"github.com/residentd/residentd/internal/resident"
	"github.com/residentd/residentd/internal/run"
	"github.com/residentd/residentd/internal/session"
	"github.com/residentd/residentd/internal/store"
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
	if req.ThreadRoot != nil {
		known, err := d.st.ThreadKnown(req.Channel, *req.ThreadRoot)
		if err != nil {
			return nil, err
		}
		if !known {
			return nil, fmt.Errorf("%w %q in channel %q: push the thread's root message (POST /v1/messages) before mentioning an agent in it", ErrUnknownThread, *req.ThreadRoot, req.Channel)
		}
	}
	key := d.keyOf(req)
	// Every run is a trace: its root span, the client's trace continued.
	tp, ts := req.Trace()
	tctx, span := tracing.Root(d.tracer, "run", tp, ts)
	traceID, spanID := tracing.IDs(span)
	ctx, cancel := context.WithCancelCause(tctx)
	d.mu.Lock()
	if d.closing {
		d.mu.Unlock()
		cancel(nil)
		endSpan(span, ErrShuttingDown)
		return nil, ErrShuttingDown
	}
	r, err := d.runs.NewFor(req.RunID, key, req.MessageID, fingerprint(req), run.Trace{TraceID: traceID, SpanID: spanID})
	if err != nil {
		d.mu.Unlock()
		cancel(nil)
		endSpan(span, err)
		if errors.Is(err, run.ErrInUse) {
			// Submitted twice at once: the second gets the first's run.
			if r, ok, kerr := d.known(req); kerr != nil || ok {
				return r, kerr
			}
		}
		return nil, err
	}
	d.cancels[req.RunID] = cancel
	d.turns.Add(1)
	d.mu.Unlock()
	// Accepted once recorded: a restart runs it. A run that starts at once
	// is recorded as started too (one write for both): a restart before
	// its prompt ends it interrupted, as it was in flight.
	reqJSON, err := json.Marshal(req)
	c := &record{d: d, rec: store.RunRecord{ID: r.ID, Request: reqJSON, Created: r.Created}}
	if d.pool.Free(key) {
		c.rec.Attempt, c.rec.Running, c.early = 1, true, true
	}
	if err == nil {
		err = d.st.PutRun(c.rec)
	}
	if err != nil {
		err = fmt.Errorf("record run %q: %w", req.RunID, err)
		d.mu.Lock()
		delete(d.cancels, req.RunID)
		d.mu.Unlock()
		// Whoever found the run meanwhile (a second submit of its id, a
		// follower) sees it end rather than wait for ever.
		r.Finish(apitype.Event{Event: apitype.EventError, Code: Code(err), Message: err.Error(), At: d.now()}, err)
		d.runs.Drop(r.ID)
		d.turns.Done()
		cancel(nil)
		endSpan(span, err)
		return nil, err
	}
	crashAt("accepted")
	d.goRun(ctx, cancel, r, b, req, c)
	return r, nil
}

// goRun executes r in a goroutine the daemon owns (counted in d.turns by
// the caller) and records its end.
func (d *Daemon) goRun(ctx context.Context, cancel context.CancelCauseFunc, r *run.Run, b config.Binding, req apitype.TurnRequest, c *record) {
	c.cancel = cancel
	go func() {
		defer d.turns.Done()
		defer cancel(nil)
		done, err := d.execute(ctx, r, b, req, c)
		// No longer cancellable before the last event is out: a client that
		// saw done and cancels gets run_ended.
		d.mu.Lock()
		delete(d.cancels, r.ID)
		d.mu.Unlock()
		// Recorded, and the run's span ended, before a follower can see
		// the end.
		final := c.finish(r, done, err)
		endSpan(trace.SpanFromContext(ctx), err)
		r.Finish(final, err)
	}()
}

// endSpan ends span, failed with err's code when err is set.
func endSpan(span trace.Span, err error) {
	if err != nil && span.IsRecording() {
		span.SetAttributes(attribute.String("residentd.error_code", Code(err)))
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
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

// Cancel cancels run runID.
func (d *Daemon) Cancel(runID string) error {
	if d.cancelRun(runID, errCancelled) {
		return nil
	}
	if _, ok := d.runs.Get(runID); ok {
		return fmt.Errorf("%w: %q; there is nothing to cancel", ErrRunEnded, runID)
	}
	return fmt.Errorf("%w %q: it never started, or ended longer ago than the run retention", ErrUnknownRun, runID)
}

// cancelRun cancels run runID with cause and reports whether it was running.
func (d *Daemon) cancelRun(runID string, cause error) bool {
	if runID == "" {
		return false
	}
	d.mu.Lock()
	cancel, ok := d.cancels[runID]
	d.mu.Unlock()
	if ok {
		cancel(cause)
	}
	return ok
}

// Run returns run runID.
func (d *Daemon) Run(runID string) (*run.Run, error) {
	r, ok := d.runs.Get(runID)
	if !ok {
		return nil, fmt.Errorf("%w %q: it never started, or ended longer ago than the run retention", ErrUnknownRun, runID)
	}
	return r, nil
}

// Feed announces every run's start and end.
func (d *Daemon) RunFeed() *run.Feed { return d.runs.Feed() }

// Runs lists the queued, running and recently ended runs, oldest first.
func (d *Daemon) Runs() []apitype.Run { return d.runs.List() }

// Answer answers permission request requestID of run runID with optionID.
func (d *Daemon) Answer(runID, requestID, optionID string) error {
	r, err := d.Run(runID)
	if err != nil {
		return err
	}
	return r.Answer(requestID, optionID)
}

// execute runs the turn for r: the key, a slot, its process, the prompt.
func (d *Daemon) execute(ctx context.Context, r *run.Run, b config.Binding, req apitype.TurnRequest, c *record) (apitype.Event, error) {
	log := d.log.With(zap.Stringer("key", r.Key), zap.String("run", r.ID))
	span := trace.SpanFromContext(ctx)
	if span.IsRecording() {
		log = log.With(tracing.LogFields(span)...)
		span.SetAttributes(attribute.String("residentd.run", r.ID), attribute.String("residentd.channel", r.Key.Channel),
			attribute.String("residentd.binding", r.Key.Binding), attribute.String("residentd.message", r.MessageID),
			attribute.Int("residentd.attempt", r.Attempt()+1))
	}
	start := d.now()
	qstart := time.Now() // the span's clock, not the daemon's (tests swap that)
	if b.Bursts == config.BurstsSteer {
		if by, ok := d.steer(ctx, r, req); ok {
			done, err := awaitAnswer(by)
			d.m.ObserveTurn(lease.Unstarted, Outcome(err), d.now().Sub(start))
			return done, err
		}
	}
	// A restore tells the waiting run which way it reopens the session.
	actx := resident.WithRestoreNote(ctx, func(method string) {
		r.Emit(apitype.Event{Event: apitype.EventRestoring, Method: method})
	})
	// The turn keeps the binding it was accepted with across a reload: a
	// process it spawns starts that binding, and a live process started
	// with settings it does not have is replaced.
	bp := &b
	actx = resident.WithBinding(actx, bp)
	co, err := d.pool.Acquire(actx, r.Key, pool.AcquireOptions{Owner: r.ID, Reuse: func(s pool.Session) bool {
		return d.keeper.Reuse(s.(*resident.Process), bp)
	}, OnWait: func(w pool.Wait) {
		reason := apitype.QueueKeyBusy
		if w.Slot {
			reason = apitype.QueueNoSlot
		} else if b.Bursts == config.BurstsCoalesce {
			d.joinBurst(r.Key, &burst{r: r, req: req, cancel: c.cancel})
		}
		r.Emit(apitype.Event{Event: apitype.EventQueued, Reason: reason, Position: w.Position})
	}, OnStart: r.Starting})
	if by, ok := coalescedBy(ctx); ok && err != nil {
		done, err := awaitAnswer(by)
		d.m.ObserveTurn(lease.Unstarted, Outcome(err), d.now().Sub(start))
		return done, err
	}
	if err != nil {
		d.takeBurst(r.Key, r, config.Binding{})
		if errors.Is(err, pool.ErrClosed) {
			err = ErrShuttingDown
		}
		err = d.ctxErr(ctx, err)
		// Every turn that passed validation is counted once, failed starts too.
		d.m.ObserveTurn(lease.Unstarted, Outcome(err), d.now().Sub(start))
		if !errors.Is(err, ErrShuttingDown) {
			log.Info("turn failed before it started", zap.String("outcome", string(Outcome(err))), zap.Error(err))
		}
		// It holds no key: it ends now, as it always did, and its record
		// follows (a restart in between runs it, never started, again).
		ev := apitype.Event{Event: apitype.EventError, Code: Code(err), Message: err.Error(), At: d.now()}
		r.Finish(ev, err)
		c.finish(r, ev, err)
		return apitype.Event{}, err
	}
	d.m.ObserveQueueWait(co.Waited)
	if span.IsRecording() {
		d.queueSpan(ctx, qstart, co.Waited)
	}
	c.taken = d.takeBurst(r.Key, r, b)
	keep := b.Resident || b.SavedSession != ""
	prep, err := d.prepare(ctx, r, b, req, co, start, log)
	if err != nil {
		// The agent never got this turn. A session that has not had its
		// first turn (cold, restored) goes with its process: kept, its next
		// turn would be warm without the framing or the replay it never
		// got. An agent that failed or did not answer an option goes too.
		if co.Lease.Shape != lease.Warm || !errors.Is(err, ErrInvalidOption) && !errors.Is(err, ErrBudgetExceeded) {
			keep = false
		}
		co.Lease.Discard()
		c.finish(r, apitype.Event{}, err)
		d.pool.Release(co, keep)
		return apitype.Event{}, err
	}
	gap, hasGap := d.idleGap(co.Key, start)
	done, err := d.answer(ctx, r, b, req, co, prep, start, gap, hasGap, c, log)
	d.turnEnded(co.Key)
	if err != nil && co.Session.TakeUnsaved() {
		// A new session's id, saved with the run's end so a later process
		// can still restore the session the agent keeps.
		c.native = &unsaved{key: co.Key, native: co.Lease.Native, proc: co.Session}
	}
	// Every exit path that did not commit discards: a failed run may never
	// have shown the agent anything. Discard after Commit is a no-op.
	for n := co.Lease.Discard(); n > 0; n-- {
		d.m.Watermark(false)
	}
	// Recorded while the key is still held, so the next run on it starts
	// after this one has its end.
	c.finish(r, done, err)
	d.pool.Release(co, keep)
	return done, err
}

// queueSpan records the run's wait for its key and a slot: from t0, as
// long as the pool says it waited (the spawn after it is its own span).
func (d *Daemon) queueSpan(ctx context.Context, t0 time.Time, waited time.Duration) {
	_, s := trace.SpanFromContext(ctx).TracerProvider().Tracer(tracing.Scope).Start(ctx, "queue wait", trace.WithTimestamp(t0))
	s.End(trace.WithTimestamp(t0.Add(waited)))
}

// prepare readies the checked-out session for the turn before it is
// announced as started: a turn that waited while its budget ran out is
// refused, and the key's session options are brought to what it wants
// (bounded by the turn's time limit).
func (d *Daemon) prepare(ctx context.Context, r *run.Run, b config.Binding, req apitype.TurnRequest, co *pool.Checkout[*resident.Process], start time.Time, log *zap.Logger) (resident.Prepared, error) {
	shape := co.Lease.Shape.String()
	if err := d.checkBudget(b.ID, req.Channel); err != nil {
		d.m.ObserveTurn(shape, lease.OutcomeRefused, d.now().Sub(start))
		return resident.Prepared{}, err
	}
	prep, err := d.keeper.Prepare(ctx, time.Duration(b.TurnTimeout), co.Key, b, co.Session, log)
	if err != nil {
		err = d.ctxErr(ctx, err)
		d.m.ObserveTurn(shape, Outcome(err), d.now().Sub(start))
		log.Info("turn failed: session options", zap.String("shape", shape), zap.Error(err))
		return prep, fmt.Errorf("turn %q for binding %q in channel %q: %w", r.ID, b.ID, req.Channel, err)
	}
	return prep, nil
}

// answer runs the turn on its checked-out process: compose, prompt, and on
// success store the exchange and commit the watermarks.
func (d *Daemon) answer(ctx context.Context, r *run.Run, b config.Binding, req apitype.TurnRequest, co *pool.Checkout[*resident.Process], prep resident.Prepared, start time.Time, gap time.Duration, hasGap bool, c *record, log *zap.Logger) (apitype.Event, error) {
	key, l := co.Key, co.Lease
	shape := l.Shape.String()
	r.Emit(apitype.Event{Event: apitype.EventStarted, Attempt: r.Attempt() + 1, Shape: shape, Native: l.Native, Pid: prep.Pid})
	req.RunID = r.ID
	if len(c.taken) > 0 {
		req.Text = d.coalescedText(req, c.taken)
	}

	_, cspan := tracing.Start(ctx, "compose")
	out, rep, err := d.compose(key, b, req, l, prep)
	text, user := out.Text, out.Stored
	if cspan.IsRecording() {
		cspan.SetAttributes(attribute.String("residentd.shape", shape), attribute.Int("residentd.prompt_bytes", len(text)))
		if rep != nil {
			cspan.SetAttributes(attribute.String("residentd.context.header", rep.Header), attribute.Int("residentd.context.lines", rep.Lines),
				attribute.Int("residentd.context.chars", rep.Chars))
		}
		if err != nil {
			cspan.SetStatus(codes.Error, err.Error())
		}
	}
	cspan.End()
	if err != nil {
		d.m.ObserveTurn(shape, lease.OutcomeAgentError, d.now().Sub(start))
		return apitype.Event{}, err
	}
	if ce := log.Check(zap.DebugLevel, "prompt"); ce != nil {
		ce.Write(zap.String("shape", shape), zap.Int("bytes", len(text)), zap.String("prompt", text))
	}
	// Durable before the agent sees it: a restart from here on ends this
	// attempt interrupted rather than prompting it again.
	if err := c.start(r); err != nil {
		d.m.ObserveTurn(shape, lease.OutcomeAgentError, d.now().Sub(start))
		return apitype.Event{}, err
	}

	tctx, tcancel := context.WithTimeout(ctx, time.Duration(b.TurnTimeout))
	defer tcancel()
	// The prompt's span goes to the agent (_meta traceparent); its tool
	// calls and permission requests are its children.
	tctx, pspan := tracing.Start(tctx, "prompt")
	tools := newToolSpans(tctx, pspan)
	unask := d.askThrough(l.Native, r, tctx, time.Duration(b.PermissionTimeout))
	defer unask()
	first := true
	turnStart := d.now()
	unsteer := func() []*burst { return nil }
	if b.Bursts == config.BurstsSteer && co.Session.CanSteer() {
		unsteer = d.steerable(r, co.Session)
	}
	// Output the agent sent before this prompt is its own run, ended now.
	co.Session.EndAgentRun("prompt")
	res, err := co.Session.Prompt(tctx, text, out.Attachments, func(u acp.Update) {
		if first {
			first = false
			d.m.ObserveFirstUpdate(shape, d.now().Sub(turnStart))
		}
		if u.Kind == acp.KindPermission {
			tools.decided(u.Decision)
			r.Emit(apitype.Event{Event: apitype.EventPermissionDecision, Decision: u.Decision})
			return
		}
		tools.update(u.Update)
		up := u.Update
		if n := up.Notice; n != nil {
			d.m.Notice(b.ID, n.Severity)
			log.Info("agent notice", zap.String("severity", n.Severity), zap.String("title", n.Title), zap.String("description", n.Description))
		}
		r.Emit(apitype.Event{Event: apitype.EventUpdate, Update: &up})
	})
	tools.end()
	if pspan.IsRecording() {
		pspan.SetAttributes(attribute.String("residentd.native_session", l.Native), attribute.String("residentd.stop_reason", res.StopReason),
			attribute.Int("residentd.prompt_bytes", len(text)))
		if err != nil {
			pspan.SetStatus(codes.Error, err.Error())
		}
	}
	pspan.End()
	crashAt("answered")
	c.taken = append(c.taken, unsteer()...)
	if err == nil && !successful(res.StopReason) {
		err = fmt.Errorf("%w: stop reason %q (the agent may not have read the context)", ErrAgentFailed, res.StopReason)
		if res.StopReason == string(sdk.StopReasonCancelled) {
			err = context.Canceled
		}
	}
	err = d.ctxErr(ctx, err)
	outcome := Outcome(err)
	// Every turn that reached the agent costs what it reported, failed or not.
	settle := d.keeper.Settled(b, co.Session, resident.Settlement{Result: res, Outcome: outcome, Err: err, BriefCount: out.BriefCount, BriefSent: out.BriefSent, Facts: out.Facts}, log)
	u := settle.Usage
	usage := &u
	tc := metrics.TurnCost{Binding: b.ID, Shape: shape, Known: !u.Unknown, Input: u.InputTokens, Output: u.OutputTokens,
		CacheRead: u.CacheReadTokens, CacheWrite: u.CacheWriteTokens, Gap: gap, HasGap: hasGap}
	if u.Cost != nil {
		tc.Cost = u.Cost.Float() // a metric, not a sum anyone reads exactly
	}
	d.m.TurnUsage(tc)
	if span := trace.SpanFromContext(ctx); span.IsRecording() {
		usageAttrs(span, shape, l.Native, u)
	}
	spend := d.chargeBudgets(r, b, req.Channel, u, log)
	var gapS *float64
	if hasGap {
		v := gap.Seconds()
		gapS = &v
	}
	if err != nil {
		c.spend = spend // written with the run's end, in one transaction
		d.m.ObserveTurn(shape, outcome, d.now().Sub(start))
		log.Info("turn failed", zap.String("shape", shape), zap.String("outcome", string(outcome)), zap.Duration("duration", d.now().Sub(start)), zap.Error(err))
		return apitype.Event{}, fmt.Errorf("turn %q for binding %q in channel %q: %w", r.ID, b.ID, req.Channel, err)
	}
	now := d.now()
	wm := apitype.WatermarkCommitted
	if l.Staged() == 0 {
		wm = apitype.WatermarkNone
	}
	done := apitype.Event{Event: apitype.EventDone, At: now, Shape: shape, Native: l.Native, StopReason: res.StopReason, Text: res.Text, Watermark: wm, Context: rep, Usage: usage, IdleGapS: gapS, Answers: answers(r, c.taken)}
	// The exchange, the watermarks and the run's end go in one transaction.
	ended := c.ended(r)
	ended.Ended = now
	ended.Events = append(ended.Events, r.Final(done))
	cut, keep := d.retention()
	save := settle.SaveNative
	_, mspan := tracing.Start(ctx, "commit")
	n, cerr := l.Commit(store.TurnCommit{Store: d.st, Key: key, Finish: store.Finish{SaveNative: save, Spend: spend, Run: &ended, RunsBefore: cut, RunsKeep: keep, Turns: []session.Turn{
		{Role: session.RoleUser, Text: user, At: start, MessageID: req.MessageID, MessageSeq: out.MentionSeq, Facts: out.Facts},
		{Role: session.RoleAssistant, Text: res.Text, At: now},
	}}})
	if mspan.IsRecording() {
		mspan.SetAttributes(attribute.Int("residentd.watermarks", n))
		if cerr != nil {
			mspan.SetStatus(codes.Error, cerr.Error())
		}
	}
	mspan.End()
	if cerr != nil && save {
		co.Session.KeepUnsaved()
	}
	c.committed = cerr == nil
	crashAt("committed")
	for i := 0; i < n; i++ {
		d.m.Watermark(true)
	}
	switch {
	case cerr != nil:
		done.Watermark = apitype.WatermarkFailed
		log.Error("storing the turn failed: its exchange is not in the conversation and its watermarks did not move", zap.Error(cerr))
		// The cost was spent all the same: it goes with the run's end,
		// which the failed commit did not write either.
		c.spend = spend
	case n == 0:
		done.Watermark = apitype.WatermarkNone
	}
	d.m.ObserveTurn(shape, lease.OutcomeOK, now.Sub(start))
	log.Info("turn done", zap.String("shape", shape), zap.String("native", l.Native), zap.String("stop", res.StopReason), zap.Duration("duration", now.Sub(start)))
	return done, nil
}

// asker routes a native session's permission requests to its running run.
type asker struct {
	r       *run.Run
	ctx     context.Context // the turn's: a cancel answers pending requests cancelled
	timeout time.Duration
}

// askThrough routes the permission requests of native to r while the turn
// runs; the returned func ends that.
func (d *Daemon) askThrough(native string, r *run.Run, ctx context.Context, timeout time.Duration) func() {
	a := &asker{r: r, ctx: ctx, timeout: timeout}
	d.mu.Lock()
	d.asking[native] = a
	d.mu.Unlock()
	return func() {
		d.mu.Lock()
		if d.asking[native] == a {
			delete(d.asking, native)
		}
		d.mu.Unlock()
	}
}

// ask is every agent's acp.AskFunc: a request of a session with no running
// turn (an agent asking out of turn) is answered cancelled.
func (d *Daemon) ask(ctx context.Context, native string, tc apitype.ToolCall, options []apitype.PermissionOption) string {
	d.mu.Lock()
	a := d.asking[native]
	d.mu.Unlock()
	if a == nil {
		d.log.Warn("permission request outside a turn; answered cancelled", zap.String("native", native), zap.String("tool", tc.Title))
		return ""
	}
	actx, cancel := context.WithCancel(a.ctx)
	defer cancel()
	stop := context.AfterFunc(ctx, cancel) // the agent withdrew the request
	defer stop()
	// The request's span lasts until its answer.
	_, span := tracing.Start(a.ctx, "permission")
	id, by := a.r.Ask(actx, tc, options, a.timeout)
	if span.IsRecording() {
		span.SetAttributes(attribute.String("residentd.tool.id", tc.ID), attribute.String("residentd.tool.kind", tc.Kind), attribute.String("residentd.tool.title", tc.Title),
			attribute.String("residentd.permission.decided_by", by), attribute.String("residentd.permission.option", id))
	}
	span.End()
	lvl := zap.InfoLevel
	if by == apitype.DecidedByLimit {
		lvl = zap.DebugLevel // an agent flooding requests does not flood the log; the run's events say it
	}
	d.log.Log(lvl, "permission decided", append([]zap.Field{zap.String("run", a.r.ID), zap.String("tool", tc.Title), zap.String("option", id), zap.String("decided_by", by)},
		tracing.LogFields(trace.SpanFromContext(a.ctx))...)...)
	return id
}
