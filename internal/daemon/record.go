package daemon

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"go.uber.org/zap"

	"github.com/residentd/residentd/apitype"
	"github.com/residentd/residentd/internal/channel"
	"github.com/residentd/residentd/internal/resident"
	"github.com/residentd/residentd/internal/run"
	"github.com/residentd/residentd/internal/session"
	"github.com/residentd/residentd/internal/store"
)

// A run is recorded in the state file when it is accepted (Submit, before
// it is returned), again when an attempt starts (after the prompt is
// composed, before the agent is prompted), and when it ends (in the turn's
// own transaction when it succeeds; with what a failed turn cost when it
// fails). The runs a turn answered besides its own (a coalesced list,
// mentions steered into it) end in the same write as it. A run whose key is
// free when it is accepted (it starts at once) is accepted as running its
// first attempt: one record, so a warm turn commits twice (accepted and
// started, then the turn). Each record numbers its run in the order of
// acceptance (Seq). On the next start, New finds every run that had not
// ended and enters them in their keys' lanes in that order: one that never
// started runs; one whose attempt had started ends that attempt
// interrupted and runs again as the next attempt when its binding retries,
// or ends interrupted. So an attempt is prompted at most once whenever the
// daemon dies, a key's mentions keep their order, and a mention answered
// in another's turn is not answered again. A shutdown writes a run
// accepted as started back as queued, as it was.

// runLog is where a turn records its run (*store.Store).
type runLog interface {
	PutRun(store.RunRecord) error
	FinishTurn(session.Key, store.Finish) error
	AddSpend([]store.Spend) error
	SetNativeID(session.Key, string) error
}

var _ runLog = (*store.Store)(nil)

// turnCommit is a successful turn's Finish for its lease to commit with
// the watermarks it staged, in one transaction (a lease.Committer).
type turnCommit struct {
	log runLog
	key session.Key
	f   store.Finish // Native and Staged are the lease's
}

func (c turnCommit) CommitWatermarks(native string, staged map[channel.WatermarkKey]channel.Seen) error {
	f := c.f
	f.Native, f.Staged = native, staged
	return c.log.FinishTurn(c.key, f)
}

// unsaved is a new native session id a failed turn leaves to be saved.
type unsaved struct {
	key    session.Key
	native string
	proc   *resident.Process
}

// fingerprint names the mention a request carries: the same run_id with
// the same fingerprint is a resubmission of that mention.
func fingerprint(req apitype.TurnRequest) string {
	th := ""
	if req.ThreadRoot != nil {
		th = "t:" + *req.ThreadRoot
	}
	b, _ := json.Marshal([]string{req.Channel, req.Binding, req.MessageID, th, req.Text})
	return string(b)
}

// accept records the run as accepted and enters it in its key's lane: a
// restart runs it, in its place. A run whose key is idle is accepted as
// running its first attempt (one write for both): a restart before its
// prompt ends that attempt interrupted, as it was in flight.
func (t *turn) accept() error {
	d := t.d
	reqJSON, err := json.Marshal(t.req)
	if err != nil {
		return fmt.Errorf("record run %q: %w", t.r.ID, err)
	}
	t.rec = store.RunRecord{ID: t.r.ID, Request: reqJSON, Created: t.r.Created}
	t.lane.enter(t, func(idle bool) {
		t.rec.Seq = d.accepted.Add(1)
		if idle && d.pool.Free(t.r.Key) {
			t.rec.Attempt, t.rec.Running, t.early = 1, true, true
		}
	})
	if err := d.records.PutRun(t.rec); err != nil {
		t.lane.leave(t)
		return fmt.Errorf("record run %q: %w", t.r.ID, err)
	}
	return nil
}

// recordStart records that the run's next attempt is about to prompt its
// agent. An error means it must not.
func (t *turn) recordStart() error {
	early := t.early && t.rec.Attempt == t.r.Attempt()
	t.early = false
	t.rec.Attempt = t.r.Attempt()
	t.rec.Running = true
	t.rec.Events = rawEvents(t.r.Persisted())
	if !early { // accepted as started otherwise
		if err := t.d.records.PutRun(t.rec); err != nil {
			return fmt.Errorf("record the start of run %q: %w", t.rec.ID, err)
		}
	}
	crashAt("started")
	return nil
}

// finish records the run's end once — done, or the error err — with the
// ends of the runs it answered, and returns its last event. A run another
// turn answered has its end already (that turn recorded it).
func (t *turn) finish(done apitype.Event, err error) apitype.Event {
	if t.final == nil {
		if err != nil {
			done = errorEvent(err, t.d.now())
		}
		t.final, t.err = &done, err
	}
	if !t.recorded {
		t.recorded = true
		if !t.written {
			t.end()
		}
	}
	return *t.final
}

// errorEvent is the error event that ends a run with err.
func errorEvent(err error, at time.Time) apitype.Event {
	ev := apitype.Event{Event: apitype.EventError, Code: Code(err), Message: err.Error(), At: at}
	var af *answerFailed
	if errors.As(err, &af) {
		ev.AnsweredBy = af.by
	}
	return ev
}

// end records the run's end, its failed turn's cost and new session id,
// unless the daemon is stopping it: a run ended by the shutdown stays
// queued or running in the state file, so the next start runs it or ends
// it interrupted.
func (t *turn) end() {
	d, native := t.d, t.native
	f := t.finishRecord(*t.final, t.err, d.now())
	if errors.Is(t.err, ErrShuttingDown) {
		t.stopped(f.Spend)
		return
	}
	key := t.r.Key
	if native != nil {
		key, f.Native, f.SaveNative = native.key, native.native, true
	}
	if err := d.records.FinishTurn(key, f); err != nil {
		if native != nil {
			native.proc.KeepUnsaved()
		}
		d.log.Error("recording the run's end (with its turn's cost and new session id) failed: a restart would run it again", zap.String("run", t.r.ID), zap.Error(err))
	}
}

// stopped records what a run the shutdown stopped leaves: its cost, its
// new session's id, and, when it was accepted as started, that it is
// queued again.
func (t *turn) stopped(spend []store.Spend) {
	d := t.d
	if err := d.records.AddSpend(spend); err != nil {
		d.log.Error("storing the failed turn's cost toward its budgets failed; it counts until the daemon restarts", zap.String("run", t.r.ID), zap.Error(err))
	}
	if n := t.native; n != nil {
		if err := d.records.SetNativeID(n.key, n.native); err != nil {
			n.proc.KeepUnsaved()
			d.log.Error("save native session id failed", zap.String("native", n.native), zap.Error(err))
		}
	}
	if t.early {
		rec := t.rec
		rec.Attempt, rec.Running = 0, false
		if err := d.records.PutRun(rec); err != nil {
			d.log.Error("recording the stopped run as queued failed: the next start ends it interrupted", zap.String("run", t.r.ID), zap.Error(err))
		}
	}
}

// finishRecord is the Finish that ends the run with last (its error err),
// its cost, and the runs it answered besides its own, each given its end
// here: done pointing at this run, or this run's error.
func (t *turn) finishRecord(last apitype.Event, err error, now time.Time) store.Finish {
	f := store.Finish{Spend: t.spend}
	f.RunsBefore, f.RunsKeep = t.d.retention()
	rec := t.ended(last, now)
	f.Run = &rec
	for _, o := range t.answered() {
		ev := apitype.Event{Event: apitype.EventDone, AnsweredBy: t.r.ID, Shape: last.Shape, StopReason: last.StopReason, Watermark: apitype.WatermarkNone, At: now}
		var oerr error
		if err != nil {
			oerr = &answerFailed{by: t.r.ID, err: err}
			ev = errorEvent(oerr, now)
		}
		if o.final == nil {
			o.final, o.err, o.recorded = &ev, oerr, true
		}
		f.Answered = append(f.Answered, o.ended(*o.final, now))
	}
	return f
}

// ended is the run's record as it ends with last.
func (t *turn) ended(last apitype.Event, now time.Time) store.RunRecord {
	rec := t.rec
	rec.Running = false
	rec.Events = rawEvents(t.r.Persisted())
	rec.Ended = now
	if last.At.IsZero() {
		last.At = now
	}
	if _, _, ended := t.r.Result(); !ended {
		rec.Events = append(rec.Events, t.r.Final(last))
	}
	return rec
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

// retention is what the state file keeps of ended runs: the run registry's
// own bounds.
func (d *Daemon) retention() (time.Time, int) {
	ret := time.Duration(d.conf().Runs.Retention)
	if ret <= 0 {
		ret = run.DefaultRetention
	}
	keep := d.conf().Runs.Ended
	if keep <= 0 {
		keep = run.DefaultEnded
	}
	return d.now().Add(-ret), keep
}

// known returns the run a resubmitted run id names, when the daemon knows
// it: in memory, or in the state file (an ended run memory forgot). A
// known id for another mention is ErrInUse.
func (d *Daemon) known(req apitype.TurnRequest) (*run.Run, bool, error) {
	r, ok := d.runs.Get(req.RunID)
	if !ok {
		rec, found, err := d.st.Run(req.RunID)
		if err != nil {
			return nil, false, err
		}
		if !found || rec.Ended.IsZero() {
			// A run not ended is in memory from the start.
			return nil, false, nil
		}
		if r, err = d.restoreEnded(rec); errors.Is(err, run.ErrInUse) {
			if r, ok = d.runs.Get(req.RunID); !ok {
				return nil, false, nil
			}
		} else if err != nil {
			return nil, false, err
		}
	}
	if r.Fingerprint != fingerprint(req) {
		return nil, false, fmt.Errorf("%w: %q answers another mention; use a new run_id", run.ErrInUse, req.RunID)
	}
	return r, true, nil
}

// restoreEnded makes an ended run of the state file readable again.
func (d *Daemon) restoreEnded(rec store.RunRecord) (*run.Run, error) {
	var req apitype.TurnRequest
	if err := json.Unmarshal(rec.Request, &req); err != nil {
		return nil, fmt.Errorf("run %q: read its recorded request: %w", rec.ID, err)
	}
	return d.runs.Restore(rec.ID, d.keyOf(req), req.MessageID, fingerprint(req), rec.Created, rec.Attempt, raw(rec.Events))
}

func raw(events []json.RawMessage) [][]byte {
	out := make([][]byte, len(events))
	for i, e := range events {
		out[i] = e
	}
	return out
}

func rawEvents(lines [][]byte) []json.RawMessage {
	out := make([]json.RawMessage, len(lines))
	for i, l := range lines {
		out[i] = l
	}
	return out
}
