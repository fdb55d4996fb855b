package api

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/residentd/residentd/apitype"
	"github.com/residentd/residentd/client"
	"github.com/residentd/residentd/internal/acp"
	"github.com/residentd/residentd/internal/config"
	"github.com/residentd/residentd/internal/daemontest"
	"github.com/residentd/residentd/internal/delivery"
	"github.com/residentd/residentd/internal/run"
	"github.com/residentd/residentd/internal/session"
	"github.com/residentd/residentd/internal/store"
	"github.com/residentd/residentd/internal/testkit"
)

const benchText = "@agent why is the refund spec flaky? look at the last runs"

// benchClient serves a daemon with the built-in agent on a real Unix socket
// and returns a client for it; everything stops when b ends.
func benchClient(b *testing.B) (*client.Client, *store.Store) {
	b.Helper()
	return benchClientWith(b, daemontest.Options{Log: zap.NewNop()})
}

// benchClientWith is benchClient with the daemon's options o.
func benchClientWith(b *testing.B, o daemontest.Options) (*client.Client, *store.Store) {
	b.Helper()
	return benchClientIn(b, b.TempDir(), o)
}

// benchClientIn is benchClientWith with the daemon's state directory dir.
func benchClientIn(b *testing.B, dir string, o daemontest.Options) (*client.Client, *store.Store) {
	b.Helper()
	exe := testkit.Exe(b)
	cfg := &config.Config{StateDir: dir, AgentGrace: config.Duration(2 * time.Second)}
	cfg.Bindings = []config.Binding{{ID: "b-builtin", Handle: "@agent", Command: exe,
		Args: []string{"agent"}, Env: map[string]string{"RESIDENTD_TEST_AGENT": "1"},
		System: config.BuiltinFraming, Supervised: true, Resident: true, Spare: new(int)}}
	h := daemontest.New(b, cfg, o)
	_, sock := serve(b, "api.sock", ServerOptions{Turns: h, Sessions: h, Channel: h.Inbox, Log: zap.NewNop(), Version: "bench"})
	c := &client.Client{Socket: sock}
	b.Cleanup(func() { c.Close() })
	return c, h.Store
}

// BenchmarkWarmTurnSocket is a warm turn as the desktop app sends it: POST
// /v1/turns over the Unix socket, streamed back, through the whole daemon.
// It reports the store commits per turn (each one two fsyncs).
func BenchmarkWarmTurnSocket(b *testing.B) {
	c, st := benchClient(b)
	req := apitype.TurnRequest{Channel: "ch", Binding: "b-builtin", MessageID: "q", Text: benchText}
	if _, err := c.Turn(context.Background(), req, nil); err != nil {
		b.Fatal(err)
	}
	commits := st.Commits()
	b.ResetTimer()
	for range b.N {
		ev, err := c.Turn(context.Background(), req, nil)
		if err != nil || ev.Shape != "warm" {
			b.Fatalf("turn: shape %q err %v", ev.Shape, err)
		}
	}
	b.ReportMetric(float64(st.Commits()-commits)/float64(b.N), "commits/turn")
}

// BenchmarkWarmTurnSocketNewLine is the same warm turn with one new channel
// line pushed before each (the push, the desktop app's own request, is not
// timed): the block shows it and the watermark moves in the turn's commit.
func BenchmarkWarmTurnSocketNewLine(b *testing.B) {
	c, st := benchClient(b)
	ctx := context.Background()
	req := apitype.TurnRequest{Channel: "ch", Binding: "b-builtin", MessageID: "q", Text: benchText}
	if _, err := c.Turn(ctx, req, nil); err != nil {
		b.Fatal(err)
	}
	var commits int64
	b.ResetTimer()
	for i := range b.N {
		b.StopTimer()
		msg := apitype.Message{ID: "m" + strconv.Itoa(i), Channel: "ch", Author: "aiko", AuthorKind: "user", Body: "the webhook retry failed again on run " + strconv.Itoa(i), CreatedAt: time.Now()}
		if _, err := c.PutMessages(ctx, []apitype.Message{msg}); err != nil {
			b.Fatal(err)
		}
		before := st.Commits()
		b.StartTimer()
		ev, err := c.Turn(ctx, req, nil)
		if err != nil || ev.Shape != "warm" || ev.Context == nil || ev.Context.Lines != 1 {
			b.Fatalf("turn: %+v err %v", ev, err)
		}
		commits += st.Commits() - before
	}
	b.ReportMetric(float64(commits)/float64(b.N), "commits/turn")
}

// BenchmarkWarmTurnDirectACP sends the same warm user turn straight to the
// same built-in agent over ACP, with no daemon: the baseline for the
// daemon's overhead.
func BenchmarkWarmTurnDirectACP(b *testing.B) {
	exe := testkit.Exe(b)
	dir := b.TempDir()
	a, err := acp.Start(context.Background(), acp.Spec{Command: exe, Args: []string{"agent"},
		Env: []string{"RESIDENTD_TEST_AGENT=1"}, Dir: dir, Grace: 2 * time.Second}, zap.NewNop())
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { a.Close() })
	native, err := a.NewSession(context.Background())
	if err != nil {
		b.Fatal(err)
	}
	text := delivery.UserTurn(delivery.Payload{ChannelID: "ch", MessageID: "q", RunID: "run-1", BindingID: "b-builtin",
		Runtime: "acp:residentd", Supervised: true, Resident: true, ChannelAgents: []delivery.Agent{{Handle: "@agent", Reachable: true}},
		MaxRecipients: 3, Text: benchText}, delivery.DefaultBrief, "")
	if _, err := a.Prompt(context.Background(), native, config.BuiltinFraming+"\n\n"+text, nil); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for range b.N {
		if _, err := a.Prompt(context.Background(), native, text, nil); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkWarmTurnSocketVsDirect interleaves, in one run, a warm turn
// through the daemon's socket and the same warm turn (the mention line the
// daemon sends) straight to a second built-in agent process over ACP, so
// both see the same machine load. It reports each one's time per turn and
// their ratio. It runs twice: disk, with the daemon's state directory (its
// bbolt file, whose commits are fsynced) and the agents' directories where
// the other benchmarks have them; tmpfs, with all of them in a directory
// of /dev/shm, where an fsync costs next to nothing, so the ratio is the
// daemon's own work against the agent's (skipped where there is no
// /dev/shm).
//
//	go test -run '^$' -bench WarmTurnSocketVsDirect -benchtime 300x ./internal/api/
func BenchmarkWarmTurnSocketVsDirect(b *testing.B) {
	b.Run("disk", func(b *testing.B) { benchSocketVsDirect(b, b.TempDir()) })
	b.Run("tmpfs", func(b *testing.B) {
		if fi, err := os.Stat("/dev/shm"); err != nil || !fi.IsDir() {
			b.Skip("no /dev/shm on this system: the tmpfs variant needs one")
		}
		dir, err := os.MkdirTemp("/dev/shm", "rd-bench-")
		if err != nil {
			b.Skipf("cannot make a directory in /dev/shm: %v", err)
		}
		b.Cleanup(func() { os.RemoveAll(dir) })
		benchSocketVsDirect(b, dir)
	})
}

// benchSocketVsDirect is BenchmarkWarmTurnSocketVsDirect with every
// directory (the daemon's state, the direct agent's) under dir.
func benchSocketVsDirect(b *testing.B, dir string) {
	c, _ := benchClientIn(b, filepath.Join(dir, "state"), daemontest.Options{Log: zap.NewNop()})
	ctx := context.Background()
	req := apitype.TurnRequest{Channel: "ch", Binding: "b-builtin", MessageID: "q", Text: benchText}
	if _, err := c.Turn(ctx, req, nil); err != nil {
		b.Fatal(err)
	}
	exe := testkit.Exe(b)
	adir := filepath.Join(dir, "direct")
	if err := os.MkdirAll(adir, 0o700); err != nil {
		b.Fatal(err)
	}
	a, err := acp.Start(ctx, acp.Spec{Command: exe, Args: []string{"agent"},
		Env: []string{"RESIDENTD_TEST_AGENT=1"}, Dir: adir, Grace: 2 * time.Second}, zap.NewNop())
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { a.Close() })
	native, err := a.NewSession(ctx)
	if err != nil {
		b.Fatal(err)
	}
	text := delivery.Mention{MessageID: "q", Text: benchText}.JSON()
	if _, err := a.Prompt(ctx, native, config.BuiltinFraming+"\n\n"+text, nil); err != nil {
		b.Fatal(err)
	}
	var socket, direct time.Duration
	for b.Loop() {
		t0 := time.Now()
		ev, err := c.Turn(ctx, req, nil)
		if err != nil || ev.Shape != "warm" {
			b.Fatalf("turn: shape %q err %v", ev.Shape, err)
		}
		t1 := time.Now()
		if _, err := a.Prompt(ctx, native, text, nil); err != nil {
			b.Fatal(err)
		}
		socket, direct = socket+t1.Sub(t0), direct+time.Since(t1)
	}
	b.ReportMetric(float64(socket.Microseconds())/float64(b.N), "socket-µs/turn")
	b.ReportMetric(float64(direct.Microseconds())/float64(b.N), "direct-µs/turn")
	b.ReportMetric(float64(socket)/float64(direct), "socket/direct")
}

// BenchmarkRunMachinery is what the run machinery adds to one warm turn:
// a registered run, its started event, the four update chunks and the done
// event of a built-in warm turn numbered, encoded once and buffered, read by
// one follower, and the run listed. Compare it with BenchmarkWarmTurnSocket
// in the same run for the share of a warm turn it costs.
func BenchmarkRunMachinery(b *testing.B) {
	g := run.NewRegistry(run.Limits{}, nil)
	k := session.Key{Channel: "ch", Binding: "b-builtin"}
	chunk := &apitype.Update{Kind: apitype.UpdateMessage, Text: "builtin turn=2 "}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		i++
		r, err := g.New("run-"+strconv.Itoa(i), k, "q")
		if err != nil {
			b.Fatal(err)
		}
		r.Emit(apitype.Event{Event: apitype.EventStarted, Shape: "warm", Native: "nat-1", Pid: 4242})
		for range 4 {
			r.Emit(apitype.Event{Event: apitype.EventUpdate, Update: chunk})
		}
		r.Finish(apitype.Event{Event: apitype.EventDone, Shape: "warm", StopReason: "end_turn", Text: "builtin turn=2 framing=no", Watermark: apitype.WatermarkCommitted,
			Context: &apitype.ContextReport{Header: "none"}, Usage: &apitype.Usage{InputTokens: 812, OutputTokens: 95}}, nil)
		if batch := r.Read(0, true); len(batch.Lines) != 6 || !batch.Ended {
			b.Fatalf("read %d lines", len(batch.Lines))
		}
		r.Snapshot()
	}
}

// BenchmarkWarmTurnCommit is the one store commit of a warm turn alone (its
// exchange appended in one fsynced transaction), on a file in the same
// place as BenchmarkWarmTurnSocket's: socket - direct ACP - this is what
// the daemon adds beyond the agent and the disk.
func BenchmarkWarmTurnCommit(b *testing.B) {
	st, err := store.Open(filepath.Join(b.TempDir(), "residentd.db"), store.Options{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { st.Close() })
	k := session.Key{Channel: "ch", Binding: "b-builtin"}
	user := delivery.UserTurn(delivery.Payload{ChannelID: "ch", MessageID: "q", Text: benchText}, "", "")
	at := time.Now()
	for b.Loop() {
		err := st.FinishTurn(k, store.Finish{Native: "nat-1", Turns: []session.Turn{
			{Role: session.RoleUser, Text: user, At: at, MessageID: "q"},
			{Role: session.RoleAssistant, Text: "builtin turn=2 framing=no users=0 assistants=0 mention=q context=0", At: at},
		}})
		if err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkBurst100k: a turn whose agent streams 100,000 tiny chunks in a
// burst, over the socket. Reported: the time from the last chunk the
// client read to the done event, and the test process's peak resident set
// (the daemon and the client; the agent is a process of its own).
func BenchmarkBurst100k(b *testing.B) {
	c, _ := benchClient(b)
	ctx := context.Background()
	var tail time.Duration
	for i := 0; i < b.N; i++ {
		var last time.Time
		ev, err := c.Turn(ctx, apitype.TurnRequest{Channel: "ch-" + strconv.Itoa(i), Binding: "b-builtin", Text: "@agent [[fault:burst]]"}, func(ev apitype.Event) {
			if ev.Update != nil {
				last = time.Now()
			}
		})
		if err != nil || ev.Event != apitype.EventDone {
			b.Fatalf("burst turn: %+v, %v", ev, err)
		}
		tail += time.Since(last)
	}
	b.ReportMetric(float64(tail.Microseconds())/1000/float64(b.N), "ms-last-update-to-done")
	if st, err := os.ReadFile("/proc/self/status"); err == nil {
		for _, l := range strings.Split(string(st), "\n") {
			if strings.HasPrefix(l, "VmHWM:") {
				kb, _ := strconv.Atoi(strings.Fields(l)[1])
				b.ReportMetric(float64(kb)/1024, "MiB-peak-rss")
			}
		}
	}
}
