package agent

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	acp "github.com/coder/acp-go-sdk"
)

// agentEnv makes this test binary the agent. testkit.Main does the same for
// the other packages, but testkit imports this package, so its tests cannot.
const agentEnv = "RESIDENTD_TEST_AGENT"

func TestMain(m *testing.M) {
	if os.Getenv(agentEnv) == "1" {
		os.Exit(Main(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
	}
	os.Exit(m.Run())
}

// syncBuffer is the agent's stderr, written by exec's copier through the
// lockedWriter and read by the test when the agent misbehaves.
type syncBuffer struct {
	lockedWriter
	b bytes.Buffer
}

func newSyncBuffer() *syncBuffer {
	s := &syncBuffer{}
	s.w = &s.b
	return s
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// startProcess runs this test binary as the agent in its own process and
// returns an initialized client; cleanup closes its stdin and expects exit 0.
func startProcess(tb testing.TB, args ...string) (*acp.ClientSideConnection, *testClient) {
	tb.Helper()
	exe, err := os.Executable()
	if err != nil {
		tb.Fatal(err)
	}
	cmd := exec.Command(exe, append([]string{"agent"}, args...)...)
	cmd.Env = append(os.Environ(), agentEnv+"=1")
	stderr := newSyncBuffer()
	cmd.Stderr = stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		tb.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		tb.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		tb.Fatal(err)
	}
	c := &testClient{}
	conn := acp.NewClientSideConnection(c, stdin, stdout)
	// The SDK's default logger writes to stdout, in the middle of benchmark lines.
	conn.SetLogger(slog.New(slog.NewTextHandler(io.Discard, nil)))
	tb.Cleanup(func() {
		_ = stdin.Close()
		if err := cmd.Wait(); err != nil {
			tb.Errorf("agent %q: %v; stderr:\n%s", args, err, stderr.String())
		}
	})
	if _, err := conn.Initialize(context.Background(), acp.InitializeRequest{ProtocolVersion: acp.ProtocolVersionNumber}); err != nil {
		tb.Fatalf("initialize: %v; stderr:\n%s", err, stderr.String())
	}
	return conn, c
}

// benchPrompt is about the size of a warm mention the daemon composes.
var benchPrompt = "You were mentioned in #backend.\n" +
	`{"channel_id":"ch-backend","message_id":"m026","text":"@agent why is the refund spec flaky?"}` + "\n---\n" +
	strings.Repeat("- [user] aiko: the refund spec failed again on main, third time today\n", 8)

// BenchmarkTurnLatency runs 1,000 turns of one session on an agent process
// with --state, as the daemon's default binding runs it, and reports the
// median turn latency over turns 1-25 and over turns 976-1000 (medians of a
// window, so one slow scheduling does not decide): a turn's cost must not
// grow with the session's length.
func BenchmarkTurnLatency(b *testing.B) {
	const turns, window = 1000, 25
	var first, last []time.Duration
	for range b.N {
		conn, c := startProcess(b, "--state", b.TempDir())
		ns, err := conn.NewSession(context.Background(), acp.NewSessionRequest{Cwd: b.TempDir(), McpServers: []acp.McpServer{}})
		if err != nil {
			b.Fatal(err)
		}
		req := acp.PromptRequest{SessionId: ns.SessionId, Prompt: []acp.ContentBlock{acp.TextBlock(benchPrompt)}}
		for n := 1; n <= turns; n++ {
			start := time.Now()
			if _, err := conn.Prompt(context.Background(), req); err != nil {
				b.Fatalf("turn %d: %v", n, err)
			}
			d := time.Since(start)
			c.take() // the updates would otherwise pile up in this process
			switch {
			case n <= window:
				first = append(first, d)
			case n > turns-window:
				last = append(last, d)
			}
		}
	}
	f, l := median(first), median(last)
	b.ReportMetric(float64(f.Microseconds())/1000, fmt.Sprintf("turn1-%d-ms", window))
	b.ReportMetric(float64(l.Microseconds())/1000, fmt.Sprintf("turn%d-%d-ms", turns-window+1, turns))
	b.ReportMetric(float64(l)/float64(f), "growth-x")
	b.ReportMetric(0, "ns/op") // the whole 1,000-turn run says nothing per turn
}

func median(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		panic("median of no samples")
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2]
}
