package interop

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/residentd/residentd/apitype"
	"github.com/residentd/residentd/internal/permission"
	"github.com/residentd/residentd/internal/session"
	"github.com/residentd/residentd/internal/testkit"
)

// v2Negotiated checks in one process's record that residentd offered v2
// at initialize and the agent answered it.
func v2Negotiated(t *testing.T, msgs []rpc) {
	t.Helper()
	reqs, ans := calls(msgs, "initialize")
	if len(reqs) != 1 || ans[0] == nil || !strings.Contains(string(reqs[0].Params), `"protocolVersion":2`) || !strings.Contains(string(ans[0].Result), `"protocolVersion":2`) {
		t.Fatalf("initialize over v2: %s -> %+v", reqs[0].Params, ans[0])
	}
}

// promptsAnsweredAtOnce checks that each session/prompt of a record was
// answered {messageId} before the idle that ended its turn.
func promptsAnsweredAtOnce(t *testing.T, msgs []rpc) int {
	t.Helper()
	reqs, ans := calls(msgs, "session/prompt")
	for i, r := range reqs {
		if ans[i] == nil || !strings.Contains(string(ans[i].Result), `"messageId"`) || strings.Contains(string(ans[i].Result), `"stopReason"`) {
			t.Fatalf("session/prompt %s answered %+v, want {messageId}", r.ID, ans[i])
		}
		at := slices.IndexFunc(msgs, func(m rpc) bool {
			return &m == ans[i] || (m.Dir == "out" && m.Method == "" && string(m.ID) == string(r.ID))
		})
		ended := slices.IndexFunc(msgs[at:], func(m rpc) bool {
			return m.Dir == "out" && m.Method == "session/update" && strings.Contains(updateShape(m.Params), "stopReason=")
		})
		if ended < 0 {
			t.Fatalf("session/prompt %s: no idle with a stop reason after its answer", r.ID)
		}
	}
	return len(reqs)
}

// TestClaude0101OverV2: claude-agent-acp 0.101 (CLAUDE_AGENT_ACP_PROTOCOL
// auto) against the fake model, with a binding of protocol auto: it
// answers v2; cold and warm turns end at their idle with the turn's own
// usage; a shell command the model runs in the background is listed as a
// terminal after the turn's idle, keeps the session working, and is
// cancelled alone over the daemon where claude advertises cancel; after a
// daemon restart the session is resumed (a state snapshot before the
// answer). Every message validates against the v2 schema.
func TestClaude0101OverV2(t *testing.T) {
	t.Parallel()
	s := loadV2Schema(t)
	api := newFakeAPI(t, "Hello over v2.")
	api.tool = &toolUse{marker: "BG-PLEASE", name: "Bash", input: map[string]any{
		"command": "sleep 300; echo residentd-bg-done", "description": "A slow background job", "run_in_background": true}}
	env := api.env()
	env["CLAUDE_AGENT_ACP_PROTOCOL"] = "auto"
	b := claude0101Binding(t, t.TempDir(), env)
	b.Protocol = "auto"
	b.Permission = permission.Allow
	b.Dir = t.TempDir()
	tap := t.TempDir()
	h := newHarness(t, tapped(t, b, tap))
	ctx := testCtx(t)
	var usage []int64
	for _, text := range []string{"@claude hello", "@claude again"} {
		r := h.turn(ctx, apitype.TurnRequest{Channel: "ch", Binding: "b-claude", Text: text}, nil)
		if r.err != nil || !strings.Contains(r.done.Text, "Hello over v2.") || r.done.Usage == nil {
			t.Fatalf("%s: %+v, %v", text, r.done, r.err)
		}
		usage = append(usage, r.done.Usage.InputTokens+r.done.Usage.CacheReadTokens+r.done.Usage.CacheWriteTokens)
	}
	if usage[0] <= 0 || usage[1] <= 0 {
		t.Fatalf("usage per turn: %v", usage)
	}
	// Over v2 as over v1 the framing reaches the model in the system text
	// (session.systemPrompt), not in the first user message.
	first := api.mainCalls(t, "@claude hello", "@claude again")
	if len(first) == 0 {
		t.Fatal("no main model call carries the first mention")
	}
	if sys, msgs := systemAndMessages(t, first[0]); !strings.Contains(sys, claudeFraming) || strings.Contains(msgs, claudeFraming) {
		t.Fatalf("over v2 the framing is in the system text: %v, in the messages: %v", strings.Contains(sys, claudeFraming), strings.Contains(msgs, claudeFraming))
	}
	if r := h.turn(ctx, apitype.TurnRequest{Channel: "ch", Binding: "b-claude", Text: "@claude run the slow job BG-PLEASE"}, nil); r.err != nil {
		t.Fatalf("background turn: %v", r.err)
	}
	k := session.Key{Channel: "ch", Binding: "b-claude"}
	var term apitype.BackgroundItem
	testkit.WaitFor(t, 30*time.Second, func() bool {
		for _, row := range h.d.Sessions() {
			for _, it := range row.Background {
				if it.Type == "terminal" || it.Type == "tool_call" {
					term = it
					return row.Working
				}
			}
		}
		return false
	}, testkit.Waiting("the background shell listed in the session's row"))
	t.Logf("claude lists its background shell as %+v", term)
	if term.Cancelable {
		if _, err := h.d.CancelBackground(k, term.Type, term.ID); err != nil {
			t.Fatalf("cancel %+v: %v", term, err)
		}
		testkit.WaitFor(t, 30*time.Second, func() bool {
			rows := h.d.Sessions()
			return len(rows) == 1 && !slices.ContainsFunc(rows[0].Background, func(it apitype.BackgroundItem) bool { return it.ID == term.ID })
		}, testkit.Waiting("the cancelled shell gone from the list"))
	}
	h.restart()
	r := h.turn(ctx, apitype.TurnRequest{Channel: "ch", Binding: "b-claude", Text: "@claude back"}, nil)
	if r.err != nil || r.start.Shape != "restored" {
		t.Fatalf("restored turn: %+v, %v", r.start, r.err)
	}
	recs := tapRecords(t, tap)
	seen := map[string]int{}
	prompts := 0
	for _, msgs := range recs {
		v2Negotiated(t, msgs)
		prompts += promptsAnsweredAtOnce(t, msgs)
		for k, n := range checkV2Wire(t, s, msgs) {
			seen[k] += n
		}
	}
	logShapes(t, "claude-agent-acp 0.101", seen)
	resumeSnapshotFirst(t, recs)
	if prompts != 4 || seen["in session/resume"] == 0 || seen["out answer to session/resume"] == 0 {
		t.Fatalf("%d prompts, resume %d", prompts, seen["in session/resume"])
	}
}

// TestCodexOverV2: codex-acp 2.6 with a binding of protocol 2 against the
// fake Responses API: it answers v2; a cold and a warm turn end at their
// idle with each turn's own usage; after a daemon restart the session is
// resumed. Every message validates against the v2 schema.
func TestCodexOverV2(t *testing.T) {
	t.Parallel()
	s := loadV2Schema(t)
	tap := t.TempDir()
	api := newFakeResponses(t, "Codex over v2.")
	b := codexBinding(t, api)
	b.Protocol = "2"
	h := newHarness(t, tapped(t, b, tap))
	ctx := testCtx(t)
	for _, text := range []string{"@codex hello", "@codex again"} {
		r := h.turn(ctx, apitype.TurnRequest{Channel: "ch", Binding: "b-codex", Text: text}, nil)
		if r.err != nil || !strings.Contains(r.done.Text, "Codex over v2.") || r.done.Usage == nil || r.done.Usage.InputTokens <= 0 {
			dumpTap(t, tap)
			t.Fatalf("%s: %+v, %v", text, r.done, r.err)
		}
	}
	h.restart()
	r := h.turn(ctx, apitype.TurnRequest{Channel: "ch", Binding: "b-codex", Text: "@codex back"}, nil)
	if r.err != nil || r.start.Shape != "restored" {
		t.Fatalf("restored turn: %+v, %v", r.start, r.err)
	}
	seen := map[string]int{}
	prompts := 0
	recs := tapRecords(t, tap)
	resumeSnapshotFirst(t, recs)
	for _, msgs := range recs {
		v2Negotiated(t, msgs)
		prompts += promptsAnsweredAtOnce(t, msgs)
		for k, n := range checkV2Wire(t, s, msgs) {
			seen[k] += n
		}
	}
	logShapes(t, "codex-acp 2.6", seen)
	if prompts != 3 || seen["in session/resume"] == 0 {
		t.Fatalf("%d prompts, resume %d", prompts, seen["in session/resume"])
	}
}

// dumpTap logs each process's record, for a failure's reader.
func dumpTap(t *testing.T, dir string) {
	t.Helper()
	for _, msgs := range tapRecords(t, dir) {
		for _, m := range msgs {
			t.Log(abbreviate(m))
		}
	}
}
