package store

import (
	"errors"
	"fmt"
	"runtime/debug"

	bolt "go.etcd.io/bbolt"
)

// ErrDamaged classifies a state file whose pages bbolt cannot read: a
// refusal at Open, or a transaction that panicked (bbolt panics, or faults,
// on a corrupt page). The cure is `residentd repair`.
var ErrDamaged = errors.New("state file is damaged")

// view runs fn in a read transaction. A panic in it — bbolt's on a corrupt
// page, or a fault on a page id past the mapping — is the caller's error
// wrapping ErrDamaged, so one bad page fails the request that read it
// instead of the daemon.
func (s *Store) view(fn func(*bolt.Tx) error) (err error) {
	// A corrupt page id can point past the file: the fault becomes a panic
	// this goroutine recovers instead of ending the process.
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if p := recover(); p != nil {
			err = s.damaged("read", p)
		}
	}()
	return s.db.View(fn)
}

// damaged counts a transaction that panicked, tells the owner, and returns
// the error its caller gets.
func (s *Store) damaged(what string, p any) error {
	s.damage.Add(1)
	err := fmt.Errorf("store: %s in %q panicked: %v: %w (stop residentd and run \"residentd repair %s\")",
		what, s.path, p, ErrDamaged, s.path)
	if s.opts.OnDamage != nil {
		s.opts.OnDamage(err)
	}
	return err
}

// Damage reports how many transactions panicked since the store was
// opened: each one is a read or write that met a page it could not read.
func (s *Store) Damage() int64 { return s.damage.Load() }
