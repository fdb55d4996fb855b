package store

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/residentd/residentd/internal/jsonenc"
)

// Since schema version 7 (see migrateRuns).
var (
	bucketRuns      = []byte("runs")
	bucketRunsEnded = []byte("runs_ended")
)

// RunRecord is a run as the state file keeps it, so that a restarted
// daemon knows every run id it accepted: a queued run runs, a run that was
// in flight ends interrupted (and may run again as a new attempt), an
// ended one is returned to a client that resubmits its id.
type RunRecord struct {
	ID      string          `json:"id"`
	Request json.RawMessage `json:"request"` // the turn request as accepted
	Created time.Time       `json:"created"`
	// Seq numbers the runs in the order they were accepted (1, 2, ...;
	// 0 in a record written before it was kept): a restart runs a key's
	// runs in this order.
	Seq uint64 `json:"seq,omitempty"`
	// Attempt is the number of attempts started: 0 while the run has not
	// started. Running says attempt Attempt was started and has not ended:
	// its agent may have been prompted.
	Attempt int  `json:"attempt"`
	Running bool `json:"running,omitempty"`
	// Events are the run's logged events as of this record (JSON lines,
	// without their newline), its result last once Ended is set.
	Events []json.RawMessage `json:"events,omitempty"`
	Ended  time.Time         `json:"ended,omitzero"`
}

func (r RunRecord) check() error {
	if r.ID == "" {
		return fmt.Errorf("run record without an id")
	}
	return nil
}

// endedKey is <ended_at><id>: the index that finds the oldest ended runs.
func (r RunRecord) endedKey() []byte {
	return append(timeKey(r.Ended), r.ID...)
}

// PutRun records run r, replacing what was recorded for its id, in its own
// transaction (shared with concurrent writes).
func (s *Store) PutRun(r RunRecord) error {
	if err := r.check(); err != nil {
		return fmt.Errorf("store: put run: %w", err)
	}
	if err := s.update(func(tx *bolt.Tx) error { return putRun(tx, &r) }); err != nil {
		return fmt.Errorf("store: put run %q: %w", r.ID, err)
	}
	return nil
}

// putRun writes r, and indexes it by its end when it ended. r is a
// pointer so that Marshal boxes no copy of it.
func putRun(tx *bolt.Tx, r *RunRecord) error {
	b := tx.Bucket(bucketRuns)
	if b == nil {
		return fmt.Errorf("bucket %q missing", bucketRuns)
	}
	v, err := marshalRun(r)
	if err != nil {
		return err
	}
	if err := b.Put([]byte(r.ID), v); err != nil {
		return err
	}
	if !r.Ended.IsZero() {
		return tx.Bucket(bucketRunsEnded).Put(r.endedKey(), nil)
	}
	return nil
}

// marshalRun is json.Marshal(r), byte for byte: a run record is written
// twice on every turn, and Marshal's reflection, its copy of the result
// and its encoding of each time were a dozen allocations of them. A
// record whose raw parts Marshal would rewrite (not compact, or with
// characters it escapes for HTML) or refuse goes to Marshal itself.
func marshalRun(r *RunRecord) ([]byte, error) {
	n := 128 + len(r.ID) + len(r.Request)
	if !jsonenc.Plain(r.Request) {
		return json.Marshal(r)
	}
	for _, e := range r.Events {
		if !jsonenc.Plain(e) {
			return json.Marshal(r)
		}
		n += len(e) + 1
	}
	b := make([]byte, 0, n)
	b = append(b, `{"id":`...)
	b = jsonenc.AppendString(b, r.ID)
	b = append(b, `,"request":`...)
	b = append(b, r.Request...)
	b = append(b, `,"created":`...)
	b, ok := jsonenc.AppendTime(b, r.Created)
	if !ok {
		return json.Marshal(r)
	}
	if r.Seq != 0 {
		b = append(b, `,"seq":`...)
		b = strconv.AppendUint(b, r.Seq, 10)
	}
	b = append(b, `,"attempt":`...)
	b = strconv.AppendInt(b, int64(r.Attempt), 10)
	if r.Running {
		b = append(b, `,"running":true`...)
	}
	if len(r.Events) > 0 {
		b = append(b, `,"events":[`...)
		for i, e := range r.Events {
			if i > 0 {
				b = append(b, ',')
			}
			b = append(b, e...)
		}
		b = append(b, ']')
	}
	if !r.Ended.IsZero() {
		b = append(b, `,"ended":`...)
		if b, ok = jsonenc.AppendTime(b, r.Ended); !ok {
			return json.Marshal(r)
		}
	}
	return append(b, '}'), nil
}

// Run reads the record of run id.
func (s *Store) Run(id string) (RunRecord, bool, error) {
	var out RunRecord
	found := false
	err := s.view(func(tx *bolt.Tx) error {
		v := tx.Bucket(bucketRuns).Get([]byte(id))
		if v == nil {
			return nil
		}
		found = true
		return json.Unmarshal(v, &out)
	})
	if err != nil {
		return RunRecord{}, false, fmt.Errorf("store: read run %q: %w", id, err)
	}
	return out, found, nil
}

// Runs reads every run record, in id order.
func (s *Store) Runs() ([]RunRecord, error) {
	var out []RunRecord
	err := s.view(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketRuns).ForEach(func(k, v []byte) error {
			var r RunRecord
			if err := json.Unmarshal(v, &r); err != nil {
				return fmt.Errorf("run %q: %w", k, err)
			}
			out = append(out, r)
			return nil
		})
	})
	if err != nil {
		return nil, fmt.Errorf("store: read runs: %w", err)
	}
	return out, nil
}

// PruneRuns forgets the ended runs that ended before cut, and the oldest
// ended ones beyond keep. Runs that have not ended are kept.
func (s *Store) PruneRuns(cut time.Time, keep int) (int, error) {
	n := 0
	err := s.update(func(tx *bolt.Tx) error {
		var err error
		n, err = pruneRuns(tx, cut, keep)
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("store: prune runs: %w", err)
	}
	return n, nil
}

func pruneRuns(tx *bolt.Tx, cut time.Time, keep int) (int, error) {
	idx, runs := tx.Bucket(bucketRunsEnded), tx.Bucket(bucketRuns)
	total := idx.Stats().KeyN
	var drop [][]byte
	cutKey := timeKey(cut)
	c := idx.Cursor()
	for k, _ := c.First(); k != nil; k, _ = c.Next() {
		if total-len(drop) <= keep && bytes.Compare(k[:len(cutKey)], cutKey) >= 0 {
			break
		}
		drop = append(drop, bytes.Clone(k))
	}
	for _, k := range drop {
		if err := idx.Delete(k); err != nil {
			return 0, err
		}
		if err := runs.Delete(k[len(cutKey):]); err != nil {
			return 0, err
		}
	}
	return len(drop), nil
}

// migrateRuns (version 7) adds the run records: runs survive a restart.
func migrateRuns(tx *bolt.Tx) error {
	for _, name := range [][]byte{bucketRuns, bucketRunsEnded} {
		if _, err := tx.CreateBucketIfNotExists(name); err != nil {
			return fmt.Errorf("create bucket %q: %w", name, err)
		}
	}
	return nil
}
