package store

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/residentd/residentd/internal/channel"
	"github.com/residentd/residentd/internal/testkit"
)

// The tests here damage real bbolt files the store wrote. They find the
// pages to damage through bbolt's own API (a bucket's Root, tx.Page) and
// read a branch page's children and a leaf page's keys from the page
// headers in the file, so the target is the same on every run.

// damagedChannels are the channels a test file holds; each one's msgs
// bucket is big enough to be a branch page over several leaf pages.
var damagedChannels = []string{"ch-a", "ch-b"}

const perChannel = 300

// writeDamageFile writes a state file through the store and closes it.
func writeDamageFile(t *testing.T) string {
	t.Helper()
	s := openTest(t, Options{})
	fill(t, s)
	for _, ch := range damagedChannels {
		var batch []channel.Message
		for i := range perChannel {
			m := msg(ch, fmt.Sprintf("%s-m%04d", ch, i), i, "")
			m.Body = strings.Repeat("x", 200) + m.ID
			batch = append(batch, m)
		}
		if _, err := s.PutMessages(batch); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	return s.Path()
}

// layout is where a channel's msgs bucket lives in the file.
type layout struct {
	pageSize int
	root     uint64   // the msgs bucket's root page, a branch
	leaves   []uint64 // its children, leaf pages, in key order
	counts   []int    // records on each leaf
}

func msgsLayout(t *testing.T, path, ch string) layout {
	t.Helper()
	// Read-write: bbolt's page API needs the freelist, which a read-only
	// open does not load; nothing is written.
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	l := layout{pageSize: db.Info().PageSize}
	err = db.View(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketChannels).Bucket([]byte(ch)).Bucket(keyMsgs)
		l.root = uint64(b.Root())
		info, err := tx.Page(int(l.root))
		if err != nil {
			return err
		}
		if info.Type != "branch" {
			return fmt.Errorf("msgs root page %d of %s is a %s, want a branch: write more messages", l.root, ch, info.Type)
		}
		raw := readRaw(t, path, l.root, l.pageSize)
		for i := range info.Count {
			child := binary.LittleEndian.Uint64(raw[pageHeaderSize+i*elementSize+8:])
			ci, err := tx.Page(int(child))
			if err != nil {
				return err
			}
			if ci.Type != "leaf" {
				return fmt.Errorf("child %d of page %d is a %s, want a leaf", child, l.root, ci.Type)
			}
			l.leaves = append(l.leaves, child)
			l.counts = append(l.counts, ci.Count)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(l.leaves) < 3 {
		t.Fatalf("msgs of %s has %d leaf pages, want 3 or more", ch, len(l.leaves))
	}
	return l
}

func readRaw(t *testing.T, path string, id uint64, pageSize int) []byte {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	p := make([]byte, pageSize)
	if _, err := f.ReadAt(p, int64(id)*int64(pageSize)); err != nil {
		t.Fatal(err)
	}
	return p
}

// leafKeys are the keys a leaf page holds, read from its element headers.
func leafKeys(t *testing.T, path string, id uint64, pageSize int) []string {
	t.Helper()
	p := readRaw(t, path, id, pageSize)
	n := int(binary.LittleEndian.Uint16(p[10:]))
	var keys []string
	for i := range n {
		at := pageHeaderSize + i*elementSize
		pos, ks := int(binary.LittleEndian.Uint32(p[at+4:])), int(binary.LittleEndian.Uint32(p[at+8:]))
		keys = append(keys, string(p[at+pos:at+pos+ks]))
	}
	return keys
}

// flip inverts n bytes of the file at off.
func flip(t *testing.T, path string, off int64, n int) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b := make([]byte, n)
	if _, err := f.ReadAt(b, off); err != nil {
		t.Fatal(err)
	}
	for i := range b {
		b[i] ^= 0xFF
	}
	if _, err := f.WriteAt(b, off); err != nil {
		t.Fatal(err)
	}
}

// records reads every bucket and record of the file through bbolt, as
// "bucket <path>" -> "" and "record <path>\x00<key>" -> value.
func records(t *testing.T, path string) map[string]string {
	t.Helper()
	db, err := bolt.Open(path, 0o600, &bolt.Options{ReadOnly: true, Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	out := map[string]string{}
	var walk func(b *bolt.Bucket, path [][]byte) error
	walk = func(b *bolt.Bucket, path [][]byte) error {
		return b.ForEach(func(k, v []byte) error {
			sub := append(slices.Clone(path), k)
			if v == nil {
				out["bucket "+pathString(sub)] = ""
				return walk(b.Bucket(k), sub)
			}
			out["record "+pathString(path)+"\x00"+string(k)] = string(v)
			return nil
		})
	}
	err = db.View(func(tx *bolt.Tx) error {
		return tx.ForEach(func(name []byte, b *bolt.Bucket) error {
			out["bucket "+pathString([][]byte{name})] = ""
			return walk(b, [][]byte{name})
		})
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// bboltPanics reports whether reading every message of ch through bbolt
// itself panics: the damage is one bbolt does not survive.
func bboltPanics(t *testing.T, path, ch string) (panicked bool) {
	t.Helper()
	db, err := bolt.Open(path, 0o600, &bolt.Options{ReadOnly: true, Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	defer func() { panicked = recover() != nil }()
	_ = db.View(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketChannels).Bucket([]byte(ch)).Bucket(keyMsgs).ForEach(func(k, v []byte) error { return nil })
	})
	return false
}

// TestDamagedPageRefusedAndRepaired flips bytes of one data page, or one
// branch page, of a channel's messages in a file the store wrote: Open
// refuses the file naming the page and `residentd repair` with the path;
// Repair copies every other record into a new file at the path, keeps the
// damaged file byte for byte beside it, and reports the lost page with the
// records its header held; the repaired file opens and passes bbolt's check.
func TestDamagedPageRefusedAndRepaired(t *testing.T) {
	const msgsBucket = "channels/ch-a/msgs"
	cases := []struct {
		name string
		// damage returns the page it damaged and the keys of ch-a's msgs
		// the damage loses.
		damage      func(t *testing.T, path string, l layout) (page uint64, lost []string)
		bboltPanics bool // bbolt itself panics reading the damaged bucket
		check       func(t *testing.T, r *CheckReport, l layout)
	}{{
		name: "leaf page header",
		damage: func(t *testing.T, path string, l layout) (uint64, []string) {
			id := l.leaves[1]
			lost := leafKeys(t, path, id, l.pageSize)
			flip(t, path, int64(id)*int64(l.pageSize), 8) // the page id
			return id, lost
		},
		bboltPanics: true,
		check: func(t *testing.T, r *CheckReport, l layout) {
			b := bucketNamed(r, "channels/*/msgs")
			if b.LostPages != 1 || b.LostRecords != l.counts[1] || b.LostUnknown != 0 {
				t.Errorf("channels: %+v, want 1 lost page with %d records", b, l.counts[1])
			}
		},
	}, {
		name: "leaf page elements",
		damage: func(t *testing.T, path string, l layout) (uint64, []string) {
			id := l.leaves[2]
			lost := leafKeys(t, path, id, l.pageSize)
			// The first two elements' positions and sizes.
			flip(t, path, int64(id)*int64(l.pageSize)+pageHeaderSize+4, 8)
			flip(t, path, int64(id)*int64(l.pageSize)+pageHeaderSize+elementSize+4, 8)
			return id, lost
		},
		check: func(t *testing.T, r *CheckReport, l layout) {
			b := bucketNamed(r, "channels/*/msgs")
			if b.LostPages != 1 || b.LostRecords != l.counts[2] {
				t.Errorf("channels: %+v, want 1 lost page with %d records", b, l.counts[2])
			}
		},
	}, {
		name: "branch page header",
		damage: func(t *testing.T, path string, l layout) (uint64, []string) {
			var lost []string
			for _, leaf := range l.leaves {
				lost = append(lost, leafKeys(t, path, leaf, l.pageSize)...)
			}
			flip(t, path, int64(l.root)*int64(l.pageSize), 8)
			return l.root, lost
		},
		bboltPanics: true,
		check: func(t *testing.T, r *CheckReport, l layout) {
			b := bucketNamed(r, "channels/*/msgs")
			if b.LostPages != 1 || b.LostUnknown != 1 {
				t.Errorf("channels: %+v, want 1 lost branch page", b)
			}
			// The branch's leaves are orphans: counted, not placed.
			total := 0
			for _, n := range l.counts {
				total += n
			}
			if r.Orphans != len(l.leaves) || r.OrphanRecords != total {
				t.Errorf("orphans: %d pages, %d records; want %d and %d", r.Orphans, r.OrphanRecords, len(l.leaves), total)
			}
		},
	}}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			path := writeDamageFile(t)
			l := msgsLayout(t, path, "ch-a")
			before := records(t, path)
			page, lostKeys := c.damage(t, path, l)
			if len(lostKeys) == 0 {
				t.Fatal("the damaged page held no records")
			}
			if got := bboltPanics(t, path, "ch-a"); c.bboltPanics && !got {
				t.Fatal("bbolt read the damaged bucket without a panic: the damage is not the kind that crashed the daemon")
			}
			damaged := string(testkit.ReadFile(t, path))

			_, err := Open(path, Options{})
			if !errors.Is(err, ErrDamaged) {
				t.Fatalf("open of the damaged file: %v, want ErrDamaged", err)
			}
			for _, want := range []string{"residentd repair " + path, fmt.Sprintf("page %d", page), msgsBucket} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("open's refusal %q does not say %q", err, want)
				}
			}

			rep, err := Repair(path, 0)
			if err != nil {
				t.Fatal(err)
			}
			if string(testkit.ReadFile(t, rep.Kept)) != damaged {
				t.Error("the kept file is not the damaged file byte for byte")
			}
			if _, err := os.Stat(path + ".repair"); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("the scratch copy is left: %v", err)
			}
			if rep.Found.NProblems != 1 || rep.Found.Problems[0].Page != page || rep.Found.Problems[0].Bucket != msgsBucket {
				t.Errorf("problems %+v, want page %d of %s alone", rep.Found.Problems, page, msgsBucket)
			}
			c.check(t, rep.Found, l)

			after := records(t, path)
			lost := map[string]bool{}
			for _, k := range lostKeys {
				lost["record "+msgsBucket+"\x00"+k] = true
			}
			for k, v := range before {
				got, ok := after[k]
				switch {
				case lost[k] && ok:
					t.Errorf("record %q of the damaged page is in the repaired file", k)
				case !lost[k] && !ok:
					t.Errorf("record %q is missing from the repaired file", k)
				case !lost[k] && got != v:
					t.Errorf("record %q changed in the repair", k)
				}
			}
			for k := range after {
				if _, ok := before[k]; !ok {
					t.Errorf("record %q appeared in the repair", k)
				}
			}
			if rep.Records != len(before)-countBuckets(before)-len(lostKeys) {
				t.Errorf("repair copied %d records; the file had %d, %d of them on the damaged page", rep.Records, len(before)-countBuckets(before), len(lostKeys))
			}

			s, err := Open(path, Options{})
			if err != nil {
				t.Fatalf("open of the repaired file: %v", err)
			}
			defer s.Close()
			if err := s.Check(); err != nil {
				t.Fatalf("bbolt's check of the repaired file: %v", err)
			}
			got, err := s.Recent("ch-b", "", perChannel)
			if err != nil || len(got) != perChannel {
				t.Fatalf("ch-b after the repair: %d messages, %v; want %d", len(got), err, perChannel)
			}
		})
	}
}

func bucketNamed(r *CheckReport, name string) BucketCount {
	for _, b := range r.Buckets {
		if b.Name == name {
			return b
		}
	}
	return BucketCount{}
}

func countBuckets(recs map[string]string) int {
	n := 0
	for k := range recs {
		if strings.HasPrefix(k, "bucket ") {
			n++
		}
	}
	return n
}

// metaTxIDs reads the transaction id each meta page records.
func metaTxIDs(t *testing.T, path string, pageSize int) [2]uint64 {
	t.Helper()
	var ids [2]uint64
	for i := range ids {
		ids[i] = binary.LittleEndian.Uint64(readRaw(t, path, uint64(i), pageSize)[pageHeaderSize+48:])
	}
	return ids
}

// TestDamagedMetaPage: bbolt keeps two meta pages and falls back to the
// other when one fails its checksum, so a damaged meta page does not stop
// Open. What is true then: with the newer meta damaged, the file opens as
// of the transaction before (the last write is gone: bbolt never reuses the
// pages that older state needs, so it is whole), Checked says so, and the
// next write rewrites the damaged page; with the older one damaged nothing
// is lost. With both damaged Open refuses the file, and Repair leaves it as
// it is (there is no tree to read).
func TestDamagedMetaPage(t *testing.T) {
	setup := func(t *testing.T) (path string, pageSize int, newer uint64) {
		s := openTest(t, Options{})
		fill(t, s)
		if _, err := s.PutMessages([]channel.Message{msg("ch-a", "first", 1, "")}); err != nil {
			t.Fatal(err)
		}
		if _, err := s.PutMessages([]channel.Message{msg("ch-a", "last", 2, "")}); err != nil {
			t.Fatal(err)
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		pageSize = os.Getpagesize()
		ids := metaTxIDs(t, s.Path(), pageSize)
		if ids[1] > ids[0] {
			newer = 1
		}
		return s.Path(), pageSize, newer
	}
	has := func(t *testing.T, s *Store, id string) bool {
		t.Helper()
		ok, err := s.HasMessage("ch-a", id)
		if err != nil {
			t.Fatal(err)
		}
		return ok
	}

	t.Run("newer", func(t *testing.T) {
		path, pageSize, newer := setup(t)
		flip(t, path, int64(newer)*int64(pageSize)+pageHeaderSize+48, 8) // its txid: the checksum fails
		s, err := Open(path, Options{})
		if err != nil {
			t.Fatalf("open with the newer meta page damaged: %v", err)
		}
		if notes := s.Checked().MetaNotes; len(notes) != 1 || !strings.Contains(notes[0], fmt.Sprintf("meta page %d is damaged", newer)) {
			t.Errorf("meta notes %q, want meta page %d damaged", notes, newer)
		}
		if !has(t, s, "first") || has(t, s, "last") {
			t.Error("want the file as of the write before the damaged meta's: first kept, last gone")
		}
		if _, err := s.PutMessages([]channel.Message{msg("ch-a", "again", 3, "")}); err != nil {
			t.Fatal(err)
		}
		s = reopen(t, s, Options{})
		if notes := s.Checked().MetaNotes; len(notes) != 0 || !has(t, s, "again") {
			t.Errorf("after a write and a reopen: notes %q, want none (the write rewrote the damaged meta page)", notes)
		}
	})
	t.Run("older", func(t *testing.T) {
		path, pageSize, newer := setup(t)
		flip(t, path, int64(1-newer)*int64(pageSize)+pageHeaderSize+48, 8)
		s, err := Open(path, Options{})
		if err != nil {
			t.Fatalf("open with the older meta page damaged: %v", err)
		}
		defer s.Close()
		if len(s.Checked().MetaNotes) != 1 || !has(t, s, "last") {
			t.Errorf("notes %q, last kept %v; want one note and nothing lost", s.Checked().MetaNotes, has(t, s, "last"))
		}
	})
	t.Run("both", func(t *testing.T) {
		path, pageSize, _ := setup(t)
		flip(t, path, pageHeaderSize, 4) // meta 0's magic
		flip(t, path, int64(pageSize)+pageHeaderSize, 4)
		damaged := string(testkit.ReadFile(t, path))
		_, err := Open(path, Options{})
		if !errors.Is(err, ErrDamaged) || !strings.Contains(err.Error(), "no intact meta page") || !strings.Contains(err.Error(), "residentd repair "+path) {
			t.Fatalf("open with both meta pages damaged: %v", err)
		}
		if _, err := Repair(path, 0); !errors.Is(err, ErrDamaged) || !strings.Contains(err.Error(), "nothing was changed") {
			t.Fatalf("repair with both meta pages damaged: %v", err)
		}
		if string(testkit.ReadFile(t, path)) != damaged {
			t.Error("repair changed a file it could not read")
		}
		if m, _ := filepath.Glob(path + ".*"); len(m) != 0 {
			t.Errorf("repair left %v", m)
		}
	})
}

// TestDamageUnderAnOpenStore: a page damaged while the store has the file
// open (the check at Open cannot see it) fails only the reads and writes
// that meet it, each with ErrDamaged; the store counts them and tells its
// owner, and every other read and write goes on. The damage covers a
// bbolt panic (a page whose header names another page) and a fault (a
// child page id far past the file, which would end the process unless the
// read recovers it).
func TestDamageUnderAnOpenStore(t *testing.T) {
	cases := []struct {
		name   string
		damage func(t *testing.T, path string, l layout)
	}{{
		name: "page header",
		damage: func(t *testing.T, path string, l layout) {
			flip(t, path, int64(l.leaves[len(l.leaves)-1])*int64(l.pageSize), 8)
		},
	}, {
		name: "child page id past the file",
		damage: func(t *testing.T, path string, l layout) {
			// Byte 3 of the last child's id: about 4e9 pages on, inside
			// bbolt's address range but far past its mapping.
			last := len(l.leaves) - 1
			flip(t, path, int64(l.root)*int64(l.pageSize)+pageHeaderSize+int64(last)*elementSize+8+3, 1)
		},
	}}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			path := writeDamageFile(t)
			l := msgsLayout(t, path, "ch-a")
			var heard atomic.Int64
			s, err := Open(path, Options{OnDamage: func(err error) {
				if errors.Is(err, ErrDamaged) {
					heard.Add(1)
				}
			}})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			c.damage(t, path, l) // bbolt's mapping is shared: the store sees it at once

			_, err = s.Recent("ch-a", "", perChannel)
			if !errors.Is(err, ErrDamaged) || !strings.Contains(err.Error(), "residentd repair "+path) {
				t.Fatalf("read of the damaged channel: %v, want ErrDamaged naming the repair", err)
			}
			_, err = s.PutMessages([]channel.Message{msg("ch-a", "newest", perChannel+1, "")})
			if !errors.Is(err, ErrDamaged) {
				t.Fatalf("write into the damaged page: %v, want ErrDamaged", err)
			}
			if s.Damage() != 2 || heard.Load() != 2 {
				t.Errorf("damage counted %d, heard %d; want 2 and 2", s.Damage(), heard.Load())
			}
			got, err := s.Recent("ch-b", "", perChannel)
			if err != nil || len(got) != perChannel {
				t.Fatalf("read of the intact channel: %d messages, %v", len(got), err)
			}
			if _, err := s.PutMessages([]channel.Message{msg("ch-b", "newest", perChannel+1, "")}); err != nil {
				t.Fatalf("write to the intact channel: %v", err)
			}
			if ok, err := s.HasMessage("ch-b", "newest"); err != nil || !ok {
				t.Fatalf("the intact channel's write: %v, %v", ok, err)
			}
		})
	}
}

// TestCheckHealthyFileAgreesWithBbolt: a file the store wrote passes the
// scan with every page read and every record counted, as bbolt's own
// check passes it.
func TestCheckHealthyFileAgreesWithBbolt(t *testing.T) {
	path := writeDamageFile(t)
	recs := records(t, path)
	rep, err := Verify(path)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Damaged() || len(rep.MetaNotes) != 0 {
		t.Fatalf("a healthy file: %s %q", rep.Summary(), rep.MetaNotes)
	}
	n, buckets := 0, 0
	for _, b := range rep.Buckets {
		n += b.Records
		buckets += b.Buckets
	}
	if n != len(recs)-countBuckets(recs) || buckets != countBuckets(recs) {
		t.Errorf("scan counted %d records in %d buckets; bbolt reads %d in %d", n, buckets, len(recs)-countBuckets(recs), countBuckets(recs))
	}
	s, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.Check(); err != nil {
		t.Fatal(err)
	}
	if c := s.Checked(); c.Read == 0 || uint64(c.Read) > c.Pages || c.Size == 0 {
		t.Errorf("open's check: %+v", c)
	}
}

// TestRepairOfAHealthyFileKeepsEverything: repair on an intact file is a
// copy that loses nothing.
func TestRepairOfAHealthyFileKeepsEverything(t *testing.T) {
	path := writeDamageFile(t)
	before := records(t, path)
	rep, err := Repair(path, 0)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Found.Damaged() {
		t.Fatalf("problems in a healthy file: %s", rep.Found.Summary())
	}
	after := records(t, path)
	if len(after) != len(before) {
		t.Fatalf("%d records after, %d before", len(after), len(before))
	}
	for k, v := range before {
		if after[k] != v {
			t.Fatalf("record %q changed", k)
		}
	}
	if _, err := os.Stat(rep.Kept); err != nil {
		t.Fatalf("the original is not kept: %v", err)
	}
}

// TestRepairRefusesAFileInUse: the file of an open store is not repaired
// under it.
func TestRepairRefusesAFileInUse(t *testing.T) {
	s := openTest(t, Options{})
	fill(t, s)
	if _, err := Repair(s.Path(), 50*time.Millisecond); !errors.Is(err, ErrLocked) {
		t.Fatalf("repair of an open file: %v, want ErrLocked", err)
	}
}
