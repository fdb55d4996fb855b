package store

import (
	"bytes"
	"os"
	"testing"

	"github.com/residentd/residentd/internal/channel"
	"github.com/residentd/residentd/internal/testkit"
)

// FuzzScanDamaged: the scan stands between a damaged file and bbolt, so it
// must survive any bytes. Each input overwrites part of a real state file;
// the scan and a repair's copy of it must end with a report or an error,
// never a panic, and a scan that reports no damage read every page it
// counted. The same file cut short where the patch starts must be scanned
// the same way, and reported damaged.
func FuzzScanDamaged(f *testing.F) {
	s := openTest(f, Options{})
	fill(f, s)
	var msgs []channel.Message
	for i := range 200 {
		msgs = append(msgs, msg("ch-f", "m"+string(rune('a'+i%26))+string(rune('a'+i/26)), i, ""))
	}
	if _, err := s.PutMessages(msgs); err != nil {
		f.Fatal(err)
	}
	if err := s.Close(); err != nil {
		f.Fatal(err)
	}
	base := testkit.ReadFile(f, s.Path())
	ps := os.Getpagesize()
	for id := range len(base) / ps {
		f.Add(uint32(id*ps), []byte{0xFF, 0xFF})            // page id
		f.Add(uint32(id*ps+8), []byte{0x07})                // page type
		f.Add(uint32(id*ps+10), []byte{0xFF, 0x7F})         // element count
		f.Add(uint32(id*ps+16+4), []byte{0xFF, 0xFF, 0x00}) // first element's position
	}
	f.Fuzz(func(t *testing.T, off uint32, patch []byte) {
		file := bytes.Clone(base)
		copy(file[int(off)%len(file):], patch)
		r := bytes.NewReader(file)
		rep, err := scan(r, int64(len(file)), "fuzz", nil)
		if err == nil && !rep.Damaged() && uint64(rep.Read) >= rep.Pages {
			t.Fatalf("an intact scan read %d pages of %d in use", rep.Read, rep.Pages)
		}
		_, _ = scan(r, int64(len(file)), "fuzz", countingVisitor{})

		short := file[:int(off)%len(file)]
		rep, err = scan(bytes.NewReader(short), int64(len(short)), "fuzz", countingVisitor{})
		if err == nil && !rep.Damaged() && int64(rep.Pages)*int64(rep.PageSize) > int64(len(short)) {
			t.Fatalf("a file cut to %d bytes, %d pages of %d in use, reported intact", len(short), rep.Pages, rep.PageSize)
		}
	})
}

// countingVisitor hears a scan and keeps nothing.
type countingVisitor struct{}

func (countingVisitor) bucket([][]byte, uint64) error         { return nil }
func (countingVisitor) record([][]byte, []byte, []byte) error { return nil }
