package daemon

import (
	"cmp"
	"encoding/json"
	"fmt"
	"slices"

	"go.uber.org/zap"

	"github.com/residentd/residentd/apitype"
	"github.com/residentd/residentd/internal/run"
	"github.com/residentd/residentd/internal/store"
)

// resume picks up the runs the state file holds from an earlier daemon:
// ended ones are readable again; the others enter their keys' lanes in the
// order they were accepted, all of them before any runs, so each key's
// mentions keep their order: queued ones run, interrupted ones end
// interrupted or run again.
func (d *Daemon) resume() error {
	recs, err := d.st.Runs()
	if err != nil {
		return err
	}
	cut, keep := d.retention()
	ended, old := 0, false
	for _, rec := range recs {
		d.accepted.Store(max(d.accepted.Load(), rec.Seq))
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
	// Records written before runs were numbered have Seq 0: they were
	// accepted before any numbered one, in the order they were created.
	slices.SortStableFunc(recs, func(a, b store.RunRecord) int {
		return cmp.Or(cmp.Compare(a.Seq, b.Seq), a.Created.Compare(b.Created))
	})
	var todo []*turn
	for _, rec := range recs {
		switch {
		case !rec.Ended.IsZero() && rec.Ended.After(cut):
			if _, err := d.restoreEnded(rec); err != nil {
				d.log.Error("restore a recorded run", zap.String("run", rec.ID), zap.Error(err))
			}
		case rec.Ended.IsZero():
			if t := d.resumed(rec); t != nil {
				todo = append(todo, t)
			}
		}
	}
	for _, t := range todo {
		go t.run()
	}
	return nil
}

// resumed restores one run that had not ended and returns its turn, in
// its key's lane; nil when it ends here (interrupted and not retried, or
// its binding is gone).
func (d *Daemon) resumed(rec store.RunRecord) *turn {
	var req apitype.TurnRequest
	if err := json.Unmarshal(rec.Request, &req); err != nil {
		d.log.Error("a recorded run's request does not read; it is dropped", zap.String("run", rec.ID), zap.Error(err))
		return nil
	}
	r, err := d.runs.Restore(rec.ID, d.keyOf(req), req.MessageID, fingerprint(req), rec.Created, rec.Attempt, raw(rec.Events))
	if err != nil {
		d.log.Error("restore a recorded run", zap.String("run", rec.ID), zap.Error(err))
		return nil
	}
	log := d.log.With(zap.String("run", rec.ID), zap.Stringer("key", r.Key))
	b, ok := d.conf().Binding(req.Binding)
	var gone error
	switch {
	case rec.Running && !(ok && b.RetryOn()):
		r.Emit(apitype.Event{Event: apitype.EventInterrupted, Attempt: rec.Attempt})
		gone = fmt.Errorf("%w: attempt %d of run %q was in flight when the daemon stopped", ErrInterrupted, rec.Attempt, rec.ID)
		log.Info("run interrupted by the restart; not retried", zap.Int("attempt", rec.Attempt))
	case rec.Running:
		r.Emit(apitype.Event{Event: apitype.EventInterrupted, Attempt: rec.Attempt})
		log.Info("run interrupted by the restart; retrying", zap.Int("attempt", rec.Attempt+1))
	default:
		log.Info("run queued before the restart; running it")
	}
	if gone == nil && !ok {
		gone = fmt.Errorf("%w %q: configured bindings are %v", ErrUnknownBinding, req.Binding, d.conf().BindingIDs())
	}
	if gone != nil {
		t := &turn{d: d, r: r, req: req, rec: rec}
		last := t.finish(apitype.Event{}, gone)
		r.Finish(last, gone)
		return nil
	}
	// The attempt after a restart is a trace of its own, in the client's.
	t, err := d.newTurn(req, b, func(tr run.Trace) (*run.Run, error) {
		r.SetTrace(tr)
		return r, nil
	})
	if err != nil {
		d.log.Error("resume a recorded run", zap.String("run", rec.ID), zap.Error(err))
		return nil
	}
	t.rec = rec
	t.lane.enter(t, nil)
	return t
}
