package interop

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	sdk "github.com/coder/acp-go-sdk"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"github.com/residentd/residentd/internal/acp"
	"github.com/residentd/residentd/internal/config"
)

// systemAndMessages splits a Messages request into its system text and its
// messages' text.
func systemAndMessages(t *testing.T, body []byte) (system, messages string) {
	t.Helper()
	var req messagesRequest
	if err := json.Unmarshal(body, &req); err != nil {
		t.Fatal(err)
	}
	var parts []string
	for _, m := range req.Messages {
		parts = append(parts, m.text())
	}
	return string(req.System), strings.Join(parts, "\n")
}

// framingRun is what one run of the floor conversation measured: the cold
// turn's first main request (all of it new), the warm turns' mean new
// tokens, and the restored turn's, whole and in the conversation part.
type framingRun struct {
	cold, coldConv               int
	warm                         float64
	restored, restoredConv       int
	coldSystem, coldMessages     string
	restoredSys, restoredMessage string
}

// floorThrough runs the floor conversation (a cold turn, warm turns, a
// daemon restart, a restored turn) through claude-agent-acp 0.101 with the
// framing where placement says, against a fake model of its own.
func floorThrough(t *testing.T, placement string) framingRun {
	ctx := testCtx(t)
	api := newFakeAPI(t, "Looked into it: the retry count is set in webhook/config.go.")
	api.sized = true
	home := t.TempDir()
	b := claude0101Binding(t, home, api.env())
	b.SystemPlacement = placement
	h := newHarness(t, b)
	warmTurns := len(floorLines) - 1
	playFloor(t, ctx, h, home, placement+": ")
	var out framingRun
	first := api.mainCalls(t, "turn 1:", "turn 2:")
	if len(first) == 0 {
		t.Fatalf("%s: no main model call carries turn 1", placement)
	}
	out.cold, out.coldConv = len(tokensBy(t, canonical)(first[0])), len(tokensBy(t, canonicalMessages)(first[0]))
	out.coldSystem, out.coldMessages = systemAndMessages(t, first[0])
	var sum int
	for i := 2; i <= warmTurns; i++ {
		w, _ := turnStats(t, api, i)
		sum += w.fresh()
	}
	out.warm = float64(sum) / float64(warmTurns-1)
	whole, conv := turnStats(t, api, warmTurns+1)
	out.restored, out.restoredConv = whole.fresh(), conv.fresh()
	last := api.mainCalls(t, fmt.Sprintf("turn %d:", warmTurns+1), "")
	out.restoredSys, out.restoredMessage = systemAndMessages(t, last[0])
	t.Logf("%s: cold turn %d tokens (conversation part %d); warm turns %.0f new tokens (mean); restored turn %d new (conversation part %d)",
		placement, out.cold, out.coldConv, out.warm, out.restored, out.restoredConv)
	return out
}

// TestClaude0101FramingInTheSystemPrompt: claude-agent-acp 0.101 advertises
// sessionCapabilities.systemPrompt; with the default system_placement the
// binding's framing reaches the model as part of the system text of the
// cold turn's requests and, after a daemon restart, of the session
// reopened with session/resume, and no user message carries it; with
// system_placement turn it is in the first user message, as before. The
// new tokens of each shape are logged for BENCHMARKS.md; the cold and
// restored turns' conversation parts are smaller by the framing and the
// brief.
func TestClaude0101FramingInTheSystemPrompt(t *testing.T) {
	t.Parallel()
	var before, after framingRun
	t.Run("turn", func(t *testing.T) { before = floorThrough(t, config.SystemInTurn) })
	t.Run("system_prompt", func(t *testing.T) { after = floorThrough(t, config.SystemInPrompt) })
	if t.Failed() {
		return
	}
	if !strings.Contains(before.coldMessages, claudeFraming) || strings.Contains(before.coldSystem, claudeFraming) {
		t.Errorf("system_placement turn: the framing is not in the cold turn's user message alone")
	}
	if strings.Contains(after.coldMessages, claudeFraming) || !strings.Contains(after.coldSystem, claudeFraming) {
		t.Errorf("system_prompt: the cold turn's framing: in the system text %v, in the messages %v", strings.Contains(after.coldSystem, claudeFraming), strings.Contains(after.coldMessages, claudeFraming))
	}
	if strings.Contains(after.restoredMessage, claudeFraming) || !strings.Contains(after.restoredSys, claudeFraming) {
		t.Errorf("system_prompt: the restored turn's framing: in the system text %v, in the messages %v", strings.Contains(after.restoredSys, claudeFraming), strings.Contains(after.restoredMessage, claudeFraming))
	}
	if after.coldConv >= before.coldConv {
		t.Errorf("cold turn's conversation part: %d tokens with the framing in the system prompt, %d in the turn", after.coldConv, before.coldConv)
	}
	t.Logf("before (turn): cold %d (conversation %d), warm %.0f, restored %d (conversation %d)", before.cold, before.coldConv, before.warm, before.restored, before.restoredConv)
	t.Logf("after (system_prompt): cold %d (conversation %d), warm %.0f, restored %d (conversation %d)", after.cold, after.coldConv, after.warm, after.restored, after.restoredConv)
}

// TestClaude0101FramingSurvivesCompaction: the framing residentd's ACP
// client sends as the system prompt (acp.Spec.SystemPrompt) stays in
// claude-agent-acp 0.101's system text across a compaction (its /compact
// command): the turn after it, whose history is the summary, has the
// framing in the system text and in no message, and nothing sent it again.
func TestClaude0101FramingSurvivesCompaction(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	api := newFakeAPI(t, "Looked into it: the retry count is set in webhook/config.go.")
	api.sized = true
	b := claude0101Binding(t, t.TempDir(), api.env())
	var env []string
	for k, v := range b.Env {
		env = append(env, k+"="+v)
	}
	a, err := acp.Start(ctx, acp.Spec{Command: b.Command, Args: b.Args, Env: env, Dir: t.TempDir(), SystemPrompt: claudeFraming, MCPServers: []sdk.McpServer{}},
		zaptest.NewLogger(t, zaptest.Level(zap.WarnLevel)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = a.Close() })
	if !a.SystemPromptTaken() {
		t.Fatal("claude-agent-acp 0.101 does not advertise sessionCapabilities.systemPrompt")
	}
	native, err := a.NewSession(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, text := range []string{floorMention(1), "/compact", floorMention(2)} {
		if _, err := a.Prompt(ctx, native, text, func(acp.Update) {}); err != nil {
			t.Fatalf("prompt %q: %v", text, err)
		}
	}
	after := api.mainCalls(t, "turn 2:", "")
	if len(after) == 0 {
		t.Fatal("no main model call carries turn 2")
	}
	sys, msgs := systemAndMessages(t, after[0])
	t.Logf("turn after /compact: system text has the framing %v, messages have it %v, messages still hold turn 1 %v (%d bytes)",
		strings.Contains(sys, claudeFraming), strings.Contains(msgs, claudeFraming), strings.Contains(msgs, "turn 1:"), len(after[0]))
	if !strings.Contains(sys, claudeFraming) || strings.Contains(msgs, claudeFraming) {
		t.Errorf("after the compaction the framing is in the system text %v, in the messages %v; want only the system text", strings.Contains(sys, claudeFraming), strings.Contains(msgs, claudeFraming))
	}
	if strings.Contains(msgs, floorMention(1)) {
		t.Errorf("the turn after /compact still carries turn 1 verbatim: no compaction happened")
	}
}
