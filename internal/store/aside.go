package store

import (
	"encoding/json"
	"fmt"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/residentd/residentd/internal/channel"
	"github.com/residentd/residentd/internal/session"
)

// keyAside is a conversation's set-aside session (an Aside, as JSON).
var keyAside = []byte("aside")

// Aside is a key's saved native session that a restore gave up on without
// the agent saying it is gone (its requests timed out, or failed another
// way): kept for the key's next restore, which tries it first, while a new
// session (a stand-in) is the key's native id meanwhile. One at most per
// key: the first set aside, the one that holds the most of the
// conversation natively. It keeps the session's watermarks as they were.
type Aside struct {
	Native string `json:"native"`
	// Since is the conversation's turn sequence when it was set aside: the
	// session holds the stored turns up to it; those after it (TurnsSince)
	// its stand-ins answered.
	Since  uint64    `json:"since"`
	At     time.Time `json:"at"`     // when it was first set aside
	Reason string    `json:"reason"` // why the last restore gave it up
	// Tries counts the restores in a row that gave it up.
	Tries int `json:"tries"`
	// Watermarks are the session's own when it was set aside, by thread
	// ("" the main timeline): a stand-in's turns replace the key's records,
	// and the session reopened gets these back (InheritWatermarks).
	Watermarks map[string]channel.Watermark `json:"watermarks,omitempty"`
}

// Aside returns key k's set-aside session; false when it has none.
func (s *Store) Aside(k session.Key) (Aside, bool, error) {
	var a Aside
	var ok bool
	err := s.view(func(tx *bolt.Tx) error {
		var err error
		a, ok, err = asideIn(tx, k)
		return err
	})
	if err != nil {
		return Aside{}, false, fmt.Errorf("store: set-aside session of %q: %w", k, err)
	}
	return a, ok, nil
}

func asideIn(tx *bolt.Tx, k session.Key) (Aside, bool, error) {
	kb := tx.Bucket(bucketConversations).Bucket(convName(k))
	if kb == nil {
		return Aside{}, false, nil
	}
	v := kb.Get(keyAside)
	if v == nil {
		return Aside{}, false, nil
	}
	var a Aside
	if err := json.Unmarshal(v, &a); err != nil {
		return Aside{}, false, fmt.Errorf("decode: %w", err)
	}
	return a, true, nil
}

// SetAside records that a restore of key k gave up on native, saying why:
// set aside with the conversation's position now, or, when it is aside
// already, one try more. A key that has another session aside keeps that
// one. It returns the key's set-aside session as it now is.
func (s *Store) SetAside(k session.Key, native, reason string, at time.Time) (Aside, error) {
	if err := k.Check(); err != nil {
		return Aside{}, fmt.Errorf("store: set aside: %w", err)
	}
	if native == "" {
		return Aside{}, fmt.Errorf("store: set aside a session of %q: no native session id", k)
	}
	var out Aside
	err := s.update(func(tx *bolt.Tx) error {
		a, ok, err := asideIn(tx, k)
		if err != nil {
			return err
		}
		switch {
		case ok && a.Native != native:
			out = a
			return nil
		case ok:
			a.Tries++
			a.Reason = reason
		default:
			a = Aside{Native: native, At: at, Reason: reason, Tries: 1}
		}
		kb, err := tx.Bucket(bucketConversations).CreateBucketIfNotExists(convName(k))
		if err != nil {
			return err
		}
		if !ok {
			if turns := kb.Bucket(keyTurns); turns != nil {
				a.Since = turns.Sequence()
			}
			if a.Watermarks, err = ownWatermarks(tx, k, native); err != nil {
				return err
			}
		}
		v, err := json.Marshal(a)
		if err != nil {
			return err
		}
		out = a
		return kb.Put(keyAside, v)
	})
	if err != nil {
		return Aside{}, fmt.Errorf("store: set aside session %q of %q: %w", native, k, err)
	}
	return out, nil
}

// DropAside forgets key k's set-aside session if it is native (the agent
// said it does not know it, or restores gave it up too often).
func (s *Store) DropAside(k session.Key, native string) error {
	err := s.update(func(tx *bolt.Tx) error {
		kb := tx.Bucket(bucketConversations).Bucket(convName(k))
		if kb == nil {
			return nil
		}
		return dropAside(kb, native)
	})
	if err != nil {
		return fmt.Errorf("store: drop set-aside session %q of %q: %w", native, k, err)
	}
	return nil
}

// dropAside deletes kb's set-aside session if it is native.
func dropAside(kb *bolt.Bucket, native string) error {
	v := kb.Get(keyAside)
	if v == nil {
		return nil
	}
	var a Aside
	if err := json.Unmarshal(v, &a); err == nil && a.Native != native {
		return nil
	}
	return kb.Delete(keyAside)
}

// TurnsSince counts key k's stored turns after turn sequence since (an
// Aside's Since): those a session set aside then has not seen.
func (s *Store) TurnsSince(k session.Key, since uint64) (int, error) {
	n := 0
	err := s.view(func(tx *bolt.Tx) error {
		kb := tx.Bucket(bucketConversations).Bucket(convName(k))
		if kb == nil {
			return nil
		}
		turns := kb.Bucket(keyTurns)
		if turns == nil {
			return nil
		}
		c := turns.Cursor()
		for key, _ := c.Seek(u64(since + 1)); key != nil; key, _ = c.Next() {
			n++
		}
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("store: turns of %q since %d: %w", k, since, err)
	}
	return n, nil
}
