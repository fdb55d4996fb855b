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
//
// A file cut short (a copy or a disk that stopped part way) still has its
// meta pages, which say how many pages were in use: the scan reads the
// pages there are, and of a page the end of the file cuts through, the
// elements that lie wholly before it (bbolt writes a page's element
// headers first, then their keys and values in the same order, so those
// are a prefix). A page wholly past the end is lost like a damaged one.

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

// maxMapSize is the most bbolt maps on a 64-bit platform (256 TiB): a
// meta page that claims more pages in use is not bbolt's.
const maxMapSize = 1 << 48

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
	Bucket string // the bucket the page belongs to, as a path ("channels/ch-1/msgs"); "" for the root or a meta page
	Page   uint64 // the page id
	// Kind is "meta", "branch", "leaf", "freelist", "page" when its type
	// cannot be told, or "file" for a file cut short (Page is then the
	// first page it lacks).
	Kind    string
	Records int // records the page held by its header and the scan could not read; -1 when unknown (a branch hides a whole subtree, a page past the end of the file its count)
	Reason  string
}

func (p Problem) String() string {
	where := "page " + strconv.FormatUint(p.Page, 10)
	if p.Bucket != "" {
		where += " of bucket " + strconv.Quote(p.Bucket)
	}
	return fmt.Sprintf("%s (%s): %s", where, p.Kind, p.Reason)
}

// BucketCount is what a scan read of one kind of bucket: a top-level
// bucket ("watermarks", "runs"), or the same bucket of every channel, key
// or project, named with a "*" for them ("channels/*/msgs": the channels'
// messages; "conversations/*/turns"; "channels/*": each channel's own
// records, its count and sequence). See groupOf.
type BucketCount struct {
	Name        string
	Records     int // key/value records read
	Buckets     int // buckets of this kind read
	LostPages   int // pages of it that could not be read, or only in part
	LostRecords int // records those pages held by their headers and were not read (see LostUnknown)
	LostUnknown int // lost pages whose records cannot be counted: a branch page (its whole subtree), a page past the end of the file
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

// Damaged reports whether the scan found pages it could not use, or a
// file cut short.
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
	if need := int64(m.hwm) * int64(m.pageSize); size < need {
		// The meta page's checksum holds, so the file lost its end.
		s.problem(Problem{Page: uint64(size / int64(m.pageSize)), Kind: "file", Records: -1,
			Reason: fmt.Sprintf("the file is cut short: %d bytes, %d pages in use need %d; what the pages past its end held is lost", size, m.hwm, need)})
	}
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
	// A file shorter than the pages in use is a file cut short (scan
	// reports it), not a damaged meta page: the checksum holds.
	if m.hwm < 2 || m.hwm > maxMapSize/uint64(m.pageSize) {
		return meta{}, fmt.Errorf("%d pages in use", m.hwm)
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

// readPage reads page id and its overflow pages and returns them with
// how many of their bytes the file holds (fewer than len(p) when its end
// cuts through them; the rest of p is zero). Header damage is an error,
// with the page's first bytes when they could be read (so a loss can
// still be told by the header's type and count); so is a page whose
// header lies past the end of the file.
func (s *scanner) readPage(id uint64) (p []byte, avail int, err error) {
	if id < 2 || id >= s.m.hwm {
		return nil, 0, fmt.Errorf("page id out of range [2, %d)", s.m.hwm)
	}
	h := s.buffer(s.m.pageSize)
	off := int64(id) * int64(s.m.pageSize)
	n, err := s.readAt(h, off)
	if err != nil {
		return nil, 0, err
	}
	if n < pageHeaderSize {
		return nil, 0, fmt.Errorf("past the end of the file (%d bytes)", s.size)
	}
	if got := binary.LittleEndian.Uint64(h); got != id {
		return h, n, fmt.Errorf("header names page %d", got)
	}
	over := uint64(binary.LittleEndian.Uint32(h[12:]))
	if id+over >= s.m.hwm {
		return h, n, fmt.Errorf("%d overflow pages run past the pages in use", over)
	}
	if over == 0 {
		return h, n, nil
	}
	p = s.buffer(int(1+over) * s.m.pageSize)
	if n, err = s.readAt(p, off); err != nil {
		return nil, 0, err
	}
	return p, n, nil
}

// readAt reads b at off and returns how many bytes the file holds there:
// the end of the file is not an error (the rest of b is zeroed), any
// other failure to read is.
func (s *scanner) readAt(b []byte, off int64) (int, error) {
	n, err := s.r.ReadAt(b, off)
	if err != nil && !errors.Is(err, io.EOF) {
		return 0, fmt.Errorf("read: %w", err)
	}
	clear(b[n:]) // a reused buffer holds an earlier page
	return n, nil
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
	p, avail, err := s.readPage(id)
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
	if start+8*n > avail {
		bad("cut short by the end of the file")
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

// perEntity are the top-level buckets that hold a bucket per channel,
// key or project (see the layout in store.go).
var perEntity = map[string]bool{"channels": true, "conversations": true, "activity": true}

// groupOf names the kind of bucket at path for a report: the top-level
// bucket, or for one that holds a bucket per channel, key or project,
// "<top>/*" and the name under it ("channels/*/msgs"). "" is the root.
func groupOf(path [][]byte) string {
	if len(path) == 0 {
		return ""
	}
	top := printable(path[0])
	if !perEntity[top] || len(path) == 1 {
		return top
	}
	if len(path) == 2 {
		return top + "/*"
	}
	return top + "/*/" + printable(path[2])
}

// count returns the tally of the kind of bucket at path.
func (s *scanner) count(path [][]byte) *BucketCount {
	name := groupOf(path)
	c := s.top[name]
	if c == nil {
		c = &BucketCount{Name: name}
		s.top[name] = c
	}
	return c
}

// lose records a page that could not be used, or only in part: records
// is how many of its records were not read, -1 when unknown.
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
		return s.walkNode(path, 0, inline, len(inline), nil, nil)
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
	p, avail, err := s.readPage(id)
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
	return s.walkNode(path, id, p, avail, lo, hi)
}

// elements checks the page's elements and returns their keys, and for a
// leaf their values and flags, for a branch their child page ids.
type element struct {
	key, value []byte
	flags      uint32
	child      uint64
}

// parseNode reads the elements of page p, of which the file holds the
// first avail bytes: the elements that lie wholly in them, short when
// the end of the file cut off the rest.
func parseNode(p []byte, avail int, lo, hi []byte) (branch bool, els []element, short bool, err error) {
	flags := binary.LittleEndian.Uint16(p[8:])
	switch flags {
	case flagBranch:
		branch = true
	case flagLeaf:
	default:
		return false, nil, false, fmt.Errorf("page type %#x, want branch or leaf", flags)
	}
	n := int(binary.LittleEndian.Uint16(p[10:]))
	if pageHeaderSize+n*elementSize > len(p) {
		return branch, nil, false, fmt.Errorf("%d elements do not fit the page", n)
	}
	if branch && n == 0 {
		return branch, nil, false, errors.New("empty branch page")
	}
	els = make([]element, 0, n)
	prev := lo
	for i := range n {
		at := pageHeaderSize + i*elementSize
		if at+elementSize > avail {
			return branch, els, true, nil
		}
		var el element
		start, ks, vs, err := el.decode(p, at, branch)
		if err != nil {
			return branch, nil, false, fmt.Errorf("element %d %w", i, err)
		}
		if start+ks+vs > uint64(avail) {
			return branch, els, true, nil
		}
		el.key, el.value = p[start:start+ks], p[start+ks:start+ks+vs]
		if err := el.check(prev, hi, i > 0); err != nil {
			return branch, nil, false, fmt.Errorf("element %d: %w", i, err)
		}
		els = append(els, el)
		prev = el.key
	}
	return branch, els, false, nil
}

// decode reads the element header at offset at of page p: its flags or
// child page, and where its key (ks bytes from start) and value (vs bytes
// after it) lie in p.
func (el *element) decode(p []byte, at int, branch bool) (start, ks, vs uint64, err error) {
	e := p[at : at+elementSize]
	var pos uint64
	if branch {
		pos, ks = uint64(binary.LittleEndian.Uint32(e[0:])), uint64(binary.LittleEndian.Uint32(e[4:]))
		el.child = binary.LittleEndian.Uint64(e[8:])
	} else {
		el.flags = binary.LittleEndian.Uint32(e[0:])
		pos, ks, vs = uint64(binary.LittleEndian.Uint32(e[4:])), uint64(binary.LittleEndian.Uint32(e[8:])), uint64(binary.LittleEndian.Uint32(e[12:]))
		if el.flags&^leafBucket != 0 {
			return 0, 0, 0, fmt.Errorf("has flags %#x", el.flags)
		}
	}
	start = uint64(at) + pos
	if pos < uint64(elementSize) || start+ks+vs > uint64(len(p)) {
		return 0, 0, 0, errors.New("lies outside the page")
	}
	return start, ks, vs, nil
}

// check checks a decoded element: a key, after prev (strictly when the
// element is not its page's first) and before hi, and a bucket's value
// long enough for its header.
func (el *element) check(prev, hi []byte, notFirst bool) error {
	k := el.key
	if len(k) == 0 {
		return errors.New("an empty key")
	}
	if prev != nil && (bytes.Compare(k, prev) < 0 || (notFirst && bytes.Equal(k, prev))) {
		return errors.New("keys out of order")
	}
	if hi != nil && bytes.Compare(k, hi) >= 0 {
		return errors.New("key beyond the parent's range")
	}
	if el.flags&leafBucket != 0 && len(el.value) < bucketHeaderSize {
		return fmt.Errorf("bucket value of %d bytes", len(el.value))
	}
	return nil
}

// walkNode reads a branch or leaf page (id 0: an inline bucket's page)
// of which the file holds the first avail bytes.
func (s *scanner) walkNode(path [][]byte, id uint64, p []byte, avail int, lo, hi []byte) error {
	if len(p) < pageHeaderSize {
		s.lose(path, id, "leaf", -1, "inline bucket shorter than a page header")
		return nil
	}
	branch, els, short, err := parseNode(p, avail, lo, hi)
	if err != nil {
		s.lose(path, id, kindOf(p), headerCount(p), err.Error())
		return nil
	}
	if short {
		n, missing := int(binary.LittleEndian.Uint16(p[10:])), -1
		if !branch {
			missing = n - len(els)
		}
		s.lose(path, id, kindOf(p), missing, fmt.Sprintf("cut short by the end of the file: %d of its %d elements read", len(els), n))
	}
	if !branch {
		return s.walkLeaf(path, id, els)
	}
	for i, e := range els {
		next := hi
		if i+1 < len(els) {
			next = els[i+1].key
		}
		if err := s.walkPage(path, e.child, e.key, next); err != nil {
			return err
		}
	}
	return nil
}

// walkLeaf reads the elements of leaf page id: records, and buckets.
func (s *scanner) walkLeaf(path [][]byte, id uint64, els []element) error {
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
	// A file cut short holds fewer pages than are in use.
	end := min(s.m.hwm, uint64((s.size+int64(s.m.pageSize)-1)/int64(s.m.pageSize)))
	for id := uint64(2); id < end; id++ {
		if s.seen[id] || s.free[id] {
			continue
		}
		p, _, err := s.readPage(id)
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
