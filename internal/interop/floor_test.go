package interop

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	sdk "github.com/coder/acp-go-sdk"

	"github.com/residentd/residentd/internal/channel"
	"github.com/residentd/residentd/internal/delivery"
	"github.com/residentd/residentd/internal/testkit"
)

// floorLines are the channel lines posted before each mention of the floor
// conversation; floorMention is the mention of turn i (1-based).
var floorLines = [][]string{
	{"the refund spec failed again on main", "the webhook retry fires twice under load"},
	{"CI is green on the branch", "but the refund spec is still flaky locally"},
	{"I pushed a fix for the locale cache key"},
	{"deploy window is at 16:00", "the retry count lives in config, not code"},
	{"rolled back the cache change, it broke ja pages"},
}

func floorMention(i int) string {
	return fmt.Sprintf("@claude turn %d: where is the retry count set, and is it why the refund spec is flaky?", i)
}

// directClient is the reference: a plain ACP client (the SDK, no residentd)
// that sends the floor conversation itself. Its first turn is the framing,
// the channel lines and the mention; each later turn only the new lines and
// the mention.
type directClient struct {
	conn   *sdk.ClientSideConnection
	cmd    *exec.Cmd
	native sdk.SessionId
}

// directHandler answers the agent's calls to the direct client: updates
// are dropped, permissions refused, files and terminals not offered. It
// holds nothing, so the SDK's reader shares no state with the test.
type directHandler struct{}

func (directHandler) SessionUpdate(context.Context, sdk.SessionNotification) error { return nil }
func (directHandler) RequestPermission(context.Context, sdk.RequestPermissionRequest) (sdk.RequestPermissionResponse, error) {
	return sdk.RequestPermissionResponse{Outcome: sdk.RequestPermissionOutcome{Cancelled: &sdk.RequestPermissionOutcomeCancelled{}}}, nil
}
func (directHandler) ReadTextFile(context.Context, sdk.ReadTextFileRequest) (sdk.ReadTextFileResponse, error) {
	return sdk.ReadTextFileResponse{}, errors.New("not offered")
}
func (directHandler) WriteTextFile(context.Context, sdk.WriteTextFileRequest) (sdk.WriteTextFileResponse, error) {
	return sdk.WriteTextFileResponse{}, errors.New("not offered")
}
func (directHandler) CreateTerminal(context.Context, sdk.CreateTerminalRequest) (sdk.CreateTerminalResponse, error) {
	return sdk.CreateTerminalResponse{}, errors.New("not offered")
}
func (directHandler) KillTerminal(context.Context, sdk.KillTerminalRequest) (sdk.KillTerminalResponse, error) {
	return sdk.KillTerminalResponse{}, errors.New("not offered")
}
func (directHandler) TerminalOutput(context.Context, sdk.TerminalOutputRequest) (sdk.TerminalOutputResponse, error) {
	return sdk.TerminalOutputResponse{}, errors.New("not offered")
}
func (directHandler) ReleaseTerminal(context.Context, sdk.ReleaseTerminalRequest) (sdk.ReleaseTerminalResponse, error) {
	return sdk.ReleaseTerminalResponse{}, errors.New("not offered")
}
func (directHandler) WaitForTerminalExit(context.Context, sdk.WaitForTerminalExitRequest) (sdk.WaitForTerminalExitResponse, error) {
	return sdk.WaitForTerminalExitResponse{}, errors.New("not offered")
}

// startDirect runs the agent of binding env in dir with a plain SDK client
// and opens a session.
func startDirect(t *testing.T, ctx context.Context, bin, dir string, env map[string]string) *directClient {
	t.Helper()
	cmd := exec.Command(bin)
	cmd.Dir = dir
	cmd.Env = os.Environ()
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	cmd.Stderr = os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true} // its CLI child goes with it
	in, out := testkit.StartPiped(t, cmd)
	c := &directClient{cmd: cmd}
	t.Cleanup(func() {
		// Every process of the group is gone before the test's directories
		// are removed: the CLI writes its transcript there.
		pids := descendants(cmd.Process.Pid)
		_ = in.Close()
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		_ = cmd.Wait()
		if left := waitGone(pids, 10*time.Second); len(left) > 0 {
			t.Errorf("direct client: agent processes %v outlived it", left)
		}
	})
	c.conn = sdk.NewClientSideConnection(directHandler{}, in, out)
	if _, err := c.conn.Initialize(ctx, sdk.InitializeRequest{ProtocolVersion: sdk.ProtocolVersionNumber,
		ClientCapabilities: sdk.ClientCapabilities{}, ClientInfo: &sdk.Implementation{Name: "direct", Version: "1"}}); err != nil {
		t.Fatalf("direct client: initialize: %v", err)
	}
	s, err := c.conn.NewSession(ctx, sdk.NewSessionRequest{Cwd: dir, McpServers: []sdk.McpServer{}})
	if err != nil {
		t.Fatalf("direct client: session/new: %v", err)
	}
	c.native = s.SessionId
	return c
}

func (c *directClient) prompt(t *testing.T, ctx context.Context, text string) {
	t.Helper()
	r, err := c.conn.Prompt(ctx, sdk.PromptRequest{SessionId: c.native, Prompt: []sdk.ContentBlock{sdk.TextBlock(text)}})
	if err != nil || r.StopReason != sdk.StopReasonEndTurn {
		t.Fatalf("direct client: prompt: %+v %v", r, err)
	}
}

// turnStats measures turn i's first main model request against turn
// i-1's last (i is 1-based; turn i's requests carry floorMention(i) and
// not the next one's): whole requests, and the conversation part alone
// (the messages, leaving out the tools and system text).
func turnStats(t *testing.T, api *fakeAPI, i int) (whole, conv prefixStats) {
	t.Helper()
	marker := func(i int) string { return fmt.Sprintf("turn %d:", i) }
	prev, cur := api.mainCalls(t, marker(i-1), marker(i)), api.mainCalls(t, marker(i), marker(i+1))
	if len(prev) == 0 || len(cur) == 0 {
		t.Fatalf("turn %d: %d and %d main model calls carry the turns", i, len(prev), len(cur))
	}
	measure := func(render func([]byte) (string, error)) prefixStats {
		enc := tokensBy(t, render)
		a, b := enc(prev[len(prev)-1]), enc(cur[0])
		return prefixStats{tokens: len(b), shared: sharedPrefix(a, b)}
	}
	return measure(canonical), measure(canonicalMessages)
}

// TestClaudeFloor: claude-agent-acp through residentd against the fake
// model, beside a direct ACP client sending the floor conversation (the
// framing, lines and mention first; then only the new lines and the
// mention). A warm turn through residentd sends at most 40 new tokens
// (cl100k_base) more than the direct client's, and at least 99% of each of
// its requests is a prefix of the one before. After a daemon restart the
// session is reopened with session/resume and its turn sends at most 40
// new tokens more than a warm turn; the resumed process writes its tools
// and system text anew, so that turn is measured on its conversation part.
func TestClaudeFloor(t *testing.T) {
	t.Parallel()
	// Two agents, nine turns and a restart: more than testTimeout on a
	// loaded machine under the race detector.
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	apiD, apiR := newFakeAPI(t, "Looked into it: the retry count is set in webhook/config.go."), newFakeAPI(t, "Looked into it: the retry count is set in webhook/config.go.")
	apiD.sized, apiR.sized = true, true
	warmTurns := len(floorLines) - 1

	// The reference: a client wired by hand that follows the seed sends
	// the framing once, then each turn's new lines under the seed's block
	// header (its rule 6: the lines are labelled untrusted data) and the
	// mention. What residentd adds beyond that is what this measures.
	bd := claudeOn(t, apiD)
	dir := t.TempDir()
	dc := startDirect(t, ctx, bd.Command, dir, bd.Env)
	for i, ls := range floorLines[:warmTurns] {
		var b strings.Builder
		header := delivery.HeaderNew
		if i == 0 {
			b.WriteString(claudeFraming + "\n\n")
			header = delivery.HeaderSnapshot
		}
		b.WriteString(header + "\n")
		for _, l := range ls {
			b.WriteString("- aiko: " + l + "\n")
		}
		b.WriteString("\n" + floorMention(i+1))
		dc.prompt(t, ctx, b.String())
	}

	// Through residentd.
	home := t.TempDir()
	br := claudeBinding(t, home, apiR.env())
	h := newHarness(t, br)
	playFloor(t, ctx, h, home, "")
	if ss := h.d.Sessions(); len(ss) != 1 || ss[0].RestoredBy != "resume" {
		t.Fatalf("sessions %+v, want one restored by session/resume", ss)
	}

	var sumR int
	for i := 2; i <= warmTurns; i++ {
		d, _ := turnStats(t, apiD, i)
		r, _ := turnStats(t, apiR, i)
		sumR += r.fresh()
		t.Logf("warm turn %d: direct %d new tokens (%.1f%% of %d a prefix), residentd %d new (%.1f%% of %d)", i, d.fresh(), 100*d.share(), d.tokens, r.fresh(), 100*r.share(), r.tokens)
		if r.fresh() > d.fresh()+40 || r.share() < 0.99 {
			t.Errorf("warm turn %d: residentd %d new tokens, %.2f%% a prefix; want at most %d (direct + 40) and at least 99%%", i, r.fresh(), 100*r.share(), d.fresh()+40)
		}
	}
	warm := float64(sumR) / float64(warmTurns-1)
	whole, conv := turnStats(t, apiR, warmTurns+1)
	t.Logf("restored turn (session/resume): %d new tokens of the whole request (%.1f%% of %d a prefix); conversation part: %d new (%.1f%% of %d); warm mean %.0f",
		whole.fresh(), 100*whole.share(), whole.tokens, conv.fresh(), 100*conv.share(), conv.tokens, warm)
	if float64(conv.fresh()) > warm+40 {
		t.Errorf("restored turn: %d new tokens in the conversation part; want at most the warm mean %.0f + 40", conv.fresh(), warm)
	}
}

// canonicalMessages is canonical without the tools and the system text: the
// conversation part of a request.
func canonicalMessages(body []byte) (string, error) {
	s, err := canonical(body)
	if err != nil {
		return "", err
	}
	i := strings.Index(s, "\n\nuser:\n")
	if i < 0 {
		return s, nil
	}
	return s[i:], nil
}

// playFloor plays the floor conversation through h (claude-agent-acp with
// its HOME in home): a cold turn, warm turns, a daemon restart once the
// CLI wrote its transcript, and a restored turn, each of the shape it
// should have; label starts the message of a turn that fails.
func playFloor(t *testing.T, ctx context.Context, h *harness, home, label string) {
	t.Helper()
	warmTurns := len(floorLines) - 1
	var native string
	for i, ls := range floorLines {
		if i == warmTurns {
			// The CLI writes its transcript after it answered: a daemon
			// stopped before that would find nothing to resume.
			transcript := filepath.Join(home, ".claude", "projects", "*", native+".jsonl")
			testkit.WaitFor(t, 30*time.Second, func() bool {
				m, _ := filepath.Glob(transcript)
				return len(m) > 0
			}, testkit.Waiting("claude-agent-acp to write its transcript %s", transcript))
			h.restart()
		}
		for j, l := range ls {
			h.post(channel.Message{ID: fmt.Sprintf("c%d-%d", i, j), Channel: "ch", Author: "aiko", Body: l})
		}
		r := h.mention(ctx, "ch", "b-claude", fmt.Sprintf("q%d", i), floorMention(i+1))
		want := map[bool]string{true: "warm", false: "cold"}[i > 0]
		if i == warmTurns {
			want = "restored"
		}
		if r.err != nil || r.done.Shape != want {
			t.Fatalf("%sturn %d: %+v %v, want %s", label, i+1, r.done, r.err, want)
		}
		native = r.done.Native
	}
}
