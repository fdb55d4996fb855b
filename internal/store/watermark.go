package store

import (
	"bytes"
	"encoding/json"
	"fmt"

	bolt "go.etcd.io/bbolt"

	"github.com/residentd/residentd/internal/channel"
	"github.com/residentd/residentd/internal/session"
)

// watermarkKey is a watermark's key in the watermarks bucket:
// <session><channel><thread>, with the session key's string form first so
// Forget finds every watermark of a session by prefix.
func watermarkKey(wk channel.WatermarkKey) []byte {
	return joinKey(wk.Key.String(), wk.Key.Channel, wk.Thread)
}

// Watermark returns the stored record and whether there was one. It does not
// compare natives: callers decide whether the record belongs to their process.
func (s *Store) Watermark(wk channel.WatermarkKey) (channel.Watermark, bool, error) {
	var (
		w     channel.Watermark
		found bool
	)
	err := s.view(func(tx *bolt.Tx) error {
		var err error
		w, found, err = getWatermark(tx, wk)
		return err
	})
	if err != nil {
		return channel.Watermark{}, false, fmt.Errorf("store: watermark %q: %w", wk, err)
	}
	return w, found, nil
}

// Seen is what key k's session saw, as a turn's compose needs it, in one
// read: the watermark of timeline thread ("" the main one) and, for a
// thread, the main timeline's (for the main one, main is wm); nil where
// there is none.
func (s *Store) Seen(k session.Key, thread string) (wm, main *channel.Watermark, err error) {
	err = s.view(func(tx *bolt.Tx) error {
		wm, main, err = seen(tx, k, thread)
		return err
	})
	if err != nil {
		return nil, nil, fmt.Errorf("store: watermarks of %q (thread %q): %w", k, thread, err)
	}
	return wm, main, nil
}

// seen is Seen in tx.
func seen(tx *bolt.Tx, k session.Key, thread string) (wm, main *channel.Watermark, err error) {
	get := func(wk channel.WatermarkKey) (*channel.Watermark, error) {
		w, found, err := getWatermark(tx, wk)
		if err != nil || !found {
			return nil, err
		}
		return &w, nil
	}
	if wm, err = get(channel.WatermarkKey{Key: k, Thread: thread}); err != nil {
		return nil, nil, err
	}
	main = wm
	if thread != "" {
		if main, err = get(channel.WatermarkKey{Key: k}); err != nil {
			return nil, nil, err
		}
	}
	return wm, main, nil
}

func getWatermark(tx *bolt.Tx, wk channel.WatermarkKey) (channel.Watermark, bool, error) {
	var w channel.Watermark
	v := tx.Bucket(bucketWatermarks).Get(watermarkKey(wk))
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
func (s *Store) CommitWatermark(wk channel.WatermarkKey, native string, seen channel.Seen) (channel.Watermark, error) {
	if err := wk.Key.Check(); err != nil {
		return channel.Watermark{}, fmt.Errorf("store: commit watermark %q: %w", wk, err)
	}
	var out channel.Watermark
	err := s.update(func(tx *bolt.Tx) error {
		var err error
		out, err = s.commitWatermark(tx, wk, native, seen)
		return err
	})
	if err != nil {
		return channel.Watermark{}, fmt.Errorf("store: commit watermark %q: %w", wk, err)
	}
	return out, nil
}

func (s *Store) commitWatermark(tx *bolt.Tx, wk channel.WatermarkKey, native string, seen channel.Seen) (channel.Watermark, error) {
	cur, _, err := getWatermark(tx, wk)
	if err != nil {
		return channel.Watermark{}, err
	}
	out := cur.Advance(native, seen, s.opts.MaxWatermarkIDs)
	v, err := json.Marshal(out)
	if err != nil {
		return channel.Watermark{}, err
	}
	return out, tx.Bucket(bucketWatermarks).Put(watermarkKey(wk), v)
}

// CommitWatermarks moves every staged watermark for native session native in
// one transaction (lease.Committer).
func (s *Store) CommitWatermarks(native string, staged map[channel.WatermarkKey]channel.Seen) error {
	if len(staged) == 0 {
		return nil
	}
	var k session.Key
	for wk := range staged {
		k = wk.Key
		break
	}
	return s.FinishTurn(k, Finish{Native: native, Staged: staged})
}

// DeleteWatermark drops one watermark; a missing one is not an error.
func (s *Store) DeleteWatermark(wk channel.WatermarkKey) error {
	err := s.update(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketWatermarks).Delete(watermarkKey(wk))
	})
	if err != nil {
		return fmt.Errorf("store: delete watermark %q: %w", wk, err)
	}
	return nil
}

// deleteWatermarksOf drops every watermark filed under key k.
func deleteWatermarksOf(tx *bolt.Tx, k session.Key) error {
	b := tx.Bucket(bucketWatermarks)
	prefix := joinKey(k.String())
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

// ForkSource is what a fork of key k's session starts from, read in one
// transaction so the two agree: k's saved native session id ("" when none)
// and the watermarks that belong to it, by thread ("" the main timeline).
func (s *Store) ForkSource(k session.Key) (native string, wms map[string]channel.Watermark, err error) {
	err = s.view(func(tx *bolt.Tx) error {
		if kb := tx.Bucket(bucketConversations).Bucket(convName(k)); kb != nil {
			native = string(kb.Get(keyNative))
		}
		if native == "" {
			return nil
		}
		var err error
		wms, err = ownWatermarks(tx, k, native)
		return err
	})
	if err != nil {
		return "", nil, fmt.Errorf("store: fork source %q: %w", k, err)
	}
	return native, wms, nil
}

// ownWatermarks are key k's watermarks that belong to native session
// native, by thread ("" the main timeline); nil when none does.
func ownWatermarks(tx *bolt.Tx, k session.Key, native string) (map[string]channel.Watermark, error) {
	var wms map[string]channel.Watermark
	prefix := joinKey(k.String())
	c := tx.Bucket(bucketWatermarks).Cursor()
	for key, v := c.Seek(prefix); key != nil && bytes.HasPrefix(key, prefix); key, v = c.Next() {
		parts, err := splitKey(key[len(prefix):], 2)
		if err != nil {
			return nil, fmt.Errorf("watermark key %x: %w", key, err)
		}
		var w channel.Watermark
		if err := json.Unmarshal(v, &w); err != nil {
			return nil, fmt.Errorf("watermark %x: %w", key, err)
		}
		if own, ok := w.For(native); ok {
			if wms == nil {
				wms = map[string]channel.Watermark{}
			}
			wms[parts[1]] = own
		}
	}
	return wms, nil
}

// InheritWatermarks files wms (by thread, as ForkSource returns them) under
// key k for native session native, in one transaction: a fork's session
// saw what its source had seen when it was forked. Each replaces the
// record of its timeline.
func (s *Store) InheritWatermarks(k session.Key, native string, wms map[string]channel.Watermark) error {
	if err := k.Check(); err != nil {
		return fmt.Errorf("store: inherit watermarks: %w", err)
	}
	if len(wms) == 0 {
		return nil
	}
	err := s.update(func(tx *bolt.Tx) error {
		for th, w := range wms {
			w.Native = native
			v, err := json.Marshal(w)
			if err != nil {
				return err
			}
			if err := tx.Bucket(bucketWatermarks).Put(watermarkKey(channel.WatermarkKey{Key: k, Thread: th}), v); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("store: inherit watermarks of %q for %q: %w", k, native, err)
	}
	return nil
}
