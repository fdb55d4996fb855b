package store

import (
	"bytes"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	bolt "go.etcd.io/bbolt"

	"github.com/residentd/residentd/internal/channel"
)

// Attachments live in a folder beside the state file (its name with
// ".attachments"), one file per content hash (AttachmentDir/<sha256>), and the state file counts how
// many stored messages carry each (bucket "attachments": hash → count).
// The content stays out of bbolt because every turn that sends it reads it
// whole and an agent that takes it by link or by path line reads the file
// itself: a file has a path to give, a bbolt value has none, and megabytes
// of images in the state file would grow every copy-on-write page it
// touches. The bucket is created on the first push that carries one; a
// file without it reads as one without attachments, so no schema version
// is needed.
var bucketAttachments = []byte("attachments")

// AttachmentDir is the folder the attachments are kept in.
func (s *Store) AttachmentDir() string { return s.path + ".attachments" }

// attachmentPath is where content sum is kept.
func (s *Store) attachmentPath(sum string) string { return filepath.Join(s.AttachmentDir(), sum) }

// withPaths returns m's attachments with their paths and message.
func (s *Store) withPaths(m channel.Message) []channel.Attachment {
	atts := m.Attachments
	for i := range atts {
		atts[i].Path = s.attachmentPath(atts[i].SHA256)
		atts[i].Message, atts[i].Author = m.ID, m.Author
	}
	return atts
}

// validSum reports whether sum is a lowercase hex SHA-256, the only names
// the attachments folder holds.
func validSum(sum string) bool {
	if len(sum) != 64 {
		return false
	}
	_, err := hex.DecodeString(sum)
	return err == nil && sum == string(bytes.ToLower([]byte(sum)))
}

// writeBlobs puts each content not yet kept into the folder: a synced
// temporary file renamed to its hash, so a reader never sees a partial one.
// A file left by a push that then failed is collected at the next Open.
func (s *Store) writeBlobs(blobs map[string][]byte) error {
	if len(blobs) == 0 {
		return nil
	}
	if err := os.MkdirAll(s.AttachmentDir(), 0o700); err != nil {
		return fmt.Errorf("create attachments folder %q: %w", s.AttachmentDir(), err)
	}
	for sum, data := range blobs {
		if !validSum(sum) {
			return fmt.Errorf("attachment content named %q: not a SHA-256", sum)
		}
		path := s.attachmentPath(sum)
		if fi, err := os.Stat(path); err == nil && fi.Size() == int64(len(data)) {
			continue
		}
		if err := writeSynced(path, data); err != nil {
			return fmt.Errorf("write attachment %s: %w", sum, err)
		}
	}
	return nil
}

func writeSynced(path string, data []byte) error {
	f, err := os.CreateTemp(filepath.Dir(path), ".tmp-*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	_, err = f.Write(data)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Chmod(tmp, 0o600)
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		_ = os.Remove(tmp)
	}
	return err
}

// ref adds delta to the count of each attachment of atts and returns the
// hashes no message carries any more. refs is nil when nothing was ever
// attached: a message then carries none to unref.
func ref(refs *bolt.Bucket, atts []channel.Attachment, delta int) (zeroed []string, err error) {
	if len(atts) == 0 {
		return nil, nil
	}
	if refs == nil {
		return nil, fmt.Errorf("message carries attachments but the store counts none")
	}
	for _, a := range atts {
		n := int64(getU64(refs, []byte(a.SHA256))) + int64(delta)
		if n <= 0 {
			if err := refs.Delete([]byte(a.SHA256)); err != nil {
				return nil, err
			}
			zeroed = append(zeroed, a.SHA256)
			continue
		}
		if err := refs.Put([]byte(a.SHA256), u64(uint64(n))); err != nil {
			return nil, err
		}
	}
	return zeroed, nil
}

// dropUnreferenced removes the content of each of sums that no stored
// message carries. The caller holds s.amu, so no push adds a reference
// between the check and the removal.
func (s *Store) dropUnreferenced(sums []string) error {
	if len(sums) == 0 {
		return nil
	}
	var gone []string
	err := s.view(func(tx *bolt.Tx) error {
		refs := tx.Bucket(bucketAttachments)
		for _, sum := range sums {
			if refs == nil || refs.Get([]byte(sum)) == nil {
				gone = append(gone, sum)
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	var errs []error
	for _, sum := range gone {
		if err := os.Remove(s.attachmentPath(sum)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, fmt.Errorf("remove attachment %s: %w", sum, err))
		}
	}
	return errors.Join(errs...)
}

// collectAttachments removes what the folder holds that no message
// carries: content of a push that failed after its files were written, a
// removal cut short by a crash, temporary files.
func (s *Store) collectAttachments() error {
	entries, err := os.ReadDir(s.AttachmentDir())
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("store: list attachments folder %q: %w", s.AttachmentDir(), err)
	}
	var sums []string
	for _, e := range entries {
		if e.IsDir() {
			continue
		}
		if !validSum(e.Name()) {
			_ = os.Remove(filepath.Join(s.AttachmentDir(), e.Name()))
			continue
		}
		sums = append(sums, e.Name())
	}
	s.amu.Lock()
	defer s.amu.Unlock()
	if err := s.dropUnreferenced(sums); err != nil {
		return fmt.Errorf("store: collect attachments: %w", err)
	}
	return nil
}

// AttachmentRefs is how many stored messages carry content sum.
func (s *Store) AttachmentRefs(sum string) (int, error) {
	n := 0
	err := s.view(func(tx *bolt.Tx) error {
		if refs := tx.Bucket(bucketAttachments); refs != nil {
			n = int(getU64(refs, []byte(sum)))
		}
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("store: attachment %s: %w", sum, err)
	}
	return n, nil
}
