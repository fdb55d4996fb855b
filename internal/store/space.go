package store

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// ErrNoSpace classifies a write the filesystem holding the state file
// refused for lack of space (ENOSPC) or of quota (EDQUOT). Nothing of the
// write is stored: bbolt writes a transaction's meta page last, so a
// commit that fails before it leaves the file as it was, and the next
// write that finds room works. The error wraps the cause too.
var ErrNoSpace = errors.New("no space left for the state file")

// Full is a spell of writes refused for lack of space: from the first
// one until a write is committed again.
type Full struct {
	Since   time.Time // when the first write of the spell was refused
	Refused int64     // writes refused in the spell
	Err     error     // the last refused write's error
}

// Full reports whether the last write was refused for lack of space, and
// the spell of such refusals; the next committed write ends it.
func (s *Store) Full() (Full, bool) {
	s.smu.Lock()
	defer s.smu.Unlock()
	if s.full == nil {
		return Full{}, false
	}
	return *s.full, true
}

// NoSpace reports how many writes were refused for lack of space since
// the store was opened.
func (s *Store) NoSpace() int64 { return s.noSpace.Load() }

// DiskFull reports whether the last write was refused for lack of space
// (Full, for a gauge).
func (s *Store) DiskFull() bool {
	_, ok := s.Full()
	return ok
}

// noSpaceCause reports whether err is the filesystem refusing a write for
// lack of space or quota. bbolt wraps a failed write's error, but formats
// a failed resize's as text ("file resize error: no space left on
// device"), hence the second test.
func noSpaceCause(err error) bool {
	if err == nil {
		return false
	}
	if errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT) {
		return true
	}
	msg := err.Error()
	return strings.Contains(msg, syscall.ENOSPC.Error()) || strings.Contains(msg, syscall.EDQUOT.Error())
}

// refused classifies err, the error of writes that failed: lack of space
// becomes an ErrNoSpace that says where, counted as n refused writes, and
// starts or continues the spell Full reports (OnNoSpace hears it); any
// other error is returned as it is.
func (s *Store) refused(err error, n int) error {
	if !noSpaceCause(err) || errors.Is(err, ErrNoSpace) {
		return err
	}
	err = fmt.Errorf("%q: %w on the filesystem holding %s (%s): %w; nothing of this write was stored and the file is as it was: free space there, and writes work again",
		s.path, ErrNoSpace, filepath.Dir(s.path), freeSpace(filepath.Dir(s.path)), err)
	s.noSpace.Add(int64(n))
	s.smu.Lock()
	if s.full == nil {
		s.full = &Full{Since: time.Now()}
	}
	s.full.Refused += int64(n)
	s.full.Err = err
	s.smu.Unlock()
	if s.opts.OnNoSpace != nil {
		s.opts.OnNoSpace(err)
	}
	return err
}

// written ends a spell of refused writes: a write was committed.
func (s *Store) written() {
	s.smu.Lock()
	spell := s.full
	s.full = nil
	s.smu.Unlock()
	if spell != nil && s.opts.OnWritable != nil {
		s.opts.OnWritable(*spell)
	}
}

// freeSpace says how much of the filesystem holding dir is free, for the
// error of a refused write.
func freeSpace(dir string) string {
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		return "free space unknown: " + err.Error()
	}
	bs := uint64(st.Bsize)
	return fmt.Sprintf("%s free of %s", bytesText(uint64(st.Bavail)*bs), bytesText(uint64(st.Blocks)*bs))
}

// bytesText is n bytes as a person reads them: 0 B, 812 KiB, 3.5 GiB.
func bytesText(n uint64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := uint64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}
