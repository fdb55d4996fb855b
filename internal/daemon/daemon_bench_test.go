package daemon_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/zap"

	"github.com/residentd/residentd/apitype"
	"github.com/residentd/residentd/internal/acp"
	"github.com/residentd/residentd/internal/config"
	"github.com/residentd/residentd/internal/daemon"
	"github.com/residentd/residentd/internal/daemontest"
	"github.com/residentd/residentd/internal/session"
)

// benchDaemon is a daemon on a real bbolt file whose binding runs this test
// binary as the built-in agent (TestMain), stopped when b ends.
func benchDaemon(b *testing.B) *daemontest.Daemon {
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
		System: config.BuiltinFraming, Supervised: true, Resident: true, Spare: new(int),
	}}
	return daemontest.New(b, cfg, daemontest.Options{Log: zap.NewNop()})
}

func benchTurn(b *testing.B, d *daemon.Daemon, ch string) apitype.Event {
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
	h := benchDaemon(b)
	d := h.Daemon
	benchTurn(b, d, "ch")
	start := time.Now()
	b.ResetTimer()
	for range b.N {
		if ev := benchTurn(b, d, "ch"); ev.Shape != "warm" {
			b.Fatalf("shape %s", ev.Shape)
		}
	}
	// Compare with BenchmarkWarmTurnsParallel4's turns/s in the same run.
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "turns/s")
}

// BenchmarkColdTurn is one cold turn: spawn + initialize + session/new +
// prompt (the key is started fresh before each turn, outside the timer).
// It reports the store commits per turn (each one two fsyncs).
func BenchmarkColdTurn(b *testing.B) {
	h := benchDaemon(b)
	d := h.Daemon
	k := session.Key{Channel: "ch", Binding: "b-builtin"}
	var commits int64
	for range b.N {
		b.StopTimer()
		if _, err := d.Fresh(k); err != nil {
			b.Fatal(err)
		}
		before := h.Store.Commits()
		b.StartTimer()
		if ev := benchTurn(b, d, "ch"); ev.Shape != "cold" {
			b.Fatalf("shape %s", ev.Shape)
		}
		commits += h.Store.Commits() - before
	}
	b.ReportMetric(float64(commits)/float64(b.N), "commits/turn")
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
	h := benchDaemon(b)
	d := h.Daemon
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
	h := benchDaemon(b)
	d := h.Daemon
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
	infos := d.PoolSessions()
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
func agentsRSSKB(b *testing.B, d *daemon.Daemon) int64 {
	var kb int64
	for _, in := range d.PoolSessions() {
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

// BenchmarkFairness16Keys4Slots keeps sixteen keys sending turns over the
// default four slots for five seconds (run it with -benchtime 1x), two
// senders per key so each key always has a turn queued behind the one it
// runs, and reports how evenly the slots were shared: keys that got no turn,
// the worst wait of the worst-off key, the median of the keys' worst waits
// and their ratio. A wait is from asking for the turn to its started event;
// a turn still waiting when the time is up counts its wait so far. Per-key
// turns go to the log.
func BenchmarkFairness16Keys4Slots(b *testing.B) {
	const keys, senders, span = 16, 2, 5 * time.Second
	h := benchDaemon(b)
	d := h.Daemon
	type tally struct {
		mu    sync.Mutex // the key's senders share it
		turns int
		worst time.Duration
		waits []time.Duration
		err   error
	}
	tallies := make([]tally, keys)
	ctx, cancel := context.WithTimeout(context.Background(), span)
	defer cancel()
	var wg sync.WaitGroup
	b.ResetTimer()
	for i := range keys * senders {
		wg.Add(1)
		go func(t *tally, ch string) {
			defer wg.Done()
			for ctx.Err() == nil {
				asked := time.Now()
				var started atomic.Int64 // unix nanos of the started event
				_, err := d.Turn(ctx, apitype.TurnRequest{Channel: ch, Binding: "b-builtin", MessageID: "q", Text: "@agent why is the refund spec flaky?"},
					func(ev apitype.Event) {
						if ev.Event == apitype.EventStarted {
							started.CompareAndSwap(0, time.Now().UnixNano())
						}
					})
				wait := time.Since(asked)
				if s := started.Load(); s != 0 {
					wait = time.Unix(0, s).Sub(asked)
				}
				t.mu.Lock()
				t.worst = max(t.worst, wait)
				t.waits = append(t.waits, wait)
				failed := err != nil && ctx.Err() == nil
				switch {
				case err == nil:
					t.turns++
				case failed:
					t.err = fmt.Errorf("turn on %s: %w", ch, err)
				}
				t.mu.Unlock()
				if failed {
					return
				}
			}
		}(&tallies[i%keys], fmt.Sprintf("ch-%02d", i%keys))
	}
	wg.Wait()
	b.StopTimer()

	worsts := make([]time.Duration, 0, keys)
	var all []time.Duration
	zero, total := 0, 0
	for i := range tallies {
		t := &tallies[i]
		if t.err != nil {
			b.Error(t.err)
		}
		if t.turns == 0 {
			zero++
		}
		total += t.turns
		worsts = append(worsts, t.worst)
		all = append(all, t.waits...)
		b.Logf("ch-%02d: %4d turns, worst wait %v", i, t.turns, t.worst.Round(time.Millisecond))
	}
	slices.Sort(worsts)
	worst, median := worsts[keys-1], (worsts[keys/2-1]+worsts[keys/2])/2
	ratio := float64(worst) / float64(max(median, time.Microsecond))
	// For scale: the median of every single wait, most of them a turn
	// behind its own key's other sender on a warm process.
	slices.Sort(all)
	b.ReportMetric(float64(all[len(all)/2])/float64(time.Millisecond), "median-turn-wait-ms")
	yields := testutil.ToFloat64(h.Metrics.Evictions.WithLabelValues("yield"))
	capacity := testutil.ToFloat64(h.Metrics.Evictions.WithLabelValues("capacity"))
	b.Logf("%d turns in %v; %d keys without a turn; worst wait %v, median of the keys' worst %v, ratio %.1f; evictions: %v yield, %v capacity",
		total, span, zero, worst.Round(time.Millisecond), median.Round(time.Millisecond), ratio, yields, capacity)
	b.ReportMetric(float64(zero), "zero-turn-keys")
	b.ReportMetric(float64(worst)/float64(time.Millisecond), "worst-wait-ms")
	b.ReportMetric(float64(median)/float64(time.Millisecond), "median-wait-ms")
	b.ReportMetric(ratio, "worst/median")
	b.ReportMetric(float64(total)/span.Seconds(), "turns/s")
	b.ReportMetric(yields, "yields")
	if zero > 0 || ratio > 10 {
		b.Errorf("unfair: %d keys got no turn, worst wait %v is %.1f× the median %v", zero, worst, ratio, median)
	}
}

// BenchmarkRestoredTurnAfter200 is the first turn of a new process for a key
// whose session has answered 200 turns (the built-in agent keeps and
// replays its last 100; the daemon keeps 200 stored turns): resumed
// (session/resume, nothing replayed), loaded (session/load replays the
// agent's history, which the daemon swallows), and cold with restore off
// (session/new and a replay of the stored conversation in the prompt). Each
// iteration stops the key's process outside the timer and times its next
// turn.
//
//	go test -run '^$' -bench RestoredTurnAfter200 -benchtime 20x ./internal/daemon/
func BenchmarkRestoredTurnAfter200(b *testing.B) {
	for _, tc := range []struct {
		name, method string
		restore      bool
		shape        string
	}{
		{"resume", config.RestoreResume, true, "restored"},
		{"load", config.RestoreLoad, true, "restored"},
		{"cold", config.RestoreAuto, false, "cold"},
	} {
		b.Run(tc.name, func(b *testing.B) {
			exe, err := os.Executable()
			if err != nil {
				b.Fatal(err)
			}
			dir := b.TempDir()
			bd := config.Builtin(exe, dir)
			bd.Env = map[string]string{"RESIDENTD_TEST_AGENT": "1"}
			bd.RestoreMethod = tc.method
			bd.Restore = &tc.restore
			cfg := &config.Config{StateDir: dir, AgentGrace: config.Duration(2 * time.Second), Bindings: []config.Binding{bd}}
			h := daemontest.New(b, cfg, daemontest.Options{Log: zap.NewNop()})
			d := h.Daemon
			for range 200 {
				benchTurn(b, d, "ch")
			}
			var prompt int
			b.ResetTimer()
			for range b.N {
				b.StopTimer()
				if err := h.Restart(); err != nil { // the key's process stops; its session is saved
					b.Fatal(err)
				}
				d = h.Daemon
				b.StartTimer()
				ev := benchTurn(b, d, "ch")
				if ev.Shape != tc.shape {
					b.Fatalf("shape %s, want %s", ev.Shape, tc.shape)
				}
				prompt = ev.Context.PromptBytes
			}
			b.StopTimer()
			b.ReportMetric(float64(prompt), "prompt-bytes")
		})
	}
}
