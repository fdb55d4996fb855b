package store

import (
	"bytes"
	"encoding/json"
	"fmt"

	bolt "go.etcd.io/bbolt"

	"github.com/residentd/residentd/internal/channel"
)

// WatermarkKey names one watermark: what a session has seen of a channel
// or of one thread in it. Session is a session key such as Key.Session().
type WatermarkKey struct {
	Session string `json:"session"`
	Channel string `json:"channel"`
	Thread  string `json:"thread,omitempty"`
}

func (wk WatermarkKey) encode() []byte { return joinKey(wk.Session, wk.Channel, wk.Thread) }

func (wk WatermarkKey) String() string {
	if wk.Thread == "" {
		return fmt.Sprintf("%s@%s", wk.Session, wk.Channel)
	}
	return fmt.Sprintf("%s@%s/%s", wk.Session, wk.Channel, wk.Thread)
}

// Watermark returns the stored record and whether there was one. It does not
// compare natives: callers decide whether the record belongs to their process.
func (s *Store) Watermark(wk WatermarkKey) (channel.Watermark, bool, error) {
	var (
		w     channel.Watermark
		found bool
	)
	err := s.db.View(func(tx *bolt.Tx) error {
		var err error
		w, found, err = getWatermark(tx, wk)
		return err
	})
	if err != nil {
		return channel.Watermark{}, false, fmt.Errorf("store: watermark %q: %w", wk, err)
	}
	return w, found, nil
}

func getWatermark(tx *bolt.Tx, wk WatermarkKey) (channel.Watermark, bool, error) {
	var w channel.Watermark
	v := tx.Bucket(bucketWatermarks).Get(wk.encode())
	if v == nil {
		return w, false, nil
	}
	if err := json.Unmarshal(v, &w); err != nil {
		return w, false, err
	}
	return w, true, nil
}

// CommitWatermark moves the watermark past seen for native session native
// (replacing a record of another native) in one read-modify-write
// transaction, and returns the stored result.
func (s *Store) CommitWatermark(wk WatermarkKey, native string, seen channel.Seen) (channel.Watermark, error) {
	if wk.Session == "" || wk.Channel == "" {
		return channel.Watermark{}, fmt.Errorf("store: commit watermark %q: session and channel must be set", wk)
	}
	var out channel.Watermark
	err := s.db.Update(func(tx *bolt.Tx) error {
		cur, _, err := getWatermark(tx, wk)
		if err != nil {
			return err
		}
		out = cur.Advance(native, seen, s.opts.MaxWatermarkIDs)
		v, err := json.Marshal(out)
		if err != nil {
			return err
		}
		return tx.Bucket(bucketWatermarks).Put(wk.encode(), v)
	})
	if err != nil {
		return channel.Watermark{}, fmt.Errorf("store: commit watermark %q: %w", wk, err)
	}
	return out, nil
}

// DeleteWatermark drops one watermark; a missing one is not an error.
func (s *Store) DeleteWatermark(wk WatermarkKey) error {
	err := s.db.Update(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketWatermarks).Delete(wk.encode())
	})
	if err != nil {
		return fmt.Errorf("store: delete watermark %q: %w", wk, err)
	}
	return nil
}

// deleteWatermarksOf drops every watermark filed under session.
func deleteWatermarksOf(tx *bolt.Tx, session string) error {
	b := tx.Bucket(bucketWatermarks)
	prefix := joinKey(session)
	// Collect first: deleting under a live cursor can skip keys.
	var doomed [][]byte
	c := b.Cursor()
	for k, _ := c.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix); k, _ = c.Next() {
		doomed = append(doomed, bytes.Clone(k))
	}
	for _, k := range doomed {
		if err := b.Delete(k); err != nil {
			return err
		}
	}
	return nil
}
