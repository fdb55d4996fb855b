package store

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"

	bolt "go.etcd.io/bbolt"

	"github.com/residentd/residentd/apitype"
)

// migrateExactSpend (version 6) turns every day's budget spending from a
// binary float into exact micro-units (apitype.Amount), rounded to the
// nearest one: a total such as 1.2000000000000002 becomes 1.2.
func migrateExactSpend(tx *bolt.Tx) error {
	b := tx.Bucket(bucketSpend)
	if b == nil {
		return fmt.Errorf("no %s bucket", bucketSpend)
	}
	type update struct{ k, v []byte }
	var updates []update
	// Collected first: writing under a live cursor can skip keys.
	if err := b.ForEach(func(k, v []byte) error {
		if len(v) != 8 {
			return fmt.Errorf("spend %x: %d bytes, want 8", k, len(v))
		}
		f := math.Float64frombits(binary.BigEndian.Uint64(v))
		if math.IsNaN(f) || math.IsInf(f, 0) || math.Abs(f) > math.MaxInt64/apitype.AmountScale {
			return fmt.Errorf("spend %x: %v is not an amount", k, f)
		}
		updates = append(updates, update{bytes.Clone(k), u64(uint64(apitype.AmountOf(f)))})
		return nil
	}); err != nil {
		return err
	}
	for _, u := range updates {
		if err := b.Put(u.k, u.v); err != nil {
			return err
		}
	}
	return nil
}
