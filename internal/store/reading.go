package store

import (
	"fmt"
	"runtime/debug"

	bolt "go.etcd.io/bbolt"

	"github.com/residentd/residentd/internal/channel"
	"github.com/residentd/residentd/internal/session"
)

// Reading is one read transaction that several reads share: a turn's
// compose reads what its key's session saw, then the timeline's unseen
// messages (and for some shapes the conversation), from one snapshot
// instead of a transaction each. It has the Store's read methods of the
// same names, with the same answers and errors; each is guarded as a read
// transaction is (a panic in it is its caller's ErrDamaged). It is valid
// only inside the function Read gives it to.
type Reading struct {
	s  *Store
	tx *bolt.Tx
}

// Read runs fn with a Reading of one read transaction, closed when fn
// returns.
func (s *Store) Read(fn func(*Reading) error) error {
	var tx *bolt.Tx
	err := s.guard(func() (err error) {
		tx, err = s.db.Begin(false)
		return err
	})
	if err != nil {
		return fmt.Errorf("store: begin a read: %w", err)
	}
	defer tx.Rollback()
	return fn(&Reading{s: s, tx: tx})
}

// guard runs fn as view runs a read transaction: a panic or a fault in it
// is an error wrapping ErrDamaged.
func (s *Store) guard(fn func() error) (err error) {
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if p := recover(); p != nil {
			err = s.damaged("read", p)
		}
	}()
	return fn()
}

// Seen is Store.Seen in r's transaction.
func (r *Reading) Seen(k session.Key, thread string) (wm, main *channel.Watermark, err error) {
	err = r.s.guard(func() error {
		wm, main, err = seen(r.tx, k, thread)
		return err
	})
	if err != nil {
		return nil, nil, fmt.Errorf("store: watermarks of %q (thread %q): %w", k, thread, err)
	}
	return wm, main, nil
}

// Conversation is Store.Conversation in r's transaction.
func (r *Reading) Conversation(k session.Key) ([]session.Turn, error) {
	var out []session.Turn
	err := r.s.guard(func() (err error) {
		out, err = conversation(r.tx, k)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("store: conversation of %q: %w", k, err)
	}
	return out, nil
}

// Unseen is Store.Unseen in r's transaction.
func (r *Reading) Unseen(ch, thread string, after uint64, also, known []string, pick func([]channel.Candidate) []int) (channel.View, error) {
	var v channel.View
	err := r.s.guard(func() (err error) {
		v, err = r.s.unseen(r.tx, ch, thread, after, also, known, pick)
		return err
	})
	if err != nil {
		return channel.View{}, fmt.Errorf("store: unseen messages of channel %q thread %q after %d: %w", ch, thread, after, err)
	}
	return v, nil
}
