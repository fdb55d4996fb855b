package store

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/residentd/residentd/internal/channel"
)

// BenchmarkOpenCheck times Open's page-by-page check of a state file at
// the store's retention limits. Nothing bounds how many channels a file
// holds; what the store bounds is each channel: DefaultMaxChannelMessages
// (5,000) messages, each body at most channel.MaxBodyBytes (64 KiB). So:
//
//   - channel-at-cap: one channel at its maximum, 5,000 bodies of 64 KiB
//     (a file of about 330 MB: the most one channel can hold);
//   - 40-channels: 40 channels of 5,000 messages of 600 bytes each (the
//     context's default max_chars), many small pages rather than few big
//     ones (about 200,000 messages, four records each).
//
// The check reads every page in use once, so its time is linear in the
// file's size; the report gives both bytes/s (SetBytes is the file size)
// and the pages read.
func BenchmarkOpenCheck(b *testing.B) {
	for _, c := range []struct {
		name     string
		channels int
		body     int
	}{
		{"channel-at-cap", 1, channel.MaxBodyBytes},
		{"40-channels", 40, 600},
	} {
		b.Run(c.name, func(b *testing.B) {
			path := filepath.Join(b.TempDir(), "residentd.db")
			buildAtCap(b, path, c.channels, c.body)
			fi, err := os.Stat(path)
			if err != nil {
				b.Fatal(err)
			}
			b.SetBytes(fi.Size())
			b.ResetTimer()
			var rep CheckReport
			cpu0 := cpuTime(b)
			for range b.N {
				if rep, err = checkFile(path, time.Second); err != nil {
					b.Fatal(err)
				}
			}
			// The process's CPU time per check: on a shared machine the
			// wall time (ns/op) includes waiting for a core.
			b.ReportMetric(float64(cpuTime(b)-cpu0)/float64(time.Millisecond)/float64(b.N), "cpu-ms/op")
			b.ReportMetric(float64(rep.Read), "pages")
			b.ReportMetric(float64(fi.Size())/(1<<20), "MiB")
		})
	}
}

// cpuTime is the process's user and system time so far.
func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// buildAtCap writes channels channels of DefaultMaxChannelMessages
// messages of body bytes each through the store.
func buildAtCap(b *testing.B, path string, channels, body int) {
	b.Helper()
	s, err := Open(path, Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	text := strings.Repeat("x", body)
	const batch = 100
	for ch := range channels {
		id := fmt.Sprintf("ch-%03d", ch)
		for start := 0; start < DefaultMaxChannelMessages; start += batch {
			msgs := make([]channel.Message, 0, batch)
			for i := start; i < start+batch; i++ {
				msgs = append(msgs, channel.Message{ID: fmt.Sprintf("%s-m%05d", id, i), Channel: id, Author: "ann",
					AuthorKind: channel.KindUser, CreatedAt: t0.Add(time.Duration(i) * time.Second), Body: text})
			}
			if _, err := s.PutMessages(msgs); err != nil {
				b.Fatal(err)
			}
		}
	}
}
