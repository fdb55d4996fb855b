package interop

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"

	"github.com/residentd/residentd/apitype"
	"github.com/residentd/residentd/internal/channel"
	"github.com/residentd/residentd/internal/config"
	"github.com/residentd/residentd/internal/daemon"
)

// gemini-cli under .ci/agents, run as gemini --experimental-acp on the node
// on PATH.
const geminiBin = "node_modules/.bin/gemini"

// geminiFraming is the system framing of the gemini bindings.
const geminiFraming = "You are @gemini, answering mentions in a team chat for the residentd interop tests."

// geminiTimeout bounds a gemini test: its turns are quick against the fake
// API, but a test may wait for the next minute of the clock (see
// nextMinute), and a start on a loaded machine takes up to the default
// start_timeout (90 s).
const geminiTimeout = 6 * time.Minute

func geminiCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), geminiTimeout)
	t.Cleanup(cancel)
	return ctx
}

// geminiBinding runs gemini-cli 0.61 with HOME in home (so no user's
// settings, login or sessions are read, and its sessions are kept there)
// against api with a dummy key: GOOGLE_GEMINI_BASE_URL makes it use its
// "gateway" auth, which sends every model call to that URL. Its usage
// statistics are off (settings.json), so it sends nothing elsewhere. The
// binding's start_timeout is the default.
func geminiBinding(t testing.TB, home string, api *fakeGemini) config.Binding {
	t.Helper()
	bin := realAgent(t, geminiBin)
	if !strings.HasPrefix(api.URL(), "http://127.0.0.1:") {
		t.Fatalf("gemini binding without a 127.0.0.1 base URL: %q", api.URL())
	}
	if err := os.MkdirAll(filepath.Join(home, ".gemini"), 0o700); err != nil {
		t.Fatal(err)
	}
	settings := `{"privacy": {"usageStatisticsEnabled": false}}`
	if err := os.WriteFile(filepath.Join(home, ".gemini", "settings.json"), []byte(settings), 0o600); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{
		"HOME":                   home,
		"XDG_CONFIG_HOME":        home + "/.config",
		"GOOGLE_GEMINI_BASE_URL": api.URL(),
		"GEMINI_API_KEY":         "dummy",
		// Never the caller's credentials or choices.
		"GOOGLE_API_KEY":                 "",
		"GOOGLE_GENAI_USE_VERTEXAI":      "",
		"GOOGLE_GENAI_USE_GCA":           "",
		"GOOGLE_CLOUD_PROJECT":           "",
		"GOOGLE_APPLICATION_CREDENTIALS": "",
		"GEMINI_MODEL":                   "",
	}
	return config.Binding{
		ID: "b-gemini", Handle: "@gemini", Runtime: "gemini-cli",
		Command: bin, Args: []string{"--experimental-acp"}, Env: env, System: geminiFraming,
		Supervised: true, Resident: true,
		Spare: new(int), // the tests count the processes their turns start
	}
}

// lastUser is the text of the newest user content of the model call: what
// the turn added to the conversation.
func (g geminiRequest) lastUser() string {
	for i := len(g.Contents) - 1; i >= 0; i-- {
		if g.Contents[i].Role == "user" {
			return g.Contents[i].text()
		}
	}
	return ""
}

// holds reports whether any content of the call holds s.
func (g geminiRequest) holds(s string) bool {
	for _, c := range g.Contents {
		if strings.Contains(c.text(), s) {
			return true
		}
	}
	return false
}

// restoringMethods lists the restoring events of a turn, by method.
func restoringMethods(r result) []string {
	var out []string
	for _, u := range r.updates {
		if u.Event == apitype.EventRestoring {
			out = append(out, u.Method)
		}
	}
	return out
}

// nextMinute waits for the clock's next minute (UTC) after t0. gemini-cli
// names a session's file by the minute (UTC) it started in, and a
// session/load of that session in a new process opens a file of the same
// name for its own recording: within the same minute that is the session's
// own file, whose history it then empties (TestGeminiLoadInTheSameMinute).
// The wait is for the clock itself, which nothing else signals.
func nextMinute(ctx context.Context, t testing.TB, t0 time.Time) {
	t.Helper()
	next := t0.UTC().Truncate(time.Minute).Add(time.Minute)
	select {
	case <-time.After(time.Until(next)):
	case <-ctx.Done():
		t.Fatal("the test's time ran out waiting for the next minute")
	}
}

// TestGeminiColdWarmAndLoadAfterRestart: gemini-cli 0.61 (gemini
// --experimental-acp) through residentd against a fake Gemini API: a cold
// turn (spawn, initialize and session/new within the default start_timeout)
// and a warm one on the same process answer with the model's reply, the
// warm one sending only the new mention; after a daemon restart (in a
// later minute than the session's start) the key's session reopens with
// session/load in a new process, with its history: the model call of the
// restored turn holds the first two turns, and residentd sent only the new
// mention.
func TestGeminiColdWarmAndLoadAfterRestart(t *testing.T) {
	t.Parallel()
	const reply = "fake gemini: the webhook retry races the refund job"
	api := newFakeGemini(t, reply)
	taps := t.TempDir()
	h := newHarness(t, tapped(t, geminiBinding(t, t.TempDir(), api), taps))
	ctx := geminiCtx(t)
	h.post(channel.Message{ID: "a1", Channel: "ch", Author: "aiko", Body: "the refund spec is flaky again"},
		channel.Message{ID: "a2", Channel: "ch", Author: "aiko", Body: "it fails on the webhook retry"})

	r := h.mention(ctx, "ch", "b-gemini", "q1", "@gemini why is the refund spec flaky? PAPAYA-1")
	if r.err != nil {
		t.Fatalf("cold turn: %v", r.err)
	}
	// The session started before the turn ended: the restart waits for the
	// minute after this one (the session's minute, or a later one).
	t0 := time.Now()
	t.Logf("gemini-cli cold start (spawn, initialize, session/new) through residentd: %v; usage in done: %+v", r.ready, r.done.Usage)
	if r.start.Shape != "cold" || r.done.Text != reply || len(r.chunks()) == 0 {
		t.Fatalf("cold turn: shape %q, text %q, chunks %q", r.start.Shape, r.done.Text, r.chunks())
	}
	turns := api.turns(t)
	if len(turns) != 1 {
		t.Fatalf("cold turn: %d model calls, want 1", len(turns))
	}
	if u := turns[0].lastUser(); !strings.Contains(u, "PAPAYA-1") || !strings.Contains(u, geminiFraming) {
		t.Fatalf("cold turn's model call: user content %q, want the framing and the mention", u)
	}
	cold := turns[0].lastUser()

	r2 := h.mention(ctx, "ch", "b-gemini", "q2", "@gemini and the webhook? PAPAYA-2")
	if r2.err != nil || r2.start.Shape != "warm" || r2.start.Pid != r.start.Pid || r2.done.Text != reply {
		t.Fatalf("warm turn: %v, shape %q, pid %d (cold %d), text %q", r2.err, r2.start.Shape, r2.start.Pid, r.start.Pid, r2.done.Text)
	}
	turns = api.turns(t)
	warm := turns[len(turns)-1]
	if u := warm.lastUser(); !strings.Contains(u, "PAPAYA-2") || strings.Contains(u, geminiFraming) || !warm.holds("PAPAYA-1") {
		t.Fatalf("warm turn's model call: last user content %q; holds the first turn: %v", u, warm.holds("PAPAYA-1"))
	}

	nextMinute(ctx, t, t0)
	h.restart()
	r3 := h.mention(ctx, "ch", "b-gemini", "q3", "@gemini and now? PAPAYA-3")
	if r3.err != nil || r3.start.Shape != "restored" || r3.done.Text != reply {
		t.Fatalf("turn after the restart: %v, shape %q, text %q", r3.err, r3.start.Shape, r3.done.Text)
	}
	if m := restoringMethods(r3); len(m) != 1 || m[0] != "load" {
		t.Fatalf("restoring events %v, want one: load", m)
	}
	// gemini-cli replays the history after its session/load answer: none
	// of it reached the turn (its text is the reply alone) or an agent run.
	if n := testutil.ToFloat64(h.m.AgentRuns); n != 0 {
		t.Fatalf("%v agent runs opened; the replayed history must open none", n)
	}
	turns = api.turns(t)
	restored := turns[len(turns)-1]
	u := restored.lastUser()
	if !restored.holds("PAPAYA-1") || !restored.holds("PAPAYA-2") || !strings.Contains(u, "PAPAYA-3") || strings.Contains(u, "PAPAYA-1") || strings.Contains(u, geminiFraming) {
		t.Fatalf("restored turn's model call: the history %v/%v, last user content %q", restored.holds("PAPAYA-1"), restored.holds("PAPAYA-2"), u)
	}
	t.Logf("user content residentd sent: cold %d chars (about %d tokens), warm %d, restored %d (about %d tokens)",
		len(cold), len(cold)/4, len(warm.lastUser()), len(u), len(u)/4)

	// The restored process answered session/load itself, with no error.
	reqs, answers := geminiLoads(t, taps)
	if len(reqs) != 1 || answers[0] == nil || len(answers[0].Error) > 0 || sessionOf(reqs[0]) != r.start.Native {
		t.Fatalf("session/load of %q in the new process: %d requests, answer %+v", r.start.Native, len(reqs), answers)
	}
}

// geminiLoads returns the session/load requests the two recorded gemini
// processes got (one per daemon), with their answers.
func geminiLoads(t testing.TB, taps string) (reqs []rpc, answers []*rpc) {
	t.Helper()
	procs := tapRecords(t, taps)
	if len(procs) != 2 {
		t.Fatalf("%d gemini processes recorded, want 2 (one per daemon)", len(procs))
	}
	for _, p := range procs {
		r, a := calls(p, "session/load")
		reqs, answers = append(reqs, r...), append(answers, a...)
	}
	return reqs, answers
}

// TestGeminiLoadInTheSameMinute: gemini-cli 0.61 names a session's file by
// the minute it started in (session-<UTC minute>-<id prefix>.jsonl), and a
// session/load in a new process starts its own recording under that name
// before it looks for the session: within the minute the session started,
// that is the session's own file, whose history it empties, and the load
// fails ("No previous sessions found for this project", or "Invalid
// session identifier" when the project has other sessions, as a binding
// with several channels has). residentd then starts a new
// session on the same process with the key's conversation replayed from
// its own store: the turn is cold, and answers with the history. The test
// starts at the top of a minute so the restart comes within it; on a
// machine too slow for that it skips.
func TestGeminiLoadInTheSameMinute(t *testing.T) {
	t.Parallel()
	const reply = "fake gemini: the cache key misses the tenant"
	api := newFakeGemini(t, reply)
	taps := t.TempDir()
	h := newHarness(t, tapped(t, geminiBinding(t, t.TempDir(), api), taps))
	ctx := geminiCtx(t)

	if now := time.Now(); now.Second() > 5 {
		nextMinute(ctx, t, now)
	}
	t0 := time.Now()
	r := h.mention(ctx, "ch", "b-gemini", "q1", "@gemini why do the tenants share a cache? KIWI-1")
	if r.err != nil || r.start.Shape != "cold" {
		t.Fatalf("cold turn: %v, shape %q", r.err, r.start.Shape)
	}
	h.restart()
	r2 := h.mention(ctx, "ch", "b-gemini", "q2", "@gemini and now? KIWI-2")
	if r2.err != nil || r2.done.Text != reply {
		t.Fatalf("turn after the restart: %v, text %q", r2.err, r2.done.Text)
	}
	reqs, answers := geminiLoads(t, taps)
	if len(reqs) != 1 || answers[0] == nil {
		t.Fatalf("session/load in the new process: %d requests, answers %+v", len(reqs), answers)
	}
	if len(answers[0].Error) == 0 {
		t.Skipf("the restart came %v after the session started, in a later minute: gemini-cli loaded it; this machine is too slow to show the same-minute failure", time.Since(t0).Round(time.Second))
	}
	// "No previous sessions found" when the project has no other session
	// (here), "Invalid session identifier" when it has.
	if e := string(answers[0].Error); !strings.Contains(e, "No previous sessions found") && !strings.Contains(e, "Invalid session identifier") {
		t.Fatalf("session/load failed with %s, want gemini-cli's session not found", e)
	}
	if r2.start.Shape != "cold" {
		t.Fatalf("turn after the failed load: shape %q, want cold (a new session with the conversation replayed)", r2.start.Shape)
	}
	turns := api.turns(t)
	u := turns[len(turns)-1].lastUser()
	if !strings.Contains(u, "KIWI-1") || !strings.Contains(u, "KIWI-2") || !strings.Contains(u, geminiFraming) {
		t.Fatalf("cold turn after the failed load: its user content %q does not replay the first turn", u)
	}
	if n := testutil.ToFloat64(h.m.SessionRestores.WithLabelValues("load", "failed")); n != 1 {
		t.Fatalf("failed loads counted: %v, want 1", n)
	}
}

// TestGeminiWithoutCredentials: with no credentials (no key, no base URL,
// no login in its home) gemini-cli starts and answers initialize, and its
// session/new fails with its own message, which the turn's error carries;
// no model call is made.
func TestGeminiWithoutCredentials(t *testing.T) {
	t.Parallel()
	api := newFakeGemini(t, "nobody should ask for this")
	b := geminiBinding(t, t.TempDir(), api)
	b.Env["GOOGLE_GEMINI_BASE_URL"], b.Env["GEMINI_API_KEY"] = "", ""
	h := newHarness(t, b)
	r := h.mention(geminiCtx(t), "ch", "b-gemini", "q1", "@gemini hello")
	if r.err == nil || daemon.Code(r.err) != apitype.CodeAgentFailed || !strings.Contains(r.err.Error(), "Gemini API key is missing or not configured") {
		t.Fatalf("turn without credentials: %v (code %s), want gemini-cli's own error at session/new", r.err, daemon.Code(r.err))
	}
	if n := len(api.requests()); n != 0 {
		t.Fatalf("%d model calls without credentials", n)
	}
}

// spawnSeconds reads the spawn histogram: how many starts it observed and
// their total time.
func spawnSeconds(t testing.TB, h prometheus.Histogram) (uint64, float64) {
	t.Helper()
	var m dto.Metric
	if err := h.Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetHistogram().GetSampleCount(), m.GetHistogram().GetSampleSum()
}

// loadAverage is the one-minute load average, "" where it cannot be read.
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return ""
	}
	return strings.Fields(string(b))[0]
}

// niceEnv, set to a niceness (19), runs gemini-cli under nice in
// TestGeminiStartsWithinTheDefaultLimit: beside a loaded machine, the
// agent then gets the share of the CPU it would get on a far busier one.
const niceEnv = "RESIDENTD_GEMINI_NICE"

// TestGeminiStartsWithinTheDefaultLimit: gemini-cli's processes start
// (spawn and initialize) within the default start_timeout, one after the
// other: five cold turns on five channels with one slot, each a new
// process. The test logs each start's time and the load average it met;
// run it beside a loaded machine, and with RESIDENTD_GEMINI_NICE=19, to
// see the figures (BENCHMARKS.md).
func TestGeminiStartsWithinTheDefaultLimit(t *testing.T) {
	api := newFakeGemini(t, "fake gemini: started")
	b := geminiBinding(t, t.TempDir(), api)
	if n := os.Getenv(niceEnv); n != "" {
		b.Args = append([]string{"-n", n, b.Command}, b.Args...)
		b.Command = "nice"
	}
	h := newHarnessCfg(t, func(c *config.Config) { c.MaxLive = 1 }, b)
	if got := time.Duration(h.cfg.Bindings[0].StartTimeout); got != config.DefaultStartTimeout {
		t.Fatalf("start_timeout %v, want the default %v", got, config.DefaultStartTimeout)
	}
	ctx := geminiCtx(t)
	var took []string
	for i := 1; i <= 5; i++ {
		load := loadAverage()
		n0, s0 := spawnSeconds(t, h.m.AgentSpawn)
		ch := fmt.Sprintf("ch-%d", i)
		r := h.mention(ctx, ch, "b-gemini", "q"+ch, "@gemini start")
		if r.err != nil || r.start.Shape != "cold" {
			t.Fatalf("start %d: %v, shape %q", i, r.err, r.start.Shape)
		}
		n1, s1 := spawnSeconds(t, h.m.AgentSpawn)
		if n1 != n0+1 {
			t.Fatalf("start %d: %d spawns observed, want 1", i, n1-n0)
		}
		took = append(took, fmt.Sprintf("%.1fs (load %s)", s1-s0, load))
	}
	first := testutil.ToFloat64(h.m.StartTimeouts.WithLabelValues("b-gemini", "first"))
	t.Logf("gemini-cli spawn + initialize through residentd (%s=%q): %s; starts past start_timeout (tried again): %v", niceEnv, os.Getenv(niceEnv), strings.Join(took, ", "), first)
}
