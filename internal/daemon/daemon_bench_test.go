package daemon

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/residentd/residentd/apitype"
	"github.com/residentd/residentd/internal/acp"
	"github.com/residentd/residentd/internal/config"
	"github.com/residentd/residentd/internal/metrics"
	"github.com/residentd/residentd/internal/session"
	"github.com/residentd/residentd/internal/store"
)

// benchDaemon is a daemon on a real bbolt file whose binding runs this test
// binary as the built-in agent (TestMain), stopped when b ends.
func benchDaemon(b *testing.B) *Daemon {
	b.Helper()
	exe, err := os.Executable()
	if err != nil {
		b.Fatal(err)
	}
	dir := b.TempDir()
	cfg := &config.Config{StateDir: dir, AgentGrace: config.Duration(2 * time.Second)}
	cfg.Bindings = []config.Binding{{
		ID: "b-builtin", Handle: "@agent", Runtime: "builtin:test", Command: exe,
		Args: []string{"agent"}, Env: map[string]string{"RESIDENTD_TEST_AGENT": "1"},
		System: config.BuiltinFraming, Supervised: true, Resident: true,
	}}
	cfg.SetDefaults()
	st, err := store.Open(filepath.Join(dir, "residentd.db"), store.Options{})
	if err != nil {
		b.Fatal(err)
	}
	d, err := New(Options{Config: cfg, Store: st, Metrics: metrics.New("bench", nil), Log: zap.NewNop()})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		d.Close(5 * time.Second)
		st.Close()
	})
	return d
}

func benchTurn(b *testing.B, d *Daemon, ch string) apitype.Event {
	done, err := d.Turn(context.Background(), apitype.TurnRequest{Channel: ch, Binding: "b-builtin", MessageID: "q", Text: "@agent why is the refund spec flaky?"},
		func(apitype.Event) {})
	if err != nil {
		b.Fatal(err)
	}
	return done
}

// BenchmarkWarmTurn is one warm turn of the daemon: lease, compose, ACP
// prompt to a live built-in agent, conversation append.
func BenchmarkWarmTurn(b *testing.B) {
	d := benchDaemon(b)
	benchTurn(b, d, "ch")
	b.ResetTimer()
	for range b.N {
		if ev := benchTurn(b, d, "ch"); ev.Shape != "warm" {
			b.Fatalf("shape %s", ev.Shape)
		}
	}
}

// BenchmarkColdTurn is one cold turn: spawn + initialize + session/new +
// prompt (the key is started fresh before each turn, outside the timer).
func BenchmarkColdTurn(b *testing.B) {
	d := benchDaemon(b)
	k := session.Key{Channel: "ch", Binding: "b-builtin"}
	for range b.N {
		b.StopTimer()
		if _, err := d.Fresh(k); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		if ev := benchTurn(b, d, "ch"); ev.Shape != "cold" {
			b.Fatalf("shape %s", ev.Shape)
		}
	}
}

// BenchmarkSessionReady is the time from starting an agent process to a
// ready native session (spawn + initialize + session/new).
func BenchmarkSessionReady(b *testing.B) {
	exe, err := os.Executable()
	if err != nil {
		b.Fatal(err)
	}
	spec := acp.Spec{Command: exe, Args: []string{"agent"}, Env: []string{"RESIDENTD_TEST_AGENT=1"}, Dir: b.TempDir(), Grace: 2 * time.Second}
	for range b.N {
		a, err := acp.Start(context.Background(), spec, zap.NewNop())
		if err != nil {
			b.Fatal(err)
		}
		if _, err := a.NewSession(context.Background()); err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		a.Close()
		b.StartTimer()
	}
}

// BenchmarkWarmTurnsParallel4 keeps four keys busy at once (four channels,
// four live agents) and reports the aggregate warm turns per second.
func BenchmarkWarmTurnsParallel4(b *testing.B) {
	d := benchDaemon(b)
	for i := range 4 {
		benchTurn(b, d, fmt.Sprintf("ch-%d", i))
	}
	var next atomic.Int64
	// Four goroutines whatever GOMAXPROCS is: parallelism p gives p*GOMAXPROCS.
	b.SetParallelism((4 + runtime.GOMAXPROCS(0) - 1) / runtime.GOMAXPROCS(0))
	start := time.Now()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		ch := fmt.Sprintf("ch-%d", next.Add(1)%4)
		for pb.Next() {
			benchTurn(b, d, ch)
		}
	})
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "turns/s")
}

// BenchmarkResidentSoak runs b.N warm turns round-robin over four live
// sessions and reports the daemon's goroutines and open files before and
// after, and the RSS of the daemon and of its four agents. The agents' is
// also sampled after one turn each (start) and after a fifth of the turns
// (warm, once each Go heap has reached its steady size); growth is from warm
// to the end. Run it long with -benchtime 10000x.
func BenchmarkResidentSoak(b *testing.B) {
	d := benchDaemon(b)
	for i := range 4 {
		benchTurn(b, d, fmt.Sprintf("ch-%d", i))
	}
	runtime.GC()
	g0, fd0 := runtime.NumGoroutine(), openFiles(b)
	agents0 := agentsRSSKB(b, d)
	var agentsWarm int64
	b.ResetTimer()
	for i := range b.N {
		if i == b.N/5 {
			b.StopTimer()
			agentsWarm = agentsRSSKB(b, d)
			b.StartTimer()
		}
		benchTurn(b, d, fmt.Sprintf("ch-%d", i%4))
	}
	b.StopTimer()
	runtime.GC()
	// Goroutines of finished turns may still be unwinding; give them a
	// bounded moment to go before counting.
	g1 := runtime.NumGoroutine()
	for deadline := time.Now().Add(2 * time.Second); g1 > g0 && time.Now().Before(deadline); g1 = runtime.NumGoroutine() {
		time.Sleep(10 * time.Millisecond)
	}
	fd1 := openFiles(b)
	agents := agentsRSSKB(b, d)
	infos := d.pool.Sessions()
	b.ReportMetric(float64(g0), "goroutines-before")
	b.ReportMetric(float64(g1), "goroutines-after")
	b.ReportMetric(float64(fd0), "fds-before")
	b.ReportMetric(float64(fd1), "fds-after")
	b.ReportMetric(float64(len(infos)), "live-agents")
	b.ReportMetric(float64(rssKB(b, "self"))/1024, "daemon-rss-MB")
	b.ReportMetric(float64(agents0)/1024, "agents-rss-MB-start")
	b.ReportMetric(float64(agentsWarm)/1024, "agents-rss-MB-warm")
	b.ReportMetric(float64(agents)/1024, "agents-rss-MB")
	if agentsWarm > 0 {
		b.ReportMetric(100*float64(agents-agentsWarm)/float64(agentsWarm), "agents-rss-growth-%")
	}
	if len(infos) != 4 || g1 > g0+2 || fd1 > fd0+2 {
		b.Fatalf("after %d turns: %d live agents, goroutines %d -> %d, fds %d -> %d", b.N, len(infos), g0, g1, fd0, fd1)
	}
}

// agentsRSSKB is the summed RSS of the daemon's live agents.
func agentsRSSKB(b *testing.B, d *Daemon) int64 {
	var kb int64
	for _, in := range d.pool.Sessions() {
		kb += rssKB(b, strconv.Itoa(in.Pid))
	}
	return kb
}

func openFiles(b *testing.B) int {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		b.Skipf("no /proc/self/fd on this system: %v", err)
	}
	return len(ents)
}

// rssKB reads VmRSS of /proc/<pid>/status.
func rssKB(b *testing.B, pid string) int64 {
	f, err := os.Open("/proc/" + pid + "/status")
	if err != nil {
		b.Skipf("no /proc on this system: %v", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			n, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return n
		}
	}
	return 0
}
