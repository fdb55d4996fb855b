package store

import (
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"

	bolt "go.etcd.io/bbolt"

	"github.com/residentd/residentd/internal/session"
)

// queued reports how many writes wait for the next group transaction.
func (s *Store) queued() int {
	s.gmu.Lock()
	defer s.gmu.Unlock()
	return len(s.pending)
}

// holdTransaction starts a write whose transaction stays open until the
// returned release is called, so that writes started meanwhile queue.
func holdTransaction(t *testing.T, s *Store) (release func() error) {
	t.Helper()
	inside, proceed, done := make(chan struct{}), make(chan struct{}), make(chan error, 1)
	go func() {
		done <- s.update(func(tx *bolt.Tx) error {
			close(inside)
			<-proceed
			return nil
		})
	}()
	<-inside
	return func() error {
		close(proceed)
		return <-done
	}
}

// waitQueued blocks until n writes wait; each caller queues before it
// blocks, and the group transaction cannot start while the held one runs.
func waitQueued(t *testing.T, s *Store, n int, wrote <-chan error) {
	t.Helper()
	for s.queued() < n {
		select {
		case err := <-wrote:
			t.Fatalf("a write finished while the transaction was held: %v", err)
		default:
		}
		runtime.Gosched()
	}
}

// TestWritesShareATransaction: writes on different keys that arrive while
// a transaction commits go in the next one together, each durable when it
// returns; a lone write is one transaction of its own.
func TestWritesShareATransaction(t *testing.T) {
	s := openTest(t, Options{})
	k := func(i int) session.Key { return session.Key{Channel: fmt.Sprintf("ch-%d", i), Binding: "b"} }
	if err := s.AppendTurns(k(0), session.Turn{Role: session.RoleUser, Text: "alone"}); err != nil {
		t.Fatal(err)
	}
	if c, w := s.Commits(), s.Writes(); c != 1 || w != 1 {
		t.Fatalf("a lone write: %d commits, %d writes; want 1 and 1", c, w)
	}

	release := holdTransaction(t, s)
	const n = 8
	wrote := make(chan error, n)
	for i := 1; i <= n; i++ {
		go func() {
			wrote <- s.AppendTurns(k(i), session.Turn{Role: session.RoleUser, Text: fmt.Sprint("turn ", i)})
		}()
	}
	waitQueued(t, s, n, wrote)
	if err := release(); err != nil {
		t.Fatal(err)
	}
	for range n {
		if err := <-wrote; err != nil {
			t.Fatal(err)
		}
	}
	// 1 alone, 1 held, 1 for the eight that queued behind it.
	if c, w := s.Commits(), s.Writes(); c != 3 || w != n+2 {
		t.Fatalf("%d commits for %d writes; want 3 commits for %d", c, w, n+2)
	}
	for i := 1; i <= n; i++ {
		turns, err := s.Conversation(k(i))
		if err != nil || len(turns) != 1 || turns[0].Text != fmt.Sprint("turn ", i) {
			t.Fatalf("key %d after the group commit: %+v (err %v)", i, turns, err)
		}
	}
}

// TestFailedWriteSparesItsGroup: a write that fails inside a shared
// transaction gets its own error; the others commit without it.
func TestFailedWriteSparesItsGroup(t *testing.T) {
	s := openTest(t, Options{})
	release := holdTransaction(t, s)
	errBad := errors.New("bad write")
	var mu sync.Mutex
	runs := map[int]int{}
	wrote := make(chan error, 3)
	results := make([]chan error, 3)
	for i := range 3 {
		results[i] = make(chan error, 1)
		go func() {
			err := s.update(func(tx *bolt.Tx) error {
				mu.Lock()
				runs[i]++
				mu.Unlock()
				b, err := tx.CreateBucketIfNotExists([]byte("group-test"))
				if err != nil {
					return err
				}
				if err := b.Put([]byte{byte('a' + i)}, []byte("v")); err != nil {
					return err
				}
				if i == 1 {
					return errBad
				}
				return nil
			})
			results[i] <- err
			wrote <- err
		}()
	}
	waitQueued(t, s, 3, wrote)
	if err := release(); err != nil {
		t.Fatal(err)
	}
	for i, want := range []error{nil, errBad, nil} {
		if err := <-results[i]; !errors.Is(err, want) {
			t.Fatalf("write %d: err %v, want %v", i, err, want)
		}
	}
	err := s.db.View(func(tx *bolt.Tx) error {
		b := tx.Bucket([]byte("group-test"))
		for i, want := range []bool{true, false, true} {
			if got := b.Get([]byte{byte('a' + i)}) != nil; got != want {
				return fmt.Errorf("write %d stored = %v, want %v", i, got, want)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if c, w := s.Commits(), s.Writes(); c != 2 || w != 3 {
		t.Fatalf("%d commits, %d writes; want 2 (held, the two good ones) and 3", c, w)
	}
	// The group runs in arrival order up to the bad write, then again
	// without it: the bad one runs once, a good one once or twice.
	if runs[1] != 1 || runs[0] < 1 || runs[0] > 2 || runs[2] < 1 || runs[2] > 2 {
		t.Fatalf("fn runs %v: want the bad write run once and each good one once or twice", runs)
	}
}

// TestPanicInAWriteReleasesTheGroup: a write that panics inside the
// transaction (bbolt does on a corrupt page) fails with an error, its
// neighbour commits, and later writes go on: nobody waits forever.
func TestPanicInAWriteReleasesTheGroup(t *testing.T) {
	s := openTest(t, Options{})
	release := holdTransaction(t, s)
	wrote := make(chan error, 2)
	go func() { wrote <- s.update(func(tx *bolt.Tx) error { panic("corrupt page") }) }()
	waitQueued(t, s, 1, wrote)
	go func() {
		wrote <- s.AppendTurns(session.Key{Channel: "ch", Binding: "b"}, session.Turn{Role: session.RoleUser, Text: "neighbour"})
	}()
	waitQueued(t, s, 2, wrote)
	if err := release(); err != nil {
		t.Fatal(err)
	}
	var panicked, ok int
	for range 2 {
		switch err := <-wrote; {
		case err == nil:
			ok++
		case strings.Contains(err.Error(), "panicked: corrupt page"):
			panicked++
		default:
			t.Fatal(err)
		}
	}
	if panicked != 1 || ok != 1 {
		t.Fatalf("%d writes failed with the panic, %d went in; want the panicking one failed and its neighbour stored", panicked, ok)
	}
	// The store takes writes again.
	if err := s.AppendTurns(session.Key{Channel: "ch", Binding: "b"}, session.Turn{Role: session.RoleUser, Text: "after"}); err != nil {
		t.Fatal(err)
	}
}
