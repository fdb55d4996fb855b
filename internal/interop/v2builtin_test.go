package interop

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/residentd/residentd/apitype"
	"github.com/residentd/residentd/internal/config"
	"github.com/residentd/residentd/internal/permission"
	"github.com/residentd/residentd/internal/session"
	"github.com/residentd/residentd/internal/testkit"
)

// TestBuiltinV2WireMatchesSchema: every message residentd and the built-in
// agent exchange over ACP v2, through the daemon, matches the npm SDK's
// v2 schema: initialize, session/new, prompts answered {messageId} and
// ended by idle with stop reason and usage, requires_action around a
// permission request, background items announced with cancel and listed,
// terminal/cancel and tool_call/cancel, and after a daemon restart
// session/status then session/resume with its state snapshot before the
// answer; the framing in each session request's systemPrompt, and a form
// (elicitation/create) nobody answers, cancelled at the timeout.
func TestBuiltinV2WireMatchesSchema(t *testing.T) {
	s := loadV2Schema(t)
	tap := t.TempDir()
	b := config.Builtin(testkit.Exe(t), t.TempDir())
	b.Env = map[string]string{testkit.AgentEnv: "1"}
	b.Protocol = "2"
	b.Permission = permission.Allow
	b.SessionOptions = map[string]string{"model": "builtin-large", "verbose": "true"}
	// The framing goes in the system prompt of each session request, and a
	// form nobody answers is cancelled at the permission timeout: both are
	// on the v2 wire too.
	b.Args = append(b.Args, "--system-prompt")
	b.PermissionTimeout = config.Duration(200 * time.Millisecond)
	h := newHarness(t, tapped(t, b, tap))
	ctx := testCtx(t)
	for _, text := range []string{"@agent one [[permission:execute]]", "@agent two [[bg:terminal:1h]] [[bg:tool_call:1h]] [[bg:subagent:100ms]]", "@agent four [[elicit:deploy]]"} {
		r := h.turn(ctx, apitype.TurnRequest{Channel: "ch", Binding: "b-builtin", Text: text}, nil)
		if r.err != nil {
			t.Fatalf("%s: %v", text, r.err)
		}
		if !strings.Contains(r.done.Text, "framing=no") || !strings.Contains(r.done.Text, "system=yes") {
			t.Fatalf("%s: the framing is not in the system prompt over v2: %q", text, r.done.Text)
		}
	}
	// A turn that fails ends with idle, stop reason error and the error.
	if r := h.turn(ctx, apitype.TurnRequest{Channel: "ch-fail", Binding: "b-builtin", Text: "@agent [[fault:fail-turn]]"}, nil); r.err == nil || !strings.Contains(r.err.Error(), "induced failure") {
		t.Fatalf("a failing turn over v2: %v", r.err)
	}
	rows := slices.DeleteFunc(h.d.Sessions(), func(s apitype.Session) bool { return s.Channel != "ch" })
	if len(rows) == 1 && (rows[0].Options["model"] != "builtin-large" || rows[0].Options["verbose"] != "true") {
		t.Fatalf("session options over v2: %+v", rows[0].Options)
	}
	if len(rows) != 1 || len(rows[0].Background) < 2 {
		t.Fatalf("sessions after the turn with background work: %+v", rows)
	}
	k := session.Key{Channel: "ch", Binding: "b-builtin"}
	for _, it := range rows[0].Background {
		if it.Cancelable {
			if _, err := h.d.CancelBackground(k, it.Type, it.ID); err != nil {
				t.Fatalf("cancel %+v: %v", it, err)
			}
		}
	}
	h.restart()
	r := h.turn(ctx, apitype.TurnRequest{Channel: "ch", Binding: "b-builtin", Text: "@agent three"}, nil)
	if r.err != nil || !strings.Contains(r.done.Text, "turn=4") || !strings.Contains(r.done.Text, "system=yes") || r.start.Shape != "restored" {
		t.Fatalf("restored turn: %+v %v", r.done, r.err)
	}
	seen := map[string]int{}
	for _, msgs := range tapRecords(t, tap) {
		for k, n := range checkV2Wire(t, s, msgs) {
			seen[k] += n
		}
	}
	logShapes(t, "built-in agent", seen)
	for _, want := range []string{
		"in initialize", "out answer to initialize", "in session/new", "out answer to session/new",
		"in session/prompt", "out answer to session/prompt",
		"out elicitation/create", "in answer to elicitation/create",
		"out session/update user_message",
		"out session/update state_update running background=[]",
		"out session/update state_update requires_action background=[]",
		"out session/request_permission", "in answer to session/request_permission",
		"out session/update state_update idle stopReason=end_turn +usage background=[]",
		"out session/update state_update idle stopReason=end_turn +usage background=[…]",
		"out session/update state_update idle background=[…]",
		"out session/update terminal_update +capabilities", "out session/update tool_call_update +capabilities",
		"out session/update subagent_update",
		"in terminal/cancel", "out answer to terminal/cancel", "in tool_call/cancel", "out answer to tool_call/cancel",
		"in session/set_config_option", "out answer to session/set_config_option",
		"in session/status", "out answer to session/status", "in session/resume", "out answer to session/resume",
		"out session/update state_update idle background=[]",
		"out session/update state_update idle stopReason=error background=[]",
	} {
		if seen[want] == 0 {
			t.Errorf("no %q on the wire", want)
		}
	}
	resumeSnapshotFirst(t, tapRecords(t, tap))
}

// resumeSnapshotFirst checks that each session/resume of the records was
// answered after a state snapshot of its session (a state_update), as v2
// asks of an agent.
func resumeSnapshotFirst(t *testing.T, recs [][]rpc) {
	t.Helper()
	for _, msgs := range recs {
		reqs, ans := calls(msgs, "session/resume")
		for i, r := range reqs {
			if ans[i] == nil || len(ans[i].Error) > 0 {
				continue
			}
			snap := false
			for j := range msgs {
				m := &msgs[j]
				if m == ans[i] {
					break
				}
				snap = snap || m.Dir == "out" && m.Method == "session/update" && sessionOf(*m) == sessionOf(r) && strings.HasPrefix(updateShape(m.Params), "state_update")
			}
			if !snap {
				t.Errorf("session/resume of %s answered before any state snapshot of it", sessionOf(r))
			}
		}
	}
}
