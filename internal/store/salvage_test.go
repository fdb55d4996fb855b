package store

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/residentd/residentd/internal/channel"
	"github.com/residentd/residentd/internal/session"
	"github.com/residentd/residentd/internal/testkit"
)

// The tests here cut short, zero and overwrite a state file the store
// wrote with a history like a daemon's (many small commits, so bbolt has
// moved its pages about), and check that repair keeps exactly the records
// that can still be read: those every byte on whose way from the meta page
// is still there and on no damaged page. Which those are is worked out
// from the intact file by reach, a plain walk of bbolt's format that
// checks nothing.

// churnedFile writes a state file through the store: every kind of record,
// then a few hundred small commits across channels, conversations,
// watermarks and runs, as a daemon's day leaves it. It returns the file's
// bytes.
func churnedFile(t *testing.T) []byte {
	t.Helper()
	s := openTest(t, Options{})
	fill(t, s)
	rng := rand.New(rand.NewPCG(7, 36))
	for i := range 240 {
		ch := fmt.Sprintf("ch-%d", i%6)
		k := session.Key{Channel: ch, Binding: "b-builtin"}
		m := msg(ch, fmt.Sprintf("%s-m%03d", ch, i), i, "")
		m.Body = strings.Repeat("x", rng.IntN(600)) + m.ID
		if i%40 == 7 {
			m.Body = strings.Repeat("y", 9000) // a value on overflow pages
		}
		if _, err := s.PutMessages([]channel.Message{m}); err != nil {
			t.Fatal(err)
		}
		switch i % 4 {
		case 1:
			at := t0.Add(time.Duration(i) * time.Second)
			err := s.AppendTurns(k, session.Turn{Role: session.RoleUser, Text: "mention " + m.ID, At: at}, session.Turn{Role: session.RoleAssistant, Text: strings.Repeat("reply ", rng.IntN(80)), At: at})
			if err != nil {
				t.Fatal(err)
			}
		case 2:
			if _, err := s.CommitWatermark(channel.WatermarkKey{Key: k}, "native-"+ch, channel.Seen{Seq: uint64(i), Marks: channel.Unedited(m.ID)}); err != nil {
				t.Fatal(err)
			}
		case 3:
			req, _ := json.Marshal(map[string]string{"channel_id": ch, "text": "@agent " + m.ID})
			if err := s.PutRun(RunRecord{ID: fmt.Sprintf("run-%03d", i), Request: req, Created: t0, Seq: uint64(i)}); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	return testkit.ReadFile(t, s.Path())
}

// way is what reading one bucket or record of a file takes: the end of
// the last byte on its way from the meta page (so a file cut at or after
// it still holds it), and the pages that way goes through.
type way struct {
	kind  string // the report's name for its bucket (groupOf); "" for a bucket
	end   int64
	pages []uint64
}

func (w way) through(end int64, page uint64) way {
	out := way{kind: w.kind, end: max(w.end, end), pages: slices.Clone(w.pages)}
	if page != 0 {
		out.pages = append(out.pages, page)
	}
	return out
}

// reach walks the intact file data and returns the way to each of its
// buckets and records, keyed as records keys them, and its page size and
// pages in use.
func reach(t *testing.T, data []byte) (ways map[string]way, pageSize int, hwm uint64) {
	t.Helper()
	le64, le32 := binary.LittleEndian.Uint64, binary.LittleEndian.Uint32
	pageSize = int(le32(data[pageHeaderSize+8:]))
	m := data[pageHeaderSize:] // the newer meta page's fields
	if m1 := data[pageSize+pageHeaderSize:]; le64(m1[48:]) > le64(m[48:]) {
		m = m1
	}
	r := &reacher{data: data, pageSize: pageSize, ways: map[string]way{}}
	r.page(nil, le64(m[16:]), way{})
	return r.ways, pageSize, le64(m[40:])
}

type reacher struct {
	data     []byte
	pageSize int
	ways     map[string]way
}

func (r *reacher) page(path [][]byte, id uint64, w way) {
	abs := int64(id) * int64(r.pageSize)
	over := int64(binary.LittleEndian.Uint32(r.data[abs+12:]))
	r.node(path, abs, r.data[abs:abs+(1+over)*int64(r.pageSize)], w.through(abs+pageHeaderSize, id))
}

// node reads the branch or leaf page p, which starts at byte abs of the
// file.
func (r *reacher) node(path [][]byte, abs int64, p []byte, w way) {
	le64, le32 := binary.LittleEndian.Uint64, binary.LittleEndian.Uint32
	branch := binary.LittleEndian.Uint16(p[8:]) == flagBranch
	for i := range int(binary.LittleEndian.Uint16(p[10:])) {
		at := pageHeaderSize + i*elementSize
		e := p[at:]
		if branch {
			pos, ks := int(le32(e[0:])), int(le32(e[4:]))
			r.page(path, le64(e[8:]), w.through(abs+int64(at+pos+ks), 0))
			continue
		}
		flags, pos, ks, vs := le32(e[0:]), int(le32(e[4:])), int(le32(e[8:])), int(le32(e[12:]))
		key, value := p[at+pos:at+pos+ks], p[at+pos+ks:at+pos+ks+vs]
		ew := w.through(abs+int64(at+pos+ks+vs), 0)
		if flags&leafBucket == 0 {
			ew.kind = groupOf(path)
			r.ways["record "+pathString(path)+"\x00"+string(key)] = ew
			continue
		}
		sub := append(slices.Clone(path), key)
		r.ways["bucket "+pathString(sub)] = ew
		if root := le64(value); root != 0 {
			r.page(sub, root, ew)
		} else {
			r.node(sub, abs+int64(at+pos+ks+bucketHeaderSize), value[bucketHeaderSize:], ew)
		}
	}
}

// repairedAs writes data as a state file, checks that Open refuses it
// (when damaged) and repairs it, and returns what the repair found and
// the repaired file's records.
func repairedAs(t *testing.T, data []byte, damaged bool) (*RepairReport, map[string]string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "residentd.db")
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(path, Options{}); damaged && (!errors.Is(err, ErrDamaged) || !strings.Contains(err.Error(), "residentd repair "+path)) {
		t.Fatalf("open of the damaged file: %v, want ErrDamaged naming the repair", err)
	}
	rep, err := Repair(path, 0)
	if err != nil {
		t.Fatal(err)
	}
	after := records(t, path) // before Open migrates what the repair could not read
	s, err := Open(path, Options{})
	if err != nil {
		t.Fatalf("open of the repaired file: %v", err)
	}
	if err := s.Check(); err != nil {
		t.Fatalf("bbolt's check of the repaired file: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	return rep, after
}

// checkSalvage checks that the repaired file holds exactly the records of
// before that kept says survive, unchanged, and that the report counts
// them by kind; it returns the figures by kind, "kept/had", and over all.
func checkSalvage(t *testing.T, rep *RepairReport, before, after map[string]string, ways map[string]way, kept func(way) bool) map[string]string {
	t.Helper()
	had, got := map[string]int{}, map[string]int{}
	survivors := 0
	for k, v := range before {
		w := ways[k]
		a, ok := after[k]
		switch {
		case kept(w) && !ok:
			t.Errorf("%q is readable but not in the repaired file", k)
		case kept(w) && a != v:
			t.Errorf("%q changed in the repair", k)
		case !kept(w) && ok:
			t.Errorf("%q is not readable but is in the repaired file", k)
		}
		if w.kind == "" && strings.HasPrefix(k, "bucket ") {
			continue
		}
		had[w.kind]++
		if kept(w) {
			got[w.kind]++
			survivors++
		}
	}
	for k := range after {
		if _, ok := before[k]; !ok && !strings.HasPrefix(k, "bucket ") {
			t.Errorf("%q appeared in the repair", k)
		}
	}
	if rep.Records != survivors {
		t.Errorf("repair copied %d records, %d are readable", rep.Records, survivors)
	}
	figures := map[string]string{}
	for kind, n := range had {
		b := bucketNamed(rep.Found, kind)
		if b.Records != got[kind] {
			t.Errorf("report: %s has %d records, want %d", kind, b.Records, got[kind])
		}
		if b.LostRecords > n-got[kind] {
			t.Errorf("report: %s lost %d records, but only %d of its %d were not read", kind, b.LostRecords, n-got[kind], n)
		}
		figures[kind] = fmt.Sprintf("%d/%d", got[kind], n)
	}
	figures["all"] = fmt.Sprintf("%d/%d", survivors, len(before)-countBuckets(before))
	return figures
}

// TestTruncatedFileSalvaged cuts a state file short at a quarter, half
// and nine tenths of its pages in use, one page short, and through the
// middle of a leaf page's records: Open refuses each naming the repair,
// and repair keeps every record whose way from the meta page is still in
// the file (of the page cut through, the records wholly before the cut),
// loses the rest, says the file was cut short, and counts what it kept by
// kind. Before, a file cut short lost every record: its meta pages, which
// say more pages are in use than the file holds, were taken for damaged.
func TestTruncatedFileSalvaged(t *testing.T) {
	data := churnedFile(t)
	ways, ps, hwm := reach(t, data)
	path := filepath.Join(t.TempDir(), "intact.db")
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	before := records(t, path)
	if len(ways) != len(before) {
		t.Fatalf("reach found %d buckets and records, bbolt reads %d", len(ways), len(before))
	}
	cuts := []struct {
		name string
		size int64
	}{
		{"a quarter", int64(hwm/4) * int64(ps)},
		{"half", int64(hwm/2) * int64(ps)},
		{"nine tenths", int64(hwm*9/10) * int64(ps)},
		{"one page short", int64(hwm-1) * int64(ps)},
		{"mid-page", 0},
	}
	leaf, mid := midLeafCut(data, ways, ps)
	if leaf == 0 {
		// bbolt placed every such leaf below a page on its way (where it
		// puts pages varies from run to run): cut through the last page.
		t.Log("no leaf of records lies above every page on its way: the mid-page cut goes through the last page in use")
		mid = int64(hwm-1)*int64(ps) + int64(ps)/2
	}
	cuts[len(cuts)-1].size = mid
	for _, c := range cuts {
		t.Run(c.name, func(t *testing.T) {
			rep, after := repairedAs(t, data[:c.size], true)
			kept := func(w way) bool { return w.end <= c.size }
			figures := checkSalvage(t, rep, before, after, ways, kept)
			p := rep.Found.Problems[0]
			if p.Kind != "file" || p.Page != uint64(c.size)/uint64(ps) || !strings.Contains(p.Reason, "cut short") {
				t.Errorf("first problem %+v, want the file cut short at page %d", p, c.size/int64(ps))
			}
			if c.size == mid && leaf != 0 {
				partly(t, rep.Found, ways, leaf, mid)
			}
			t.Logf("cut at byte %d of %d (%d pages in use): kept/had by kind %v; %d orphan leaf pages with %d records",
				c.size, len(data), hwm, figures, rep.Found.Orphans, rep.Found.OrphanRecords)
		})
	}
}

// midLeafCut is a byte inside a leaf page of plain records (no bucket,
// inline or not), of the pages on no way but below it, between the ends
// of its first and last records: a cut there keeps some of the page's
// records and loses others. Its leaf is 0 when the file has no such page.
func midLeafCut(data []byte, ways map[string]way, ps int) (leaf uint64, cut int64) {
	ends := map[uint64][]int64{} // leaf page -> its records' ends
	for _, w := range ways {
		if w.kind == "" || len(w.pages) == 0 {
			continue
		}
		leaf := w.pages[len(w.pages)-1]
		if slices.Max(w.pages) == leaf && w.end < int64(leaf+1)*int64(ps) {
			ends[leaf] = append(ends[leaf], w.end)
		}
	}
	var best uint64
	for leaf, e := range ends {
		p := data[int(leaf)*ps:]
		if n := int(binary.LittleEndian.Uint16(p[10:])); len(e) >= 4 && n == len(e) && leaf > best {
			best = leaf // every element of the page is one of its records: none is a bucket
		}
	}
	if best == 0 {
		return 0, 0
	}
	e := ends[best]
	slices.Sort(e)
	return best, e[len(e)/2] - 1 // the middle record's last byte is gone
}

// partly checks that the cut through leaf kept some of its records and
// lost the others, and that the report names the page and counts them.
func partly(t *testing.T, r *CheckReport, ways map[string]way, leaf uint64, cut int64) {
	t.Helper()
	kept, lost := 0, 0
	for _, w := range ways {
		if len(w.pages) > 0 && w.pages[len(w.pages)-1] == leaf && w.kind != "" {
			if w.end <= cut {
				kept++
			} else {
				lost++
			}
		}
	}
	if kept == 0 || lost == 0 {
		t.Fatalf("the cut through page %d kept %d of its records and lost %d: want some of each", leaf, kept, lost)
	}
	for _, p := range r.Problems {
		if p.Page == leaf && p.Kind == "leaf" {
			if p.Records != lost || !strings.Contains(p.Reason, fmt.Sprintf("%d of its %d elements read", kept, kept+lost)) {
				t.Errorf("the page cut through: %v, want %d records lost, %d of %d read", p, lost, kept, kept+lost)
			}
			return
		}
	}
	t.Errorf("no problem names page %d, the leaf cut through: %v", leaf, r.Problems)
}

// TestDamagedPagesSalvaged zeroes, or overwrites with random bytes, one
// page of a churned state file: a leaf of a channel's messages, the
// branch above leaves, a bucket's root, the root of the whole tree, the
// freelist. Repair keeps exactly the records whose way does not go
// through the page (all of them for the freelist, which it writes anew;
// none for the tree's root), and the report counts them by kind.
func TestDamagedPagesSalvaged(t *testing.T) {
	data := churnedFile(t)
	ways, ps, _ := reach(t, data)
	path := filepath.Join(t.TempDir(), "intact.db")
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	before := records(t, path)
	targets := damageTargets(t, data, ways, ps)
	rng := rand.New(rand.NewPCG(36, 5))
	for _, tg := range targets {
		for _, how := range []string{"zeroed", "random bytes"} {
			t.Run(tg.name+" "+how, func(t *testing.T) {
				bad := slices.Clone(data)
				p := bad[int(tg.page)*ps : int(tg.page+1)*ps]
				if how == "zeroed" {
					clear(p)
				} else {
					for i := range p {
						p[i] = byte(rng.Uint32())
					}
				}
				rep, after := repairedAs(t, bad, true)
				kept := func(w way) bool { return !slices.Contains(w.pages, tg.page) }
				figures := checkSalvage(t, rep, before, after, ways, kept)
				if rep.Found.NProblems != 1 || rep.Found.Problems[0].Page != tg.page {
					t.Errorf("problems %v, want page %d alone", rep.Found.Problems, tg.page)
				}
				t.Logf("page %d: kept/had by kind %v", tg.page, figures)
			})
		}
	}
}

type damageTarget struct {
	name string
	page uint64
}

// damageTargets picks the pages TestDamagedPagesSalvaged damages.
func damageTargets(t *testing.T, data []byte, ways map[string]way, ps int) []damageTarget {
	t.Helper()
	le64 := binary.LittleEndian.Uint64
	m := data[pageHeaderSize:]
	if m1 := data[ps+pageHeaderSize:]; le64(m1[48:]) > le64(m[48:]) {
		m = m1
	}
	out := []damageTarget{{"the tree's root", le64(m[16:])}, {"the freelist", le64(m[32:])}}
	var leaf, branch uint64
	for k, w := range ways {
		if !strings.HasPrefix(k, "record channels/ch-1/msgs\x00") {
			continue
		}
		n := len(w.pages)
		leaf = w.pages[n-1]
		if n >= 2 && binary.LittleEndian.Uint16(data[int(w.pages[n-2])*ps+8:]) == flagBranch {
			branch = w.pages[n-2]
		}
		break
	}
	if branch == 0 {
		t.Fatal("ch-1's messages have no branch page: write more")
	}
	chRoot := ways["bucket channels/ch-2/ids"].pages
	return append(out, damageTarget{"a leaf of messages", leaf}, damageTarget{"a branch of messages", branch},
		damageTarget{"the page holding a channel's buckets", chRoot[len(chRoot)-1]})
}
