package store

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"

	bolt "go.etcd.io/bbolt"

	"github.com/residentd/residentd/internal/channel"
	"github.com/residentd/residentd/internal/testkit"
)

// spaceLog is what a store's OnNoSpace and OnWritable heard.
type spaceLog struct {
	mu       sync.Mutex
	refused  []error
	writable []Full
}

func (l *spaceLog) options() Options {
	return Options{
		OnNoSpace: func(err error) {
			l.mu.Lock()
			defer l.mu.Unlock()
			l.refused = append(l.refused, err)
		},
		OnWritable: func(f Full) {
			l.mu.Lock()
			defer l.mu.Unlock()
			l.writable = append(l.writable, f)
		},
	}
}

func (l *spaceLog) counts() (refused, writable int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.refused), len(l.writable)
}

// TestNoSpaceClassified: the errors a full disk gives (ENOSPC, EDQUOT,
// wrapped as os and bbolt wrap them, or as the text bbolt makes of a
// failed resize) are lack of space; others are not.
func TestNoSpaceClassified(t *testing.T) {
	for _, c := range []struct {
		err  error
		want bool
	}{
		{&fs.PathError{Op: "write", Path: "/x/residentd.db", Err: syscall.ENOSPC}, true},
		{fmt.Errorf("commit: %w", &fs.PathError{Op: "write", Path: "/x", Err: syscall.EDQUOT}), true},
		{fmt.Errorf("file resize error: %s", &fs.PathError{Op: "truncate", Path: "/x", Err: syscall.ENOSPC}), true},
		{&fs.PathError{Op: "write", Path: "/x", Err: syscall.EIO}, false},
		{&fs.PathError{Op: "write", Path: "/x", Err: syscall.EFBIG}, false}, // a file size limit is not a full disk
		{ErrDamaged, false},
		{nil, false},
	} {
		if got := noSpaceCause(c.err); got != c.want {
			t.Errorf("noSpaceCause(%v) = %v, want %v", c.err, got, c.want)
		}
	}
}

// TestRefusedWriteStartsASpell: a write whose transaction fails with
// ENOSPC is the caller's ErrNoSpace (wrapping the cause) naming the file,
// counted, heard by OnNoSpace, and Full reports the spell until the next
// committed write, which OnWritable hears. The failure is injected in the
// write itself; TestFullDiskRefusesWritesAndLosesNothing fills a real
// filesystem.
func TestRefusedWriteStartsASpell(t *testing.T) {
	var heard spaceLog
	s := openTest(t, heard.options())
	full := func(*bolt.Tx) error {
		return &fs.PathError{Op: "write", Path: s.Path(), Err: syscall.ENOSPC}
	}
	for range 2 {
		err := s.update(full)
		if !errors.Is(err, ErrNoSpace) || !errors.Is(err, syscall.ENOSPC) || !strings.Contains(err.Error(), s.Path()) || !strings.Contains(err.Error(), "free of") {
			t.Fatalf("a write refused for lack of space: %v, want ErrNoSpace wrapping ENOSPC, naming the file and the free space", err)
		}
	}
	f, ok := s.Full()
	if !ok || f.Refused != 2 || f.Since.IsZero() || !errors.Is(f.Err, ErrNoSpace) || s.NoSpace() != 2 {
		t.Fatalf("Full() = %+v, %v; NoSpace %d; want a spell of 2 refused writes", f, ok, s.NoSpace())
	}
	if r, w := heard.counts(); r != 2 || w != 0 {
		t.Fatalf("heard %d refusals and %d recoveries, want 2 and 0", r, w)
	}
	if err := s.SetProject("ch", "proj"); err != nil {
		t.Fatal(err)
	}
	if _, ok := s.Full(); ok || s.NoSpace() != 2 {
		t.Fatalf("after a committed write: full %v, NoSpace %d; want not full, 2", ok, s.NoSpace())
	}
	if r, w := heard.counts(); r != 2 || w != 1 || heard.writable[0].Refused != 2 {
		t.Fatalf("heard %d refusals and %d recoveries (%+v), want 2 and 1 ending a spell of 2", r, w, heard.writable)
	}
}

// TestFullDiskRefusesWritesAndLosesNothing fills the filesystem the state
// file is on (a tmpfs of 1 MiB of the test's own): writes that need room
// fail with ErrNoSpace wrapping ENOSPC, the attachment of a push too,
// Full says so and reads go on; once space is freed the next write works
// and ends the spell, and the file, reopened, holds everything written
// before and after and passes bbolt's check.
func TestFullDiskRefusesWritesAndLosesNothing(t *testing.T) {
	testkit.InSmallFS(t, 1<<20, func(t *testing.T, dir string) {
		var heard spaceLog
		path := filepath.Join(dir, "state", "residentd.db")
		s, err := Open(path, heard.options())
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		fill(t, s)
		before := bigMessages("ch-a", "before", 3)
		if _, err := s.PutMessages(before); err != nil {
			t.Fatal(err)
		}

		filler := fillDisk(t, dir)
		_, err = s.PutMessages(bigMessages("ch-a", "while-full", 8))
		if !errors.Is(err, ErrNoSpace) || !errors.Is(err, syscall.ENOSPC) || !strings.Contains(err.Error(), path) {
			t.Fatalf("a push onto a full disk: %v, want ErrNoSpace wrapping ENOSPC naming %s", err, path)
		}
		a, blobs := blob(strings.Repeat("z", 64<<10))
		if _, err := s.PutMessagesWith([]channel.Message{withAtt(msg("ch-a", "attached", 50, ""), a)}, blobs); !errors.Is(err, ErrNoSpace) {
			t.Fatalf("a push with an attachment onto a full disk: %v, want ErrNoSpace", err)
		}
		f, ok := s.Full()
		if !ok || f.Refused < 2 || s.NoSpace() < 2 {
			t.Fatalf("Full() = %+v, %v, NoSpace %d: want a spell of 2 or more refused writes", f, ok, s.NoSpace())
		}
		if got, err := s.Recent("ch-a", "", 10); err != nil || len(got) != len(before) {
			t.Fatalf("a read on a full disk: %d messages, %v; want %d", len(got), err, len(before))
		}

		if err := os.Remove(filler); err != nil {
			t.Fatal(err)
		}
		after := bigMessages("ch-a", "after", 8)
		if _, err := s.PutMessages(after); err != nil {
			t.Fatalf("a push once there is room again: %v", err)
		}
		if _, ok := s.Full(); ok {
			t.Fatal("the spell did not end with a committed write")
		}
		if r, w := heard.counts(); r < 2 || w != 1 {
			t.Fatalf("heard %d refusals and %d recoveries, want 2 or more and 1", r, w)
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		s, err = Open(path, Options{})
		if err != nil {
			t.Fatalf("reopen: %v", err)
		}
		defer s.Close()
		if err := s.Check(); err != nil {
			t.Fatalf("bbolt's check after the full disk: %v", err)
		}
		for _, m := range append(before, after...) {
			if ok, err := s.HasMessage("ch-a", m.ID); err != nil || !ok {
				t.Errorf("message %s: %v, %v; want it kept", m.ID, ok, err)
			}
		}
		for _, id := range []string{"while-full-0", "attached"} {
			if ok, _ := s.HasMessage("ch-a", id); ok {
				t.Errorf("message %s, whose push was refused, is in the file", id)
			}
		}
	})
}

// bigMessages are n messages of ch with 60 KiB bodies: a push of them
// needs pages the file has not got.
func bigMessages(ch, prefix string, n int) []channel.Message {
	var out []channel.Message
	for i := range n {
		m := msg(ch, fmt.Sprintf("%s-%d", prefix, i), i, "")
		m.Body = strings.Repeat("b", 60<<10)
		out = append(out, m)
	}
	return out
}

// fillDisk writes a file in dir until its filesystem is full and returns
// its path.
func fillDisk(t *testing.T, dir string) string {
	t.Helper()
	path := filepath.Join(dir, "filler")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	chunk := make([]byte, 4096)
	for {
		if _, err = f.Write(chunk); err != nil {
			break
		}
	}
	if !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("filling %s: %v, want ENOSPC", dir, err)
	}
	return path
}
