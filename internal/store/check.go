package store

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"syscall"
	"time"
)

// checkFile scans the file at path before bbolt maps it, holding a shared
// lock on it so that no residentd writes it meanwhile. A missing or empty
// file passes (Open creates it). A file the scan finds damaged is an error
// wrapping ErrDamaged that says what to do.
func checkFile(path string, lockTimeout time.Duration) (CheckReport, error) {
	rep := CheckReport{Path: path}
	f, size, err := openLocked(path, syscall.LOCK_SH, lockTimeout, "check", "open")
	if errors.Is(err, fs.ErrNotExist) {
		return rep, nil
	}
	if err != nil {
		return rep, err
	}
	defer f.Close()
	if size == 0 {
		return rep, nil
	}
	start := time.Now()
	r, err := scanOpen(f, size, path, nil)
	rep = *r
	rep.Took = time.Since(start)
	if err != nil {
		return rep, fmt.Errorf("store: %q: %w; residentd will not start on it: stop anything using it and run \"residentd repair %s\"", path, err, path)
	}
	if rep.Damaged() {
		return rep, fmt.Errorf("store: %q: %w: %s; residentd will not start on it (a read of a damaged page would fail or crash): run \"residentd repair %s\", which copies every readable record into a new file at this path and keeps the damaged one beside it",
			path, ErrDamaged, rep.Summary(), path)
	}
	return rep, nil
}

// openLocked opens the file at path for a scan, takes flock how on it
// (lockFile) and returns it with its size; the caller closes it. Its
// errors read "store: <verb> <path>: …", a failed lock's "store: <lockVerb>
// <path>: …".
func openLocked(path string, how int, timeout time.Duration, verb, lockVerb string) (*os.File, int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, 0, fmt.Errorf("store: %s %q: %w", verb, path, err)
	}
	if err := lockFile(f, how, timeout); err != nil {
		f.Close()
		return nil, 0, fmt.Errorf("store: %s %q: %w", lockVerb, path, err)
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, 0, fmt.Errorf("store: %s %q: %w", verb, path, err)
	}
	return f, fi.Size(), nil
}

// lockFile takes flock how on f, retrying until timeout as bbolt does;
// another residentd holding the file is ErrLocked.
func lockFile(f *os.File, how int, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		err := syscall.Flock(int(f.Fd()), how|syscall.LOCK_NB)
		if err == nil {
			return nil
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) {
			return fmt.Errorf("lock: %w", err)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%w (waited %s): another residentd is probably running on the same state directory; stop it, or give this one a different state directory", ErrLocked, timeout)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Checked is what Open's check of the file found: its size, the pages it
// read, how long that took, and which meta page it used and why.
func (s *Store) Checked() CheckReport { return s.check }

// Verify scans the state file at path as Open does, without opening it
// for bbolt and without changing it, and reports what it found. It takes
// a shared lock, so a running residentd makes it fail with ErrLocked.
func Verify(path string) (*CheckReport, error) {
	f, size, err := openLocked(path, syscall.LOCK_SH, DefaultLockTimeout, "check", "check")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	start := time.Now()
	rep, err := scanOpen(f, size, path, nil)
	if err != nil {
		return nil, fmt.Errorf("store: check %q: %w", path, err)
	}
	rep.Took = time.Since(start)
	return rep, nil
}
