package interop

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/residentd/residentd/internal/channel"
	"github.com/residentd/residentd/internal/config"
	"github.com/residentd/residentd/internal/daemon"
	"github.com/residentd/residentd/internal/testkit"
)

// codexACP is codex-acp 2.6 under .ci/agents; it runs the Codex CLI of
// @openai/codex (its native binary from the platform package npm picked)
// as its app server.
const codexACP = "node_modules/@agentclientprotocol/codex-acp/dist/index.js"

// codexFraming is the system framing of the codex bindings.
const codexFraming = "You are @codex, answering mentions in a team chat for the residentd interop tests."

// codexModel is the model the codex bindings ask the fake for: one the
// Codex CLI knows (an unknown one puts a warning into every reply), whose
// tools are the classic ones (exec_command, apply_patch) rather than a
// JavaScript cell that calls them.
const codexModel = "gpt-5.5"

// codexBinding runs codex-acp with HOME and CODEX_HOME in a directory of
// its own, so no user's login or settings are read. Its config.toml makes
// api the model provider (a custom one: no OpenAI login is asked for),
// with a dummy key, and no retries: a failed call fails the turn at once.
func codexBinding(t testing.TB, api *fakeResponses) config.Binding {
	t.Helper()
	bin := realAgent(t, codexACP)
	if !strings.HasPrefix(api.URL(), "http://127.0.0.1:") {
		t.Fatalf("codex binding without a 127.0.0.1 base URL: %q", api.URL())
	}
	home := t.TempDir()
	codexHome := filepath.Join(home, ".codex")
	if err := os.MkdirAll(codexHome, 0o700); err != nil {
		t.Fatal(err)
	}
	toml := fmt.Sprintf(`model = %q
model_provider = "residentd-fake"

[model_providers.residentd-fake]
name = "the residentd tests' fake Responses API"
base_url = %q
wire_api = "responses"
env_key = "RESIDENTD_FAKE_MODEL_KEY"
request_max_retries = 0
stream_max_retries = 0
`, codexModel, api.URL())
	if err := os.WriteFile(filepath.Join(codexHome, "config.toml"), []byte(toml), 0o600); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{
		"HOME":                     home,
		"XDG_CONFIG_HOME":          filepath.Join(home, ".config"),
		"CODEX_HOME":               codexHome,
		"RESIDENTD_FAKE_MODEL_KEY": "dummy",
		// Never the caller's credentials, Codex binary or settings.
		"OPENAI_API_KEY":       "",
		"CODEX_API_KEY":        "",
		"CODEX_PATH":           "",
		"CODEX_CONFIG":         "",
		"DEFAULT_AUTH_REQUEST": "",
		"INITIAL_AGENT_MODE":   "",
		"NO_BROWSER":           "1",
	}
	return config.Binding{
		ID: "b-codex", Handle: "@codex", Runtime: "cli:codex:agent",
		Command: bin, Env: env, System: codexFraming, Supervised: true, Resident: true,
		// No spare: the tests count and tap the processes their turns start.
		Spare: new(int),
	}
}

// codexHarness is a harness with the one binding codexBinding on a new
// fake Responses API that answers reply, tweak applied to the binding.
func codexHarness(t testing.TB, reply string, tweak func(*config.Binding)) (*harness, *fakeResponses) {
	t.Helper()
	api := newFakeResponses(t, reply)
	b := codexBinding(t, api)
	if tweak != nil {
		tweak(&b)
	}
	return newHarness(t, b), api
}

// codexPrices are the test binding's prices: codex-acp reports tokens and
// no cost, so the daemon prices them.
var codexPrices = &config.Prices{Input: 1.25, Output: 10, CacheRead: 0.125, Currency: "USD"}

// TestCodexColdWarm: codex-acp answers a cold and a warm turn through the
// daemon against the fake Responses API; the request the CLI sends for the
// warm turn ends with the newest user turn alone (no replay, no framing,
// the first turn once, as the CLI's own history); each turn's usage is
// what the fake reported for its model calls, cached tokens apart, and its
// cost is the binding's prices applied to them (codex-acp reports none).
func TestCodexColdWarm(t *testing.T) {
	t.Parallel()
	const reply = "The refund spec races the webhook retry."
	h, api := codexHarness(t, reply, func(b *config.Binding) { b.Prices = codexPrices })
	ctx := testCtx(t)
	h.post(channel.Message{ID: "a1", Channel: "ch", Author: "aiko", Body: "the refund spec is flaky again"})

	r1 := h.mention(ctx, "ch", "b-codex", "q1", "@codex why is the refund spec flaky? MARK-ONE")
	if r1.err != nil {
		t.Fatalf("cold turn: %v", r1.err)
	}
	t.Logf("codex-acp cold turn through residentd: ready %v, total %v", r1.ready, r1.total)
	streamed(t, r1, reply, "cold")
	cold := api.turnCalls(t, "MARK-ONE")
	if len(cold) != 1 {
		t.Fatalf("the cold turn made %d model calls, want 1", len(cold))
	}
	// codex-acp 2.6 takes the framing as the session's system prompt
	// (append): it reaches the model as developer instructions, and no user
	// message carries it.
	if u := cold[0].users(); strings.Contains(strings.Join(u, "\n"), codexFraming) {
		t.Fatalf("a user message of the cold call carries the framing: %.400s", u[len(u)-1])
	}
	if dev := strings.Join(cold[0].messages("developer"), "\n") + cold[0].Instructions; !strings.Contains(dev, codexFraming) {
		t.Fatalf("the cold call's developer messages and instructions lack the framing")
	}
	codexUsage(t, r1, 1)

	h.post(channel.Message{ID: "b1", Channel: "ch", Author: "aiko", Body: "retry runs twice on CI"})
	r2 := h.mention(ctx, "ch", "b-codex", "q2", "@codex and the webhook retries? MARK-TWO")
	if r2.err != nil {
		t.Fatalf("warm turn: %v", r2.err)
	}
	t.Logf("codex-acp warm turn through residentd: total %v", r2.total)
	streamed(t, r2, reply, "warm")
	if r2.done.Native != r1.done.Native || r2.start.Pid != r1.start.Pid {
		t.Fatalf("warm turn went elsewhere: native %s pid %d, want %s pid %d", r2.done.Native, r2.start.Pid, r1.done.Native, r1.start.Pid)
	}
	warm := api.turnCalls(t, "MARK-TWO")
	if len(warm) != 1 {
		t.Fatalf("the warm turn made %d model calls, want 1", len(warm))
	}
	users := warm[0].users()
	last := users[len(users)-1]
	for i, u := range users {
		t.Logf("warm call user message %d: %.160q", i, u)
	}
	if !strings.Contains(last, `"message_id":"q2"`) || !strings.Contains(last, "retry runs twice on CI") {
		t.Fatalf("the warm call's last user message is not the new user turn: %.400s", last)
	}
	if strings.Contains(last, "MARK-ONE") || strings.Contains(last, codexFraming) || strings.Contains(last, "User: ") || strings.Contains(last, reply) || strings.Contains(last, "the refund spec is flaky again") {
		t.Fatalf("the warm user turn carries replayed history, framing or lines seen before: %.600s", last)
	}
	if n := strings.Count(strings.Join(users, "\n"), "MARK-ONE"); n != 1 {
		t.Fatalf("the first user turn appears %d times in the warm call, want once (the CLI's own history)", n)
	}
	// The session's title, asked for after the first turn, is in neither
	// turn's usage.
	codexUsage(t, r2, 1)
	t.Logf("side calls (a title for the session) so far: %d", api.sideCalls())
}

// codexUsage asserts r's done reports calls model calls' usage as the fake
// reported it (the cached tokens apart from the uncached input), and their
// cost by codexPrices (the binding's prices: the agent reports none).
func codexUsage(t *testing.T, r result, calls int64) {
	t.Helper()
	u, c := r.done.Usage, codexCallUsage
	if u == nil || u.Unknown {
		t.Fatalf("done usage %+v, want what the fake reported", u)
	}
	in, cached, out := calls*(c.input-c.cached), calls*c.cached, calls*c.output
	if u.InputTokens != in || u.CacheReadTokens != cached || u.CacheWriteTokens != 0 || u.OutputTokens != out {
		t.Fatalf("done usage %+v after %d model calls: want %d input, %d cache read, %d output", u, calls, in, cached, out)
	}
	want := codexPrices.Cost(in, out, cached, 0)
	if u.Cost == nil || *u.Cost != want || u.CostSource != "prices" || u.Currency != "USD" {
		t.Fatalf("done cost %v %s (%s), want %v USD by the binding's prices", u.Cost, u.Currency, u.CostSource, want)
	}
	t.Logf("usage: %d in, %d cache read, %d out; cost %s %s (%s)", u.InputTokens, u.CacheReadTokens, u.OutputTokens, *u.Cost, u.Currency, u.CostSource)
}

// TestCodexRestore drives codex-acp through its tap (every JSON-RPC line
// recorded) with one slot:
//   - a turn on another channel evicts the key's process for capacity, and
//     the eviction sends session/close, which codex-acp answers, before the
//     process is stopped;
//   - the key's next turn starts a new process that reopens the session
//     with session/resume (restored, restored_by resume), and the model
//     request it leads to continues the conversation: the earlier turns
//     once each, as the CLI's history, then only the restored turn's user
//     message (no replay, no framing);
//   - after a daemon restart the same holds again.
func TestCodexRestore(t *testing.T) {
	t.Parallel()
	const reply = "Looked at it."
	api := newFakeResponses(t, reply)
	taps := t.TempDir()
	h := newHarnessCfg(t, func(c *config.Config) { c.MaxLive = 1 }, tapped(t, codexBinding(t, api), taps))
	ctx := testCtx(t)

	r1 := h.mention(ctx, "ch-a", "b-codex", "q1", "@codex what broke? MARK-A1")
	if r1.err != nil || r1.done.Shape != "cold" {
		t.Fatalf("cold turn: %+v %v", r1.done, r1.err)
	}
	native := r1.done.Native
	r2 := h.mention(ctx, "ch-a", "b-codex", "q2", "@codex and then? MARK-A2")
	if r2.err != nil || r2.done.Shape != "warm" {
		t.Fatalf("warm turn: %+v %v", r2.done, r2.err)
	}

	// A turn on another channel takes the only slot.
	r3 := h.mention(ctx, "ch-b", "b-codex", "q3", "@codex hello from b MARK-B1")
	if r3.err != nil || r3.done.Shape != "cold" {
		t.Fatalf("turn on ch-b: %+v %v", r3.done, r3.err)
	}
	if n := testutil.ToFloat64(h.m.Evictions.WithLabelValues("capacity")); n != 1 {
		t.Fatalf("capacity evictions = %v, want 1", n)
	}
	testkit.WaitFor(t, 30*time.Second, func() bool { return !alive(r1.start.Pid) }, testkit.Waiting("the evicted agent to exit"))
	closes, closed := calls(processOf(t, taps, native, "session/new"), "session/close")
	if len(closes) != 1 || sessionOf(closes[0]) != native || closed[0] == nil || closed[0].Error != nil {
		t.Fatalf("session/close on eviction: %d calls %v, answers %v; want one for %s, answered", len(closes), params(closes), closed, native)
	}

	h.post(channel.Message{ID: "c1", Channel: "ch-a", Author: "aiko", Body: "it broke again after the deploy"})
	r4 := h.mention(ctx, "ch-a", "b-codex", "q4", "@codex still broken? MARK-A3")
	t.Logf("codex-acp restore after an eviction (spawn, initialize, session/resume) through residentd: ready %v, total %v", r4.ready, r4.total)
	codexRestored(t, h, api, r4, native, "MARK-A3", "it broke again after the deploy", "MARK-A1", "MARK-A2")
	if ok := testutil.ToFloat64(h.m.SessionRestores.WithLabelValues("resume", "ok")); ok != 1 {
		t.Fatalf("session restores by resume = %v, want 1", ok)
	}

	h.restart()
	r5 := h.mention(ctx, "ch-a", "b-codex", "q5", "@codex after the restart? MARK-A4")
	t.Logf("codex-acp restore after a daemon restart through residentd: ready %v, total %v", r5.ready, r5.total)
	if r5.start.Pid == r4.start.Pid {
		t.Fatalf("the restarted daemon's turn ran in the old process %d", r4.start.Pid)
	}
	codexRestored(t, h, api, r5, native, "MARK-A4", "", "MARK-A1", "MARK-A2", "MARK-A3")
	if resumes, answers := calls(processOf(t, taps, native, "session/resume"), "session/resume"); len(resumes) != 1 || answers[0] == nil || answers[0].Error != nil {
		t.Fatalf("session/resume in the restored process: %v, answers %v", params(resumes), answers)
	}
}

// codexRestored asserts r was a restored turn of native, reopened by
// session/resume, whose model call continued the conversation: the
// earlier turns' markers once each and a reply to each, then a last user
// message with the turn's marker (and line, when given) and nothing
// replayed.
func codexRestored(t *testing.T, h *harness, api *fakeResponses, r result, native, marker, line string, earlier ...string) {
	t.Helper()
	if r.err != nil || r.done.Shape != "restored" || r.done.Native != native {
		t.Fatalf("restored turn: %+v %v, want restored %s", r.done, r.err, native)
	}
	if ss := h.d.Sessions(); len(ss) == 0 || ss[0].RestoredBy != "resume" {
		t.Fatalf("sessions %+v, want the key restored_by resume", ss)
	}
	cs := api.turnCalls(t, marker)
	if len(cs) != 1 {
		t.Fatalf("the restored turn made %d model calls, want 1", len(cs))
	}
	users := cs[0].users()
	last := users[len(users)-1]
	all := strings.Join(users[:len(users)-1], "\n")
	for _, m := range earlier {
		if n := strings.Count(all, m); n != 1 {
			t.Fatalf("the restored turn's model call carries the earlier turn %s %d times, want once: %q", m, n, users)
		}
	}
	if strings.Contains(last, codexFraming) || strings.Contains(last, "User: ") || !strings.Contains(last, line) {
		t.Fatalf("the restored turn's user message replays or lacks the new line %q: %.600s", line, last)
	}
	if n := strings.Count(strings.Join(cs[0].messages("assistant"), "\n"), api.reply); n != len(earlier) {
		t.Fatalf("the restored turn's model call carries %d replies of the earlier turns, want %d", n, len(earlier))
	}
	for _, m := range earlier {
		if strings.Contains(last, m) {
			t.Fatalf("the restored turn's user message replays %s: %.600s", m, last)
		}
	}
	t.Logf("restored turn's user message: %.300q", last)
}

// TestCodexStopLeavesNoChildren: codex-acp runs the Codex CLI's app server
// (node, then the native binary); stopping the daemon ends every process
// of the agent's tree.
func TestCodexStopLeavesNoChildren(t *testing.T) {
	t.Parallel()
	h, _ := codexHarness(t, "done", nil)
	r := h.mention(testCtx(t), "ch", "b-codex", "q1", "@codex hello")
	if r.err != nil {
		t.Fatalf("turn: %v", r.err)
	}
	stopLeavesNoChildren(t, h, r.start.Pid, "codex-acp and the native Codex app server it starts", func(c string) bool {
		return strings.HasSuffix(c, "/bin/codex app-server")
	})
}

// TestCodexWithoutCredentials: with no login and no provider of its own
// (the Codex CLI's default, OpenAI's, which needs one), codex-acp refuses
// session/new with "Authentication required": the turn fails before it
// starts, as the agent's error.
func TestCodexWithoutCredentials(t *testing.T) {
	t.Parallel()
	b := codexBinding(t, newFakeResponses(t, "nobody should ask for this"))
	if err := os.Remove(filepath.Join(b.Env["CODEX_HOME"], "config.toml")); err != nil {
		t.Fatal(err)
	}
	h := newHarness(t, b)
	r := h.mention(testCtx(t), "ch", "b-codex", "q1", "@codex why is the refund spec flaky?")
	if r.err == nil || daemon.Outcome(r.err) != "agent_error" || !strings.Contains(r.err.Error(), "Authentication required") {
		t.Fatalf("turn without credentials: err %v (outcome %s), want the agent's Authentication required", r.err, daemon.Outcome(r.err))
	}
	if r.start.Event != "" || r.done.Event != "" {
		t.Fatalf("a turn that could not open a session started (%+v) or ended done (%+v)", r.start, r.done)
	}
	t.Logf("without credentials: %v", r.err)
}
