package store

import (
	"encoding/json"
	"fmt"

	bolt "go.etcd.io/bbolt"

	"github.com/residentd/residentd/internal/session"
	"github.com/residentd/residentd/internal/workspace"
)

// bucketWorktrees holds each key's git worktree (a binding with workspace
// "worktree"); Open adds it to a file that has none (no migration).
var bucketWorktrees = []byte("worktrees")

// ensureWorktrees adds the worktrees bucket to a file written before it.
func ensureWorktrees(tx *bolt.Tx) error {
	_, err := tx.CreateBucketIfNotExists(bucketWorktrees)
	return err
}

// Worktree returns key k's worktree record, false when it has none.
func (s *Store) Worktree(k session.Key) (workspace.Record, bool, error) {
	var r workspace.Record
	var ok bool
	err := s.view(func(tx *bolt.Tx) error {
		v := tx.Bucket(bucketWorktrees).Get(convName(k))
		if v == nil {
			return nil
		}
		ok = true
		return json.Unmarshal(v, &r)
	})
	if err != nil {
		return workspace.Record{}, false, fmt.Errorf("store: worktree of %q: %w", k, err)
	}
	return r, ok, nil
}

// PutWorktree saves r as its key's worktree record.
func (s *Store) PutWorktree(r workspace.Record) error {
	k := r.Key()
	if err := k.Check(); err != nil {
		return fmt.Errorf("store: put worktree: %w", err)
	}
	v, err := json.Marshal(r)
	if err != nil {
		return fmt.Errorf("store: put worktree of %q: %w", k, err)
	}
	if err := s.update(func(tx *bolt.Tx) error { return tx.Bucket(bucketWorktrees).Put(convName(k), v) }); err != nil {
		return fmt.Errorf("store: put worktree of %q: %w", k, err)
	}
	return nil
}

// ForgetWorktree drops key k's worktree record.
func (s *Store) ForgetWorktree(k session.Key) error {
	if err := s.update(func(tx *bolt.Tx) error { return tx.Bucket(bucketWorktrees).Delete(convName(k)) }); err != nil {
		return fmt.Errorf("store: forget worktree of %q: %w", k, err)
	}
	return nil
}

// Worktrees returns every worktree record, by key.
func (s *Store) Worktrees() ([]workspace.Record, error) {
	var out []workspace.Record
	err := s.view(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketWorktrees).ForEach(func(k, v []byte) error {
			var r workspace.Record
			if err := json.Unmarshal(v, &r); err != nil {
				return fmt.Errorf("worktree %x: %w", k, err)
			}
			out = append(out, r)
			return nil
		})
	})
	if err != nil {
		return nil, fmt.Errorf("store: worktrees: %w", err)
	}
	return out, nil
}

var _ workspace.Records = (*Store)(nil)
