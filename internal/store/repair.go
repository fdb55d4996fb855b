package store

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"time"

	bolt "go.etcd.io/bbolt"
)

// RepairReport is what Repair did.
type RepairReport struct {
	Path    string       // the state file, now the repaired copy
	Kept    string       // where the damaged file was moved
	Found   *CheckReport // what the scan of the damaged file read and lost
	Records int          // records copied
	Buckets int          // buckets copied (nested ones included)
}

// repairBatch is how many records one transaction of the copy carries.
const repairBatch = 50000

// Repair copies every record a scan of the file at path can read into a
// new file beside it (path + ".repair" while it is written), then moves
// the damaged file to path + ".damaged-<UTC time>" and the copy to path,
// so the next start opens the copy and the damaged file stays for a look.
// Records on pages the scan could not use are lost; the report says which
// pages of which buckets, and how many records their headers held. A file
// without an intact meta page is left as it is and is an error. The file
// must not be open in a running residentd (ErrLocked).
func Repair(path string, lockTimeout time.Duration) (*RepairReport, error) {
	if lockTimeout <= 0 {
		lockTimeout = DefaultLockTimeout
	}
	f, size, err := openLocked(path, syscall.LOCK_EX, lockTimeout, "repair", "repair")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	tmp := path + ".repair"
	if err := os.Remove(tmp); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("store: repair %q: remove the copy a failed repair left: %w", path, err)
	}
	// The copy is synced once at the end, not per batch: until it is
	// renamed into place it is only a scratch file.
	db, err := bolt.Open(tmp, 0o600, &bolt.Options{Timeout: lockTimeout, NoSync: true, FreelistType: bolt.FreelistMapType})
	if err != nil {
		return nil, fmt.Errorf("store: repair %q: create %q: %w", path, tmp, err)
	}
	c := &copier{db: db}
	found, err := scanOpen(f, size, path, c)
	if err == nil {
		err = c.commit()
	}
	if err == nil {
		err = db.Sync()
	}
	_ = c.rollback() // what a failed scan or commit left open
	if cerr := db.Close(); err == nil && cerr != nil {
		err = cerr
	}
	if err != nil {
		os.Remove(tmp)
		return nil, fmt.Errorf("store: repair %q (nothing was changed): %w", path, err)
	}
	kept := path + ".damaged-" + time.Now().UTC().Format("20060102T150405Z")
	if err := os.Rename(path, kept); err != nil {
		os.Remove(tmp)
		return nil, fmt.Errorf("store: repair %q (nothing was changed): keep the damaged file: %w", path, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return nil, fmt.Errorf("store: repair %q: the repaired copy is %q and the damaged file %q; rename the copy to the path by hand: %w", path, tmp, kept, err)
	}
	if d, err := os.Open(filepath.Dir(path)); err == nil {
		_ = d.Sync() // the renames survive a crash
		d.Close()
	}
	return &RepairReport{Path: path, Kept: kept, Found: found, Records: c.records, Buckets: c.buckets}, nil
}

// copier writes what a scan reads into a new bbolt file, repairBatch
// records a transaction.
type copier struct {
	db      *bolt.DB
	tx      *bolt.Tx
	n       int // records in tx
	path    [][]byte
	b       *bolt.Bucket // the bucket at path in tx
	records int
	buckets int
}

func (c *copier) begin() error {
	if c.tx != nil {
		return nil
	}
	tx, err := c.db.Begin(true)
	if err != nil {
		return err
	}
	c.tx, c.b, c.path = tx, nil, nil
	return nil
}

func (c *copier) commit() error {
	if c.tx == nil {
		return nil
	}
	err := c.tx.Commit()
	c.tx, c.b, c.path, c.n = nil, nil, nil, 0
	return err
}

func (c *copier) rollback() error {
	if c.tx == nil {
		return nil
	}
	err := c.tx.Rollback()
	c.tx = nil
	return err
}

// at returns the bucket at path in the current transaction, creating it
// and its parents.
func (c *copier) at(path [][]byte) (*bolt.Bucket, error) {
	if c.b != nil && samePath(c.path, path) {
		return c.b, nil
	}
	b, err := c.tx.CreateBucketIfNotExists(path[0])
	for _, name := range path[1:] {
		if err != nil {
			break
		}
		b, err = b.CreateBucketIfNotExists(name)
	}
	if err != nil {
		return nil, fmt.Errorf("create bucket %q: %w", pathString(path), err)
	}
	c.b, c.path = b, path
	return b, nil
}

func (c *copier) bucket(path [][]byte, seq uint64) error {
	if err := c.begin(); err != nil {
		return err
	}
	b, err := c.at(path)
	if err != nil {
		return err
	}
	c.buckets++
	return b.SetSequence(seq)
}

func (c *copier) record(path [][]byte, k, v []byte) error {
	if err := c.begin(); err != nil {
		return err
	}
	b, err := c.at(path)
	if err != nil {
		return err
	}
	// The scan's page buffers are not reused, so k and v stay valid
	// until the commit as bbolt requires.
	if err := b.Put(k, v); err != nil {
		return fmt.Errorf("copy record %q of bucket %q: %w", k, pathString(path), err)
	}
	c.records++
	if c.n++; c.n >= repairBatch {
		return c.commit()
	}
	return nil
}

func samePath(a, b [][]byte) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if !bytes.Equal(a[i], b[i]) {
			return false
		}
	}
	return true
}
