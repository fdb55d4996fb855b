package store

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"
)

// scan reads a bbolt file page by page with bounds-checked reads, never
// through bbolt's mapping: it is how Open checks a file before bbolt may
// panic on it, and how Repair salvages one bbolt can no longer open. It
// follows bbolt's on-disk format (version 2, little-endian): two meta
// pages, then a B+tree of branch and leaf pages per bucket, a bucket's
// root either a page of its own or inline in its parent's leaf value.
//
// A page is intact when its header names its own id and a branch or leaf
// type, its elements lie inside it, its keys ascend within the range its
// parent gives it, and no other page points at it. bbolt keeps no
// checksums of data pages, so bytes changed inside a value are not seen.

// On-disk layout of bbolt's format version 2.
const (
	pageHeaderSize   = 16 // id u64, flags u16, count u16, overflow u32
	elementSize      = 16 // leaf: flags, pos, ksize, vsize (u32); branch: pos, ksize (u32), pgid (u64)
	bucketHeaderSize = 16 // root pgid u64, sequence u64
	metaSize         = 64 // magic, version, page size, flags (u32); root bucket; freelist, pgid, txid, checksum (u64)

	flagBranch   = 0x01
	flagLeaf     = 0x02
	flagMeta     = 0x04
	flagFreelist = 0x10
	leafBucket   = 0x01 // a leaf element whose value is a bucket

	boltMagic   = 0xED0CDAED
	boltVersion = 2
	noFreelist  = ^uint64(0)
)

// maxPageSize bounds the page size a meta page may claim (bbolt uses the
// OS page size: 4 KiB, 16 KiB, 64 KiB).
const maxPageSize = 1 << 20

// maxProblems bounds the problems a report lists; the count goes on.
const maxProblems = 50

// meta is one decoded, checksummed meta page.
type meta struct {
	page     uint64 // 0 or 1
	pageSize int
	root     uint64
	rootSeq  uint64
	freelist uint64
	hwm      uint64 // pages below it are in use or free
	txid     uint64
}

// Problem is one page a scan could not use.
type Problem struct {
	Bucket  string // the bucket the page belongs to, as a path ("channels/ch-1/msgs"); "" for the root or a meta page
	Page    uint64 // the page id
	Kind    string // "meta", "branch", "leaf", "freelist" or "page" when its type cannot be told
	Records int    // records the page held by its header; -1 when unknown (a branch hides a whole subtree)
	Reason  string
}

func (p Problem) String() string {
	where := "page " + strconv.FormatUint(p.Page, 10)
	if p.Bucket != "" {
		where += " of bucket " + strconv.Quote(p.Bucket)
	}
	return fmt.Sprintf("%s (%s): %s", where, p.Kind, p.Reason)
}

// BucketCount is what a scan read of one top-level bucket.
type BucketCount struct {
	Name        string
	Records     int // key/value records read, in the bucket and the buckets under it
	Buckets     int // nested buckets read
	LostPages   int // pages of it that could not be read
	LostRecords int // records those pages held by their headers (branch pages not counted: see LostUnknown)
	LostUnknown int // lost branch pages: what their subtrees held is unknown
}

// CheckReport is what a scan of a state file found.
type CheckReport struct {
	Path      string
	Size      int64 // bytes
	PageSize  int
	Pages     uint64 // pages in use or free (the high-water mark)
	Read      int    // pages read
	Meta      uint64 // the meta page used
	TxID      uint64 // the transaction it records
	MetaNotes []string
	Buckets   []BucketCount
	Problems  []Problem // the first maxProblems
	NProblems int
	// Orphans are pages below the high-water mark that no intact page
	// points to and the freelist does not hold: a lost branch page's
	// subtree. Their records cannot be placed in a bucket.
	Orphans       int
	OrphanRecords int
	Took          time.Duration // how long the scan took (Open's check)
}

// Damaged reports whether the scan found pages it could not use.
func (r *CheckReport) Damaged() bool { return r.NProblems > 0 }

// Summary is the report's first problems, one per line.
func (r *CheckReport) Summary() string {
	var b strings.Builder
	for i, p := range r.Problems {
		if i == 3 {
			fmt.Fprintf(&b, "; and %d more", r.NProblems-3)
			break
		}
		if i > 0 {
			b.WriteString("; ")
		}
		b.WriteString(p.String())
	}
	return b.String()
}

// visitor hears what a scan reads, in key order within each bucket.
type visitor interface {
	bucket(path [][]byte, seq uint64) error
	record(path [][]byte, k, v []byte) error
}

type scanner struct {
	r     io.ReaderAt
	size  int64
	m     meta
	seen  map[uint64]bool // pages reached, overflow included
	free  map[uint64]bool // pages the freelist holds
	visit visitor         // nil: check only
	depth int             // pages being walked, root to current (0 outside the walk)
	bufs  [][]byte        // a check's page buffer per depth
	rep   *CheckReport
	top   map[string]*BucketCount
}

// scanFile scans the file at path; visit, if not nil, hears every intact
// bucket and record. The error is for a file that cannot be read or holds
// no intact meta page; damage below the meta pages is in the report.
func scanFile(path string, visit visitor) (*CheckReport, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	return scanOpen(f, fi.Size(), path, visit)
}

// scanOpen scans the open file f of size bytes with pread, a page at a
// time: an I/O error is that page's read error, never a fault. (A window
// of several pages per read was no faster: a tree's pages are spread over
// the file by its commits; a mapping costs a page fault per page.)
func scanOpen(f *os.File, size int64, path string, visit visitor) (*CheckReport, error) {
	return scan(f, size, path, visit)
}

func scan(r io.ReaderAt, size int64, path string, visit visitor) (*CheckReport, error) {
	rep := &CheckReport{Path: path, Size: size}
	s := &scanner{r: r, size: size, seen: map[uint64]bool{0: true, 1: true}, free: map[uint64]bool{},
		visit: visit, rep: rep, top: map[string]*BucketCount{}}
	m, err := s.chooseMeta()
	if err != nil {
		return rep, err
	}
	s.m = m
	rep.PageSize, rep.Pages, rep.Meta, rep.TxID = m.pageSize, m.hwm, m.page, m.txid
	s.readFreelist()
	if err := s.walkBucket(nil, m.root, m.rootSeq, nil); err != nil {
		return rep, err
	}
	s.findOrphans()
	for _, name := range slices.Sorted(maps.Keys(s.top)) {
		rep.Buckets = append(rep.Buckets, *s.top[name])
	}
	return rep, nil
}

func (s *scanner) problem(p Problem) {
	s.rep.NProblems++
	if len(s.rep.Problems) < maxProblems {
		s.rep.Problems = append(s.rep.Problems, p)
	}
}

// readMeta decodes the meta page at off, or says why it cannot be used.
func (s *scanner) readMeta(id uint64, off int64) (meta, error) {
	buf := make([]byte, pageHeaderSize+metaSize)
	if _, err := s.r.ReadAt(buf, off); err != nil {
		return meta{}, fmt.Errorf("read: %w", err)
	}
	h, b := buf[:pageHeaderSize], buf[pageHeaderSize:]
	if got := binary.LittleEndian.Uint16(h[8:]); got != flagMeta {
		return meta{}, fmt.Errorf("page type %#x, want meta", got)
	}
	if binary.LittleEndian.Uint32(b[0:]) != boltMagic {
		return meta{}, errors.New("not a bbolt meta page (magic)")
	}
	if v := binary.LittleEndian.Uint32(b[4:]); v != boltVersion {
		return meta{}, fmt.Errorf("format version %d, want %d", v, boltVersion)
	}
	sum := fnv.New64a()
	sum.Write(b[:56])
	if sum.Sum64() != binary.LittleEndian.Uint64(b[56:]) {
		return meta{}, errors.New("checksum mismatch")
	}
	m := meta{
		page:     id,
		pageSize: int(binary.LittleEndian.Uint32(b[8:])),
		root:     binary.LittleEndian.Uint64(b[16:]),
		rootSeq:  binary.LittleEndian.Uint64(b[24:]),
		freelist: binary.LittleEndian.Uint64(b[32:]),
		hwm:      binary.LittleEndian.Uint64(b[40:]),
		txid:     binary.LittleEndian.Uint64(b[48:]),
	}
	if m.pageSize < 512 || m.pageSize > maxPageSize || m.pageSize&(m.pageSize-1) != 0 || off != int64(id)*int64(m.pageSize) {
		return meta{}, fmt.Errorf("page size %d", m.pageSize)
	}
	if m.hwm < 2 || m.hwm > uint64(s.size)/uint64(m.pageSize) {
		return meta{}, fmt.Errorf("%d pages in use, the file holds %d", m.hwm, s.size/int64(m.pageSize))
	}
	if m.root < 2 || m.root >= m.hwm {
		return meta{}, fmt.Errorf("root page %d out of range", m.root)
	}
	return m, nil
}

// chooseMeta picks the meta page bbolt would use: the valid one with the
// newer transaction. A damaged one is noted; when it was the newer one,
// the file is read as of the transaction before (bbolt does the same and
// never reuses the pages that state needs).
func (s *scanner) chooseMeta() (meta, error) {
	m0, err0 := s.readMeta(0, 0)
	// Without meta page 0 the page size is unknown: try the sizes bbolt
	// uses (the OS page size, typically one of these).
	sizes := []int{os.Getpagesize(), 4096, 8192, 16384, 65536}
	if err0 == nil {
		sizes = []int{m0.pageSize}
	}
	var m1 meta
	err1 := errors.New("not found")
	for _, ps := range sizes {
		if m1, err1 = s.readMeta(1, int64(ps)); err1 == nil {
			break
		}
	}
	switch {
	case err0 != nil && err1 != nil:
		return meta{}, fmt.Errorf("%w: no intact meta page (page 0: %v; page 1: %v); the file may not be a residentd state file",
			ErrDamaged, err0, err1)
	case err0 != nil:
		s.rep.MetaNotes = append(s.rep.MetaNotes, fmt.Sprintf("meta page 0 is damaged (%v); using meta page 1 (transaction %d): if page 0 was the newer, the last write before the damage is lost", err0, m1.txid))
		return m1, nil
	case err1 != nil:
		s.rep.MetaNotes = append(s.rep.MetaNotes, fmt.Sprintf("meta page 1 is damaged (%v); using meta page 0 (transaction %d): if page 1 was the newer, the last write before the damage is lost", err1, m0.txid))
		return m0, nil
	case m1.txid > m0.txid:
		return m1, nil
	}
	return m0, nil
}

// readPage reads page id and its overflow pages; header damage is an
// error, with the page's first bytes when they could be read (so a loss
// can still be told by the header's type and count).
func (s *scanner) readPage(id uint64) ([]byte, error) {
	if id < 2 || id >= s.m.hwm {
		return nil, fmt.Errorf("page id out of range [2, %d)", s.m.hwm)
	}
	h := s.buffer(s.m.pageSize)
	off := int64(id) * int64(s.m.pageSize)
	if _, err := s.r.ReadAt(h, off); err != nil {
		return nil, fmt.Errorf("read: %w", err)
	}
	if got := binary.LittleEndian.Uint64(h); got != id {
		return h, fmt.Errorf("header names page %d", got)
	}
	over := uint64(binary.LittleEndian.Uint32(h[12:]))
	if id+over >= s.m.hwm {
		return h, fmt.Errorf("%d overflow pages run past the pages in use", over)
	}
	if over == 0 {
		return h, nil
	}
	p := s.buffer(int(1+over) * s.m.pageSize)
	if _, err := s.r.ReadAt(p, off); err != nil {
		return nil, fmt.Errorf("read: %w", err)
	}
	return p, nil
}

// buffer returns n bytes to read a page into. A check reuses one buffer
// per tree depth (a page's keys bound its children's, so its buffer lives
// while they are read); a repair keeps every page, as bbolt holds the
// slices it is given until the copy's transaction commits.
func (s *scanner) buffer(n int) []byte {
	if s.visit != nil || s.depth == 0 {
		return make([]byte, n)
	}
	for len(s.bufs) < s.depth {
		s.bufs = append(s.bufs, nil)
	}
	b := s.bufs[s.depth-1]
	if cap(b) < n {
		b = make([]byte, n)
		s.bufs[s.depth-1] = b
	}
	return b[:n]
}

// readFreelist collects the free page ids; a damaged freelist is a
// problem (bbolt panics loading it) but not a loss: Repair writes a new one.
func (s *scanner) readFreelist() {
	id := s.m.freelist
	if id == noFreelist {
		return
	}
	bad := func(reason string) {
		s.problem(Problem{Page: id, Kind: "freelist", Records: 0, Reason: reason})
		s.free = map[uint64]bool{}
	}
	p, err := s.readPage(id)
	if err != nil {
		bad(err.Error())
		return
	}
	s.seen[id] = true
	if f := binary.LittleEndian.Uint16(p[8:]); f != flagFreelist {
		bad(fmt.Sprintf("page type %#x, want freelist", f))
		return
	}
	over := uint64(binary.LittleEndian.Uint32(p[12:]))
	for i := uint64(0); i <= over; i++ {
		s.seen[id+i] = true
	}
	n, start := int(binary.LittleEndian.Uint16(p[10:])), pageHeaderSize
	if n == 0xFFFF { // the count is the first element
		n64 := binary.LittleEndian.Uint64(p[pageHeaderSize:])
		if n64 > uint64(len(p)) {
			bad(fmt.Sprintf("%d free ids do not fit the page", n64))
			return
		}
		n, start = int(n64), pageHeaderSize+8
	}
	if start+8*n > len(p) {
		bad(fmt.Sprintf("%d free ids do not fit the page", n))
		return
	}
	for i := 0; i < n; i++ {
		fid := binary.LittleEndian.Uint64(p[start+8*i:])
		if fid < 2 || fid >= s.m.hwm {
			bad(fmt.Sprintf("free id %d out of range", fid))
			return
		}
		s.free[fid] = true
	}
}

// count returns the top-level bucket's tally for path.
func (s *scanner) count(path [][]byte) *BucketCount {
	name := ""
	if len(path) > 0 {
		name = printable(path[0])
	}
	c := s.top[name]
	if c == nil {
		c = &BucketCount{Name: name}
		s.top[name] = c
	}
	return c
}

// lose records a page that could not be used.
func (s *scanner) lose(path [][]byte, id uint64, kind string, records int, reason string) {
	c := s.count(path)
	c.LostPages++
	if kind == "branch" || records < 0 {
		c.LostUnknown++
		records = -1
	} else {
		c.LostRecords += records
	}
	s.problem(Problem{Bucket: pathString(path), Page: id, Kind: kind, Records: records, Reason: reason})
}

// walkBucket reads the bucket at path: its root page, or its inline page.
func (s *scanner) walkBucket(path [][]byte, root, seq uint64, inline []byte) error {
	if s.visit != nil && len(path) > 0 {
		if err := s.visit.bucket(path, seq); err != nil {
			return err
		}
	}
	if len(path) > 0 {
		s.count(path).Buckets++
	}
	if root == 0 {
		return s.walkNode(path, 0, inline, nil, nil)
	}
	return s.walkPage(path, root, nil, nil)
}

// walkPage reads page id of the bucket at path, whose keys lie in [lo, hi)
// (nil: unbounded).
func (s *scanner) walkPage(path [][]byte, id uint64, lo, hi []byte) error {
	s.depth++
	defer func() { s.depth-- }()
	if s.seen[id] {
		s.lose(path, id, "page", -1, "pointed to twice (or is a meta or freelist page)")
		return nil
	}
	p, err := s.readPage(id)
	if err != nil {
		s.lose(path, id, kindOf(p), headerCount(p), err.Error())
		return nil
	}
	over := uint64(binary.LittleEndian.Uint32(p[12:]))
	for i := uint64(0); i <= over; i++ {
		s.seen[id+i] = true
	}
	s.rep.Read++
	if s.free[id] {
		s.lose(path, id, kindOf(p), headerCount(p), "reachable but on the freelist: a later write would overwrite it")
		return nil
	}
	return s.walkNode(path, id, p, lo, hi)
}

// elements checks the page's elements and returns their keys, and for a
// leaf their values and flags, for a branch their child page ids.
type element struct {
	key, value []byte
	flags      uint32
	child      uint64
}

func parseNode(p []byte, lo, hi []byte) (branch bool, els []element, err error) {
	flags := binary.LittleEndian.Uint16(p[8:])
	switch flags {
	case flagBranch:
		branch = true
	case flagLeaf:
	default:
		return false, nil, fmt.Errorf("page type %#x, want branch or leaf", flags)
	}
	n := int(binary.LittleEndian.Uint16(p[10:]))
	if pageHeaderSize+n*elementSize > len(p) {
		return branch, nil, fmt.Errorf("%d elements do not fit the page", n)
	}
	if branch && n == 0 {
		return branch, nil, errors.New("empty branch page")
	}
	els = make([]element, n)
	prev := lo
	for i := range els {
		at := pageHeaderSize + i*elementSize
		e := p[at : at+elementSize]
		var pos, ks, vs uint64
		if branch {
			pos, ks = uint64(binary.LittleEndian.Uint32(e[0:])), uint64(binary.LittleEndian.Uint32(e[4:]))
			els[i].child = binary.LittleEndian.Uint64(e[8:])
		} else {
			els[i].flags = binary.LittleEndian.Uint32(e[0:])
			pos, ks, vs = uint64(binary.LittleEndian.Uint32(e[4:])), uint64(binary.LittleEndian.Uint32(e[8:])), uint64(binary.LittleEndian.Uint32(e[12:]))
			if els[i].flags&^leafBucket != 0 {
				return branch, nil, fmt.Errorf("element %d has flags %#x", i, els[i].flags)
			}
		}
		start := uint64(at) + pos
		if pos < uint64(elementSize) || start+ks+vs > uint64(len(p)) {
			return branch, nil, fmt.Errorf("element %d lies outside the page", i)
		}
		els[i].key = p[start : start+ks]
		els[i].value = p[start+ks : start+ks+vs]
		k := els[i].key
		if len(k) == 0 {
			return branch, nil, fmt.Errorf("element %d has an empty key", i)
		}
		if prev != nil && (bytes.Compare(k, prev) < 0 || (i > 0 && bytes.Equal(k, prev))) {
			return branch, nil, fmt.Errorf("element %d: keys out of order", i)
		}
		if hi != nil && bytes.Compare(k, hi) >= 0 {
			return branch, nil, fmt.Errorf("element %d: key beyond the parent's range", i)
		}
		if els[i].flags&leafBucket != 0 && len(els[i].value) < bucketHeaderSize {
			return branch, nil, fmt.Errorf("element %d: bucket value of %d bytes", i, len(els[i].value))
		}
		prev = k
	}
	return branch, els, nil
}

// walkNode reads a branch or leaf page (id 0: an inline bucket's page).
func (s *scanner) walkNode(path [][]byte, id uint64, p []byte, lo, hi []byte) error {
	if len(p) < pageHeaderSize {
		s.lose(path, id, "leaf", -1, "inline bucket shorter than a page header")
		return nil
	}
	branch, els, err := parseNode(p, lo, hi)
	if err != nil {
		s.lose(path, id, kindOf(p), headerCount(p), err.Error())
		return nil
	}
	if branch {
		for i, e := range els {
			var next []byte
			if i+1 < len(els) {
				next = els[i+1].key
			} else {
				next = hi
			}
			if err := s.walkPage(path, e.child, e.key, next); err != nil {
				return err
			}
		}
		return nil
	}
	for _, e := range els {
		if e.flags&leafBucket == 0 {
			if len(path) == 0 {
				// The root holds buckets only; a plain record there is
				// not bbolt's.
				s.lose(path, id, "leaf", -1, "a record in the root bucket")
				continue
			}
			s.count(path).Records++
			if s.visit != nil {
				if err := s.visit.record(path, e.key, e.value); err != nil {
					return err
				}
			}
			continue
		}
		root := binary.LittleEndian.Uint64(e.value)
		seq := binary.LittleEndian.Uint64(e.value[8:])
		sub := append(append([][]byte(nil), path...), e.key)
		var inline []byte
		if root == 0 {
			inline = e.value[bucketHeaderSize:]
		}
		if err := s.walkBucket(sub, root, seq, inline); err != nil {
			return err
		}
	}
	return nil
}

// findOrphans counts the pages nothing intact points to and the freelist
// does not hold, and the records of those that read as leaf pages.
func (s *scanner) findOrphans() {
	if s.rep.NProblems == 0 {
		return // an intact tree can leave only leaks, not losses
	}
	for id := uint64(2); id < s.m.hwm; id++ {
		if s.seen[id] || s.free[id] {
			continue
		}
		p, err := s.readPage(id)
		if err != nil {
			continue // an overflow page, or damaged beyond telling
		}
		if binary.LittleEndian.Uint16(p[8:]) == flagLeaf {
			s.rep.Orphans++
			if n := headerCount(p); n > 0 {
				s.rep.OrphanRecords += n
			}
		}
		over := uint64(binary.LittleEndian.Uint32(p[12:]))
		for i := uint64(0); i <= over; i++ {
			s.seen[id+i] = true
		}
	}
}

// kindOf names a page's type from its header, "page" if it is neither.
func kindOf(p []byte) string {
	if len(p) >= pageHeaderSize {
		switch binary.LittleEndian.Uint16(p[8:]) {
		case flagBranch:
			return "branch"
		case flagLeaf:
			return "leaf"
		}
	}
	return "page"
}

// headerCount is a leaf page's element count when its header is plausible,
// else -1.
func headerCount(p []byte) int {
	if kindOf(p) != "leaf" {
		return -1
	}
	n := int(binary.LittleEndian.Uint16(p[10:]))
	if pageHeaderSize+n*elementSize > len(p) {
		return -1
	}
	return n
}

// pathString joins a bucket path with "/", each name printable.
func pathString(path [][]byte) string {
	parts := make([]string, len(path))
	for i, p := range path {
		parts[i] = printable(p)
	}
	return strings.Join(parts, "/")
}

// printable is a bucket name as text, or quoted when it is binary.
func printable(b []byte) string {
	for _, c := range b {
		if c < 0x20 || c >= 0x7f || c == '/' {
			return strconv.QuoteToASCII(string(b))
		}
	}
	return string(b)
}
