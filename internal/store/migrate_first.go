package store

import (
	"bytes"
	"encoding/json"
	"fmt"

	bolt "go.etcd.io/bbolt"
)

// migrateFirstArrivals (version 5) records for every stored message the
// arrival of its first version, in the message and in its arrivals index
// value, so a session can tell an edit of a message it saw from a message
// it never saw. A message never edited first arrived as its current
// version. For one edited before this version the first arrival was not
// kept: it is taken as 1, the channel's first, so a session with any
// watermark is told it is an edit, as residentd told every session before.
func migrateFirstArrivals(tx *bolt.Tx) error {
	return tx.Bucket(bucketChannels).ForEachBucket(func(name []byte) error {
		cb := openChannel(tx, string(name))
		if cb == nil || cb.msgs == nil || cb.arrivals == nil {
			return fmt.Errorf("channel %q: missing its buckets", name)
		}
		type update struct{ mk, v []byte }
		var updates []update
		// Collected first: writing under a live cursor can skip keys.
		if err := cb.msgs.ForEach(func(k, v []byte) error {
			updates = append(updates, update{bytes.Clone(k), bytes.Clone(v)})
			return nil
		}); err != nil {
			return err
		}
		for _, u := range updates {
			m, err := cb.message(u.mk)
			if err != nil {
				return fmt.Errorf("channel %q: %w", name, err)
			}
			if m.First == 0 {
				m.First = m.Seq
				if m.Edited {
					m.First = 1
				}
			}
			v, err := json.Marshal(m)
			if err != nil {
				return err
			}
			if err := cb.msgs.Put(u.mk, v); err != nil {
				return err
			}
			if err := cb.arrivals.Put(arrivalKey(m), arrival(m, u.mk)); err != nil {
				return fmt.Errorf("channel %q message %q: %w", name, m.ID, err)
			}
		}
		return nil
	})
}
