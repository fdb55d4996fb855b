package daemon

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"syscall"
	"time"

	"go.uber.org/zap"

	"github.com/residentd/residentd/apitype"
	"github.com/residentd/residentd/internal/resident"
	"github.com/residentd/residentd/internal/run"
	"github.com/residentd/residentd/internal/session"
	"github.com/residentd/residentd/internal/store"
)

// A run is recorded in the state file when it is accepted (Submit, before
// it is returned), again when an attempt starts (after the prompt is
// composed, before the agent is prompted), and when it ends (in the turn's
// own transaction when it succeeds; with what a failed turn cost when it
// fails). A run whose key is free when it is accepted (it starts at once)
// is accepted as running its first attempt: one record, so a warm turn
// commits twice (accepted and started, then the turn). On the next start,
// New finds every run that had not ended: one that never started runs; one
// whose attempt had started ends that attempt interrupted and runs again
// as the next attempt when its binding retries, or ends interrupted. So an
// attempt is prompted at most once whenever the daemon dies; a run accepted
// as started that died before its prompt was in flight all the same, and
// shows so. A shutdown writes such a run back as queued, as it was.

// fingerprint names the mention a request carries: the same run_id with
// the same fingerprint is a resubmission of that mention.
func fingerprint(req apitype.TurnRequest) string {
	thread := ""
	if req.ThreadRoot != nil {
		thread = "t:" + *req.ThreadRoot
	}
	b, _ := json.Marshal([]string{req.Channel, req.Binding, req.MessageID, thread, req.Text})
	return string(b)
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
		var old apitype.TurnRequest
		if err := json.Unmarshal(rec.Request, &old); err != nil {
			return nil, false, fmt.Errorf("run %q: read its recorded request: %w", rec.ID, err)
		}
		r, err = d.runs.Restore(rec.ID, d.keyOf(old), old.MessageID, fingerprint(old), rec.Created, rec.Attempt, raw(rec.Events))
		if errors.Is(err, run.ErrInUse) {
			r, ok = d.runs.Get(req.RunID)
			if !ok {
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

// record is a run's state file record as its goroutine keeps it.
type record struct {
	d         *Daemon
	rec       store.RunRecord
	committed bool           // the end rode the turn's own transaction
	final     *apitype.Event // the run's last event, once recorded
	cancel    context.CancelCauseFunc
	taken     []*burst // the runs its turn answers besides its own (bursts coalesce)
	// early says rec was written as attempt 1 started when the run was
	// accepted (its key was free), before its prompt: start then writes
	// nothing for that attempt.
	early  bool
	spend  []store.Spend // what a failed turn cost, written with its end
	native *unsaved      // a failed turn's new session id, written with its end
}

// unsaved is a new native session id a failed turn leaves to be saved.
type unsaved struct {
	key    session.Key
	native string
	proc   *resident.Process
}

// finish records the run's end once, done or the error err, and returns
// its last event.
func (c *record) finish(r *run.Run, done apitype.Event, err error) apitype.Event {
	if c.final != nil {
		return *c.final
	}
	if err != nil {
		done = apitype.Event{Event: apitype.EventError, Code: Code(err), Message: err.Error(), At: c.d.now()}
		var af *answerFailed
		if errors.As(err, &af) {
			done.AnsweredBy = af.by
		}
	}
	if !c.committed {
		c.end(r, done, err)
	}
	c.final = &done
	return done
}

// start records that attempt rec.Attempt+1 of r is about to prompt its
// agent. An error means it must not.
func (c *record) start(r *run.Run) error {
	early := c.early && c.rec.Attempt == r.Attempt()
	c.early = false
	c.rec.Attempt = r.Attempt()
	c.rec.Running = true
	c.rec.Events = rawEvents(r.Persisted())
	if early {
		// Already recorded as started when it was accepted.
		crashAt("started")
		return nil
	}
	if err := c.d.st.PutRun(c.rec); err != nil {
		return fmt.Errorf("record the start of run %q: %w", c.rec.ID, err)
	}
	crashAt("started")
	return nil
}

// ended returns the record of r once it has ended.
func (c *record) ended(r *run.Run) store.RunRecord {
	rec := c.rec
	rec.Running = false
	rec.Events = rawEvents(r.Persisted())
	rec.Ended = c.d.now()
	return rec
}

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

// end records r's end, last (done or error; Finish follows with it),
// unless the daemon is stopping it: a run ended by
// the shutdown stays queued or running in the state file, so the next
// start runs it or ends it interrupted.
func (c *record) end(r *run.Run, last apitype.Event, err error) {
	spend, native := c.spend, c.native
	c.spend, c.native = nil, nil
	if errors.Is(err, ErrShuttingDown) {
		if serr := c.d.st.AddSpend(spend); serr != nil {
			c.d.log.Error("storing the failed turn's cost toward its budgets failed; it counts until the daemon restarts", zap.String("run", r.ID), zap.Error(serr))
		}
		if native != nil {
			if serr := c.d.st.SetNativeID(native.key, native.native); serr != nil {
				native.proc.KeepUnsaved()
				c.d.log.Error("save native session id failed", zap.String("native", native.native), zap.Error(serr))
			}
		}
		if c.early {
			// Accepted as started, stopped before its prompt: it is queued.
			rec := c.rec
			rec.Attempt, rec.Running = 0, false
			if serr := c.d.st.PutRun(rec); serr != nil {
				c.d.log.Error("recording the stopped run as queued failed: the next start ends it interrupted", zap.String("run", r.ID), zap.Error(serr))
			}
		}
		return
	}
	cut, keep := c.d.retention()
	rec := c.ended(r)
	if last.At.IsZero() {
		last.At = rec.Ended
	}
	if _, _, ended := r.Result(); !ended {
		rec.Events = append(rec.Events, r.Final(last))
	}
	// The end, the failed turn's cost and its new session's id: one write.
	f := store.Finish{Run: &rec, RunsBefore: cut, RunsKeep: keep, Spend: spend}
	key := r.Key
	if native != nil {
		key, f.Native, f.SaveNative = native.key, native.native, true
	}
	if serr := c.d.st.FinishTurn(key, f); serr != nil {
		if native != nil {
			native.proc.KeepUnsaved()
		}
		c.d.log.Error("recording the run's end (with its turn's cost and new session id) failed: a restart would run it again", zap.String("run", r.ID), zap.Error(serr))
	}
}

// resume picks up the runs the state file holds from an earlier daemon:
// ended ones are readable again, queued ones run, interrupted ones end
// interrupted or run again. Runs start in creation order.
func (d *Daemon) resume() error {
	recs, err := d.st.Runs()
	if err != nil {
		return err
	}
	cut, keep := d.retention()
	ended, old := 0, false
	for _, rec := range recs {
		if !rec.Ended.IsZero() {
			ended++
			old = old || !rec.Ended.After(cut)
		}
	}
	if old || ended > keep { // a start without anything to prune writes nothing
		if _, err := d.st.PruneRuns(cut, keep); err != nil {
			return err
		}
	}
	type pending struct {
		rec store.RunRecord
		req apitype.TurnRequest
	}
	var todo []pending
	for _, rec := range recs {
		var req apitype.TurnRequest
		if err := json.Unmarshal(rec.Request, &req); err != nil {
			d.log.Error("a recorded run's request does not read; it is dropped", zap.String("run", rec.ID), zap.Error(err))
			continue
		}
		if !rec.Ended.IsZero() {
			if rec.Ended.After(cut) {
				key := d.keyOf(req)
				if _, err := d.runs.Restore(rec.ID, key, req.MessageID, fingerprint(req), rec.Created, rec.Attempt, raw(rec.Events)); err != nil {
					d.log.Error("restore a recorded run", zap.String("run", rec.ID), zap.Error(err))
				}
			}
			continue
		}
		todo = append(todo, pending{rec, req})
	}
	sortByCreated(todo, func(p pending) time.Time { return p.rec.Created })
	for _, p := range todo {
		d.resumeRun(p.rec, p.req)
	}
	return nil
}

func sortByCreated[T any](s []T, at func(T) time.Time) {
	for i := 1; i < len(s); i++ {
		for j := i; j > 0 && at(s[j]).Before(at(s[j-1])); j-- {
			s[j], s[j-1] = s[j-1], s[j]
		}
	}
}

// resumeRun restores one unended run and goes on with it.
func (d *Daemon) resumeRun(rec store.RunRecord, req apitype.TurnRequest) {
	key := d.keyOf(req)
	r, err := d.runs.Restore(rec.ID, key, req.MessageID, fingerprint(req), rec.Created, rec.Attempt, raw(rec.Events))
	if err != nil {
		d.log.Error("restore a recorded run", zap.String("run", rec.ID), zap.Error(err))
		return
	}
	c := &record{d: d, rec: rec}
	log := d.log.With(zap.String("run", rec.ID), zap.String("key", key.String()))
	b, ok := d.conf().Binding(req.Binding)
	if rec.Running {
		retry := ok && b.RetryOn()
		r.Emit(apitype.Event{Event: apitype.EventInterrupted, Attempt: rec.Attempt})
		if !retry {
			err := fmt.Errorf("%w: attempt %d of run %q was in flight when the daemon stopped", ErrInterrupted, rec.Attempt, rec.ID)
			last := apitype.Event{Event: apitype.EventError, Code: apitype.CodeInterrupted, Message: err.Error(), At: d.now()}
			c.end(r, last, err)
			r.Finish(last, err)
			log.Info("run interrupted by the restart; not retried", zap.Int("attempt", rec.Attempt))
			return
		}
		log.Info("run interrupted by the restart; retrying", zap.Int("attempt", rec.Attempt+1))
	} else {
		log.Info("run queued before the restart; running it")
	}
	if !ok {
		err := fmt.Errorf("%w %q: configured bindings are %v", ErrUnknownBinding, req.Binding, d.conf().BindingIDs())
		last := apitype.Event{Event: apitype.EventError, Code: Code(err), Message: err.Error(), At: d.now()}
		c.end(r, last, err)
		r.Finish(last, err)
		return
	}
	ctx, cancel := context.WithCancelCause(context.Background())
	d.mu.Lock()
	d.cancels[rec.ID] = cancel
	d.turns.Add(1)
	d.mu.Unlock()
	d.goRun(ctx, cancel, r, b, req, c)
}

// crashAt kills the daemon at step when RESIDENTD_CRASH_AT names it: the
// restart tests stop a real daemon at each step of a turn. Off (one
// environment lookup) otherwise.
func crashAt(step string) {
	if crashStep != "" && crashStep == step {
		_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
		select {} // the signal is on its way
	}
}

var crashStep = os.Getenv("RESIDENTD_CRASH_AT")
