package daemon

import (
	"context"
	"errors"
	"fmt"
	"time"

	sdk "github.com/coder/acp-go-sdk"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/zap"

	"github.com/residentd/residentd/apitype"
	"github.com/residentd/residentd/internal/acp"
	"github.com/residentd/residentd/internal/channel"
	"github.com/residentd/residentd/internal/config"
	"github.com/residentd/residentd/internal/delivery"
	"github.com/residentd/residentd/internal/lease"
	"github.com/residentd/residentd/internal/metrics"
	"github.com/residentd/residentd/internal/pool"
	"github.com/residentd/residentd/internal/resident"
	"github.com/residentd/residentd/internal/run"
	"github.com/residentd/residentd/internal/session"
	"github.com/residentd/residentd/internal/store"
	"github.com/residentd/residentd/internal/tracing"
)

// A turn is one run's answer to its mention. Submit makes it (or resume,
// for a run an earlier daemon accepted) and its own goroutine runs it,
// step by step:
//
//	wait     its key's lane hands it the key, or another turn answers it
//	acquire  the pool's process for the key: warm, or spawned cold or restored
//	gate     the budgets, then the keeper readies the process (session options)
//	compose  the lease decides the prompt (a coalescing lane's waiting mentions join it)
//	start    the attempt recorded as started
//	prompt   the agent answers; its updates stream into the run
//	settle   the keeper and the budgets learn what it cost
//	commit   the exchange, the watermarks and the run's end in one transaction
//	release  the process back to the pool, the key to the lane's next turn
//
// A step that fails ends the turn there: its run ends with the error, its
// staged watermarks are discarded. The run's record (accepted, started,
// ended) is written by the turn's own methods (record.go).
type turn struct {
	d      *Daemon
	r      *run.Run
	b      config.Binding // as accepted: a reload never changes a turn half-way
	req    apitype.TurnRequest
	lane   *lane
	ctx    context.Context // the run's: Cancel, start fresh and shutdown end it
	cancel context.CancelCauseFunc
	log    *zap.Logger

	rec   store.RunRecord // the run as last recorded
	early bool            // rec says attempt 1 started: written so at acceptance

	// The lane's bookkeeping of this turn, guarded by lane.mu.
	by      *turn        // the turn that answers its mention (coalesced, steered)
	tried   *steerTarget // the prompt that refused to be steered this mention
	waitPos int          // the position its last queued event gave

	// What the steps leave for the ones after them (the turn's goroutine
	// alone reads and writes these).
	start   time.Time // the daemon's clock when the turn began
	qstart  time.Time // the span clock when it began to wait
	co      *pool.Checkout[*resident.Process]
	keep    bool // the process stays for the key's next turn
	prep    resident.Prepared
	out     lease.Output
	rep     *apitype.ContextReport
	taken   []*turn // the mentions its prompt lists besides its own (coalesced)
	steered []*turn // the mentions steered into its prompt
	res     acp.Result
	usage   apitype.Usage
	save    bool          // the session is new: its id is saved with the commit
	spend   []store.Spend // what it cost, for the budgets, written with its end
	native  *unsaved      // a failed turn's new session id, written with its end
	written bool          // its end rode the turn's own commit

	// Its end: set by finish, or by the turn that answered it (which
	// records it too) before that turn's run ends.
	final    *apitype.Event
	err      error
	recorded bool
}

// run is the turn's goroutine; Submit and resume counted it in d.wg.
func (t *turn) run() {
	defer t.d.wg.Done()
	defer t.cancel(nil)
	done, err := t.execute()
	// No longer cancellable before its last event is out: a client that
	// saw done and cancels gets run_ended.
	t.d.forget(t.r.ID)
	// Recorded while the key is held, so the key's next run starts after
	// this one has its end; released before the run ends, so a client
	// that lists the sessions after done sees the key idle.
	final := t.finish(done, err)
	t.release()
	endSpan(trace.SpanFromContext(t.ctx), t.err)
	t.r.Finish(final, t.err)
}

// execute runs the steps; the error is the turn's.
func (t *turn) execute() (apitype.Event, error) {
	t.begin()
	by, err := t.lane.wait(t)
	switch {
	case by != nil:
		return t.answeredBy(by)
	case err != nil:
		return apitype.Event{}, t.unstarted(err)
	}
	if err := t.acquire(); err != nil {
		return apitype.Event{}, t.unstarted(err)
	}
	if err := t.gate(); err != nil {
		return apitype.Event{}, err
	}
	done, err := t.answer()
	if err != nil && t.co.Session.TakeUnsaved() {
		// A new session's id, saved with the run's end so a later process
		// can still restore the session the agent keeps.
		t.native = &unsaved{key: t.co.Key, native: t.co.Lease.Native, proc: t.co.Session}
	}
	// Every exit that did not commit discards: a failed run may never have
	// shown the agent anything. Discard after Commit is a no-op.
	for n := t.co.Lease.Discard(); n > 0; n-- {
		t.d.m.Watermark(false)
	}
	return done, err
}

// begin names the turn in its log and its span.
func (t *turn) begin() {
	t.start, t.qstart = t.d.now(), time.Now() // the span's clock, not the daemon's (tests swap that)
	t.log = t.d.log.With(zap.Stringer("key", t.r.Key), zap.String("run", t.r.ID))
	if span := trace.SpanFromContext(t.ctx); span.IsRecording() {
		t.log = t.log.With(tracing.LogFields(span)...)
		span.SetAttributes(attribute.String("residentd.run", t.r.ID), attribute.String("residentd.channel", t.r.Key.Channel),
			attribute.String("residentd.binding", t.r.Key.Binding), attribute.String("residentd.message", t.r.MessageID),
			attribute.Int("residentd.attempt", t.r.Attempt()+1))
	}
}

// observe counts the turn once, by its shape and outcome.
func (t *turn) observe(shape string, err error) {
	t.d.m.ObserveTurn(shape, Outcome(err), t.d.now().Sub(t.start))
}

// shape names the lease the turn got.
func (t *turn) shape() string { return t.co.Lease.Shape.String() }

// answeredBy waits for the turn that took t's mention in and returns the
// end it gave t: done pointing at it, or its error.
func (t *turn) answeredBy(by *turn) (apitype.Event, error) {
	for {
		changed := by.r.Wait() // before the check: a change in between closes it
		if _, _, ok := by.r.Result(); ok {
			break
		}
		<-changed
	}
	t.observe(lease.Unstarted, t.err)
	return *t.final, t.err
}

// unstarted ends a turn that got no process: the lane or the pool failed
// it, or it was cancelled while it waited.
func (t *turn) unstarted(err error) error {
	if errors.Is(err, pool.ErrClosed) {
		err = ErrShuttingDown
	}
	err = t.d.ctxErr(t.ctx, err)
	// Every turn that passed validation is counted once, failed starts too.
	t.observe(lease.Unstarted, err)
	if !errors.Is(err, ErrShuttingDown) {
		t.log.Info("turn failed before it started", zap.String("outcome", string(Outcome(err))), zap.Error(err))
	}
	return err
}

// acquire waits for a slot and checks out the key's process. The turn
// keeps the binding it was accepted with across a reload: a process it
// spawns starts that binding, and a live process started with settings
// it does not have is replaced.
func (t *turn) acquire() error {
	ctx := resident.WithRestoreNote(t.ctx, func(ev apitype.Event) { t.r.Emit(ev) })
	bp := &t.b
	ctx = resident.WithBinding(ctx, bp)
	inLane := time.Since(t.qstart)
	co, err := t.d.pool.Acquire(ctx, t.r.Key, pool.AcquireOptions{Owner: t.r.ID, Reuse: func(s pool.Session) bool {
		return t.d.keeper.Reuse(s.(*resident.Process), bp)
	}, OnWait: func(w pool.Wait) {
		reason := apitype.QueueKeyBusy // start fresh holds the key
		if w.Slot {
			reason = apitype.QueueNoSlot
		}
		t.r.Emit(apitype.Event{Event: apitype.EventQueued, Reason: reason, Position: w.Position})
	}, OnStart: t.r.Starting})
	if err != nil {
		return err
	}
	t.co = co
	waited := inLane + co.Waited
	t.d.m.ObserveQueueWait(waited)
	if span := trace.SpanFromContext(t.ctx); span.IsRecording() {
		_, s := span.TracerProvider().Tracer(tracing.Scope).Start(t.ctx, "queue wait", trace.WithTimestamp(t.qstart))
		s.End(trace.WithTimestamp(t.qstart.Add(waited)))
	}
	return nil
}

// gate readies the checked-out process before the turn is announced as
// started: a turn that waited while its budget ran out is refused, and the
// key's session options are brought to what it wants (bounded by the
// turn's time limit). A session that has not had its first turn (cold,
// restored) goes with its process when the gate refuses it: kept, its
// next turn would be warm without the framing or the replay it never got;
// so does an agent that failed or did not answer an option.
func (t *turn) gate() error {
	shape := t.shape()
	err := t.d.checkBudget(t.b.ID, t.req.Channel)
	if err == nil {
		t.prep, err = t.d.keeper.Prepare(t.ctx, time.Duration(t.b.TurnTimeout), t.co.Key, t.b, t.co.Session, t.log)
		if err != nil {
			err = t.d.ctxErr(t.ctx, err)
			t.log.Info("turn failed: session options", zap.String("shape", shape), zap.Error(err))
			err = fmt.Errorf("turn %q for binding %q in channel %q: %w", t.r.ID, t.b.ID, t.req.Channel, err)
		}
	}
	if err != nil {
		t.observe(shape, err)
		t.keep = t.b.KeepsSession() && t.co.Lease.Shape == lease.Warm && (errors.Is(err, ErrInvalidOption) || errors.Is(err, ErrBudgetExceeded))
		t.co.Lease.Discard()
	}
	return err
}

// answer composes, records the start, prompts, settles and commits.
func (t *turn) answer() (apitype.Event, error) {
	t.keep = t.b.KeepsSession()
	gap, hasGap := t.lane.gap(t.start)
	shape := t.shape()
	err := t.compose()
	if err == nil {
		err = t.recordStart()
	}
	if err != nil {
		// Not prompted: a new process has not seen its framing (a
		// system_file that could not be read). As after a refused gate it
		// stops, and its new session is not kept to restore: the key's
		// next turn starts cold and sends the framing.
		if t.co.Lease.Shape != lease.Warm {
			t.keep = false
			t.co.Session.TakeUnsaved()
		}
		t.d.m.ObserveTurn(shape, lease.OutcomeAgentError, t.d.now().Sub(t.start))
		return apitype.Event{}, err
	}
	err = t.prompt()
	t.settle(err, gap, hasGap)
	if err != nil {
		t.observe(shape, err)
		t.log.Info("turn failed", zap.String("shape", shape), zap.String("outcome", string(Outcome(err))), zap.Duration("duration", t.d.now().Sub(t.start)), zap.Error(err))
		return apitype.Event{}, fmt.Errorf("turn %q for binding %q in channel %q: %w", t.r.ID, t.b.ID, t.req.Channel, err)
	}
	return t.commit(gap, hasGap), nil
}

// compose announces the start and has the lease decide the prompt: the
// mention, or with a coalescing binding every mention waiting on the key
// now, and the channel lines the session has not seen, leaving out the
// mentions that still wait (a later turn carries them).
func (t *turn) compose() error {
	l := t.co.Lease
	t.r.Emit(apitype.Event{Event: apitype.EventStarted, Attempt: t.r.Attempt() + 1, Shape: l.Shape.String(), Native: l.Native, Pid: t.prep.Pid})
	req := t.req
	req.RunID = t.r.ID
	t.taken = t.lane.take(t)
	var listed []string
	if len(t.taken) > 0 {
		req.Text = t.d.coalescedText(req, t.taken)
		for _, o := range t.taken {
			listed = append(listed, o.req.MessageID)
		}
	}
	_, span := tracing.Start(t.ctx, "compose")
	defer span.End()
	in := t.input(req, listed)
	err := t.d.st.Read(func(src *store.Reading) (err error) {
		// The mentions waiting now, read once the store's snapshot is
		// taken: a message in the snapshot was pushed before it, so its
		// mention, if it waits, was accepted before it too and is here.
		// (Read before the snapshot, a mention accepted and pushed in
		// between would be shown as a line.)
		in.Held = t.lane.held()
		t.out, err = l.Compose(src, t.co.Key, thread(req), in)
		return err
	})
	if err != nil {
		span.SetStatus(codes.Error, err.Error())
		return err
	}
	t.rep = t.report()
	if span.IsRecording() {
		span.SetAttributes(attribute.String("residentd.shape", l.Shape.String()), attribute.Int("residentd.prompt_bytes", len(t.out.Text)),
			attribute.String("residentd.context.header", t.rep.Header), attribute.Int("residentd.context.lines", t.rep.Lines),
			attribute.Int("residentd.context.chars", t.rep.Chars))
	}
	if ce := t.log.Check(zap.DebugLevel, "prompt"); ce != nil {
		ce.Write(zap.String("shape", l.Shape.String()), zap.Int("bytes", len(t.out.Text)), zap.String("prompt", t.out.Text))
	}
	return nil
}

// thread is the timeline a mention lives in: its thread's root, or "".
func thread(req apitype.TurnRequest) string {
	if req.ThreadRoot != nil {
		return *req.ThreadRoot
	}
	return ""
}

// input is what the lease composes the prompt of req from: the binding,
// the mention, what the keeper knows of the process, and the mentions the
// prompt lists besides req's.
func (t *turn) input(req apitype.TurnRequest, listed []string) lease.Input {
	b, cfg := t.b, t.d.conf()
	agents := []delivery.Agent{{Handle: b.Handle, Reachable: true}}
	if req.ChannelAgents != nil {
		agents = make([]delivery.Agent, len(req.ChannelAgents))
		for i, a := range req.ChannelAgents {
			agents[i] = delivery.Agent{Handle: a.Handle, Reachable: a.Reachable}
		}
	}
	maxRcpt := req.MaxRecipients
	if maxRcpt == 0 {
		maxRcpt = 3
	}
	return lease.Input{
		Framing: b.Framing, Brief: b.Brief, Placement: b.BriefPlacement, BriefEvery: b.BriefEvery, BriefCount: t.prep.BriefCount, BriefDue: t.prep.BriefDue, SystemPrompt: t.prep.SystemPrompt,
		SeenFacts: t.prep.Facts, Missed: t.prep.Missed,
		Mention: delivery.Payload{
			ChannelID: req.Channel, MessageID: req.MessageID, RunID: req.RunID, BindingID: b.ID, Runtime: b.Runtime,
			Supervised: b.Supervised, Resident: b.Resident, ThreadRootID: req.ThreadRoot,
			ChannelAgents: agents, MaxRecipients: maxRcpt, Worktree: t.prep.Worktree, Text: req.Text,
		},
		Listed:       listed,
		KeepsSession: b.KeepsSession(),
		Self:         channel.Self{Handle: b.Handle, Binding: b.ID}, OmitOwn: b.OmitOwn(),
		Render: delivery.RenderOptions{Limit: cfg.Context.Limit, MaxChars: cfg.Context.MaxChars},
	}
}

// report counts what the composed block showed and left out, in the
// metrics and as the done event will say it.
func (t *turn) report() *apitype.ContextReport {
	out, d := t.out, t.d
	r := out.Context
	d.m.ChannelRender(r.Lines, r.DroppedSeen, r.DroppedBound, r.OwnOmitted, r.Known, r.Chars, r.Truncated)
	if out.Framing != "" {
		d.guardFraming(t.b.ID, out.Framing)
	}
	if out.BriefSent {
		brief := t.b.Brief
		if brief == "" {
			brief = delivery.DefaultBrief
		}
		d.m.BriefTokens(t.b.BriefPlacement, approxTokens(brief))
	}
	rep := &apitype.ContextReport{Header: out.Header(), Lines: r.Lines, Chars: r.Chars, DroppedSeen: r.DroppedSeen, DroppedBound: r.DroppedBound, Truncated: r.Truncated,
		OwnOmitted: r.OwnOmitted, Known: r.Known, Held: r.Held, Edited: r.Edited, DroppedBoundEdits: r.BoundEdits, Shown: r.Shown, PromptBytes: len(out.Text)}
	if rep.Shown == nil {
		rep.Shown = []string{}
	}
	return rep
}

// prompt sends the composed prompt and streams the agent's updates into
// the run, its permission requests routed to it and, with a steering
// binding, the mentions waiting behind it steered into it. The error says
// why the agent did not answer the turn.
func (t *turn) prompt() error {
	b, l, sess := t.b, t.co.Lease, t.co.Session
	ctx, cancel := context.WithTimeoutCause(t.ctx, time.Duration(b.TurnTimeout),
		fmt.Errorf("the turn ran past binding %q's turn_timeout (%s)", b.ID, time.Duration(b.TurnTimeout)))
	defer cancel()
	// The prompt's span goes to the agent (_meta traceparent); its tool
	// calls and permission requests are its children.
	ctx, span := tracing.Start(ctx, "prompt")
	tools := newToolSpans(ctx, span)
	defer t.d.askThrough(l.Native, t.r, ctx, time.Duration(b.PermissionTimeout))()
	// Output the agent sent before this prompt is its own run, ended now.
	sess.EndAgentRun("prompt")
	var err error
	t.res, err = sess.Prompt(ctx, t.out.Text, t.out.Attachments, t.updates(tools, sess))
	tools.end()
	t.steered = t.lane.closeSteer(t)
	if span.IsRecording() {
		span.SetAttributes(attribute.String("residentd.native_session", l.Native), attribute.String("residentd.stop_reason", t.res.StopReason),
			attribute.Int("residentd.prompt_bytes", len(t.out.Text)))
		if err != nil {
			span.SetStatus(codes.Error, err.Error())
		}
	}
	span.End()
	crashAt("answered")
	if err == nil && !successful(t.res.StopReason) {
		err = fmt.Errorf("%w: stop reason %q (the agent may not have read the context)", ErrAgentFailed, t.res.StopReason)
		if t.res.StopReason == string(sdk.StopReasonCancelled) {
			err = t.stoppedCancelled(ctx)
		}
	}
	if errors.Is(err, context.DeadlineExceeded) && t.ctx.Err() == nil {
		err = t.d.ctxErr(ctx, err) // the turn's own timeout: its message names the setting
	}
	return t.d.ctxErr(t.ctx, err)
}

// stoppedCancelled says why a prompt the agent answered with stop reason
// cancelled ended: the turn was cancelled or ran out of time (ctx, the
// prompt's, ended: the run's cancel, its turn_timeout), or, with nobody
// having asked it to stop, the agent stopped by itself. codex-acp does so
// after a permission request is refused: that is ErrPolicyRefused, naming
// the call; any other stop of its own is ErrAgentFailed.
func (t *turn) stoppedCancelled(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	for _, c := range t.res.ToolCalls {
		switch c.Outcome() {
		case acp.ToolRefusedByPolicy:
			return fmt.Errorf("%w: the agent ended the turn itself (stop reason %q) after binding %q's permission policy %q refused its %s tool call %q; nobody cancelled the run",
				ErrPolicyRefused, t.res.StopReason, t.b.ID, t.b.Permission, c.Kind, c.ID)
		case acp.ToolAskedRejected:
			return fmt.Errorf("%w: the agent ended the turn itself (stop reason %q) after its %s tool call %q was rejected when put to a person (binding %q's permission policy %q); nobody cancelled the run",
				ErrPolicyRefused, t.res.StopReason, c.Kind, c.ID, t.b.ID, t.b.Permission)
		}
	}
	return fmt.Errorf("%w: the agent ended the turn with stop reason %q by itself: nobody cancelled the run, and no permission was refused", ErrAgentFailed, t.res.StopReason)
}

// updates is the prompt's update callback: each update into the run's
// log, a tool call into its span, a notice into the log and metrics. The
// first says the agent works on the prompt: with a steering binding, the
// mentions waiting behind it may now be steered into it (before, an agent
// refuses a steer: no turn of its runs yet).
func (t *turn) updates(tools *toolSpans, s steerer) func(acp.Update) {
	first, sent := true, t.d.now()
	steers := t.b.Bursts == config.BurstsSteer && t.co.Session.CanSteer()
	return func(u acp.Update) {
		if first {
			first = false
			t.d.m.ObserveFirstUpdate(t.shape(), t.d.now().Sub(sent))
			if steers {
				t.lane.openSteer(t, s)
			}
		}
		if u.Kind == acp.KindPermission {
			tools.decided(u.Decision)
			t.r.Emit(apitype.Event{Event: apitype.EventPermissionDecision, Decision: u.Decision})
			return
		}
		tools.update(u.Update)
		up := u.Update
		if n := up.Notice; n != nil {
			t.d.m.Notice(t.b.ID, n.Severity)
			t.log.Info("agent notice", zap.String("severity", n.Severity), zap.String("title", n.Title), zap.String("description", n.Description))
		}
		t.r.Emit(apitype.Event{Event: apitype.EventUpdate, Update: &up})
	}
}

// settle tells the keeper how the prompt ended (every turn that reached
// the agent costs what it reported, failed or not) and counts the cost in
// the metrics, on the run's span and toward the budgets.
func (t *turn) settle(err error, gap time.Duration, hasGap bool) {
	shape, native := t.shape(), t.co.Lease.Native
	s := t.d.keeper.Settled(t.b, t.co.Session, resident.Settlement{Result: t.res, Outcome: Outcome(err), Err: err,
		BriefCount: t.out.BriefCount, BriefSent: t.out.BriefSent, Facts: t.out.Facts}, t.log)
	u := s.Usage
	t.usage, t.save = u, s.SaveNative
	tc := metrics.TurnCost{Binding: t.b.ID, Shape: shape, Known: !u.Unknown, Input: u.InputTokens, Output: u.OutputTokens,
		CacheRead: u.CacheReadTokens, CacheWrite: u.CacheWriteTokens, Thought: u.ThoughtTokens, Gap: gap, HasGap: hasGap}
	if u.Cost != nil {
		tc.Cost = u.Cost.Float() // a metric, not a sum anyone reads exactly
	}
	t.d.m.TurnUsage(tc)
	if span := trace.SpanFromContext(t.ctx); span.IsRecording() {
		usageAttrs(span, shape, native, u)
	}
	t.spend = t.d.chargeBudgets(t.r, t.b, t.req.Channel, u, t.log)
}

// commit stores the turn: its exchange, its watermarks (those of the
// mentions steered into it too) and the ends of its run and of every run
// it answered, in one transaction; and returns its done event.
func (t *turn) commit(gap time.Duration, hasGap bool) apitype.Event {
	l, now, shape := t.co.Lease, t.d.now(), t.shape()
	t.stageSteered()
	wm := apitype.WatermarkCommitted
	if l.Staged() == 0 {
		wm = apitype.WatermarkNone
	}
	done := apitype.Event{Event: apitype.EventDone, At: now, Shape: shape, Native: l.Native, StopReason: t.res.StopReason, Text: t.res.Text,
		Watermark: wm, Context: t.rep, Usage: &t.usage, UsageSource: t.res.UsageFrom, Answers: t.answers()}
	if hasGap {
		v := gap.Seconds()
		done.IdleGapS = &v
	}
	var others []string
	for _, o := range t.answered() {
		if o.req.MessageID != "" {
			others = append(others, o.req.MessageID)
		}
	}
	f := t.finishRecord(done, nil, now)
	f.SaveNative, f.Turns = t.save, []session.Turn{
		{Role: session.RoleUser, Text: t.out.Stored, At: t.start, MessageID: t.req.MessageID, MessageSeq: t.out.MentionSeq, Answers: others, Facts: t.out.Facts},
		{Role: session.RoleAssistant, Text: t.res.Text, At: now},
	}
	_, span := tracing.Start(t.ctx, "commit")
	n, err := l.Commit(turnCommit{log: t.d.records, key: t.co.Key, f: f})
	if span.IsRecording() {
		span.SetAttributes(attribute.Int("residentd.watermarks", n))
		if err != nil {
			span.SetStatus(codes.Error, err.Error())
		}
	}
	span.End()
	t.written = err == nil
	crashAt("committed")
	for range n {
		t.d.m.Watermark(true)
	}
	switch {
	case err != nil:
		done.Watermark = apitype.WatermarkFailed
		t.log.Error("storing the turn failed: its exchange is not in the conversation and its watermarks did not move", zap.Error(err))
		if t.save {
			t.co.Session.KeepUnsaved()
		}
	case n == 0:
		done.Watermark = apitype.WatermarkNone
	}
	t.d.m.ObserveTurn(shape, lease.OutcomeOK, now.Sub(t.start))
	t.log.Info("turn done", zap.String("shape", shape), zap.String("native", l.Native), zap.String("stop", t.res.StopReason), zap.Duration("duration", now.Sub(t.start)))
	return done
}

// stageSteered stages, for a binding that keeps its session, the mentions
// steered into the prompt as seen by the session (any unedited version):
// the block before them never showed them, and their push is not news.
func (t *turn) stageSteered() {
	if !t.b.KeepsSession() {
		return
	}
	for _, o := range t.steered {
		if o.req.MessageID != "" {
			t.co.Lease.Stage(channel.WatermarkKey{Key: t.co.Key, Thread: thread(o.req)}, channel.Seen{Marks: channel.Unedited(o.req.MessageID)})
		}
	}
}

// answered lists the mentions the turn answered besides its own: those
// its prompt listed, then those steered into it.
func (t *turn) answered() []*turn {
	return append(t.taken[:len(t.taken):len(t.taken)], t.steered...)
}

// answers lists the mentions the turn answered, its own first, for its
// done event; nil when it answered its own alone.
func (t *turn) answers() []apitype.Answered {
	others := t.answered()
	if len(others) == 0 {
		return nil
	}
	out := []apitype.Answered{{RunID: t.r.ID, MessageID: t.r.MessageID}}
	for _, o := range others {
		out = append(out, apitype.Answered{RunID: o.r.ID, MessageID: o.r.MessageID})
	}
	return out
}

// release gives the key to the lane's next turn (reserved in the pool)
// and the process back to the pool: kept for the key's next turn, or
// stopped.
func (t *turn) release() {
	t.lane.release(t)
	if t.co != nil {
		t.d.pool.Release(t.co, t.keep)
	}
}
