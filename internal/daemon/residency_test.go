package daemon_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/residentd/residentd/apitype"
	"github.com/residentd/residentd/internal/config"
	"github.com/residentd/residentd/internal/daemontest"
	"github.com/residentd/residentd/internal/session"
	"github.com/residentd/residentd/internal/testkit"
)

// newResidencyHarness is a daemon on clock c whose residency loop runs
// only when the test calls Tend, its info logs kept in logs.
func newResidencyHarness(t *testing.T, c *fakeClock, tweak ...func(*config.Config)) (*harness, *observer.ObservedLogs) {
	t.Helper()
	return newResidencyHarnessPSI(t, c, "", tweak...)
}

// withBinding adds a built-in agent binding id whose cache lives ttl.
func withBinding(t *testing.T, id, ttl string, args ...string) func(*config.Config) {
	return func(c *config.Config) {
		b := testBinding(t, id, c.StateDir, args...)
		b.CacheTTL = ttl
		c.Bindings = append(c.Bindings, b)
	}
}

func key(ch, binding string) string { return session.Key{Channel: ch, Binding: binding}.String() }

// decisions is what residentd_residency_decisions_total counted for the
// labels binding, policy, decision and reason.
func (h *harness) decisions(binding, policy, decision, reason string) float64 {
	return testutil.ToFloat64(h.m.ResidencyDecisions.WithLabelValues(binding, policy, decision, reason))
}

// decisionLogs are the "residency decision" lines logged with decision d,
// as "key why".
func decisionLogs(logs *observer.ObservedLogs, d string) []string {
	var out []string
	for _, e := range logs.FilterMessage("residency decision").FilterField(zap.String("decision", d)).All() {
		f := e.ContextMap()
		who := fmt.Sprint(f["key"])
		if f["key"] == nil {
			who = fmt.Sprint(f["binding"])
		}
		out = append(out, who+" "+fmt.Sprint(f["why"]))
	}
	return out
}

// residencyOf is the listing's residency of key k's process, nil when it
// is not live.
func (h *harness) residencyOf(ch, binding string) (*apitype.Session, *apitype.SessionResidency) {
	for _, s := range h.d.Sessions() {
		if s.Channel == ch && s.Binding == binding {
			return &s, s.Residency
		}
	}
	return nil, nil
}

// TestResidencyEvictionFollowsCacheLife: with a slot for two, a key whose
// provider cache has expired (binding cache_ttl 1m, used last) goes before
// one whose cache lives (cache_ttl 1h, used first) under residency
// "cache"; the timer evicts the least recently used one. Each decision is
// counted with its policy and reason, logged, and the listing says why
// each process is kept.
func TestResidencyEvictionFollowsCacheLife(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ policy, victim, victimBinding, why, keepLong, keepShort string }{
		{"timer", key("ch-long", "b-builtin"), "b-builtin", "least recently used", "idle for less than 30m0s", "idle for less than 30m0s"},
		{"cache", key("ch-short", "b-short"), "b-short", "cache expired", "cache alive", "idle for less than 30m0s"},
		// saving's reasons carry figures after their fixed phrase: the
		// listing and the log are matched on it, the metric has it alone.
		{"saving", key("ch-short", "b-short"), "b-short", "cache expired; staying warm saves least", "staying warm pays", "staying warm no longer pays"},
	} {
		t.Run(tc.policy, func(t *testing.T) {
			t.Parallel()
			c := &fakeClock{t: time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)}
			h, logs := newResidencyHarness(t, c, withBinding(t, "b-short", "1m"), func(cfg *config.Config) {
				cfg.MaxLive, cfg.Residency = 2, tc.policy
				cfg.Bindings[0].CacheTTL = "1h"
			})
			reply(t, h.mention("ch-long", "b-builtin", "m1", "@agent hi"))
			c.Add(time.Minute)
			reply(t, h.mention("ch-short", "b-short", "m2", "@agent hi"))
			c.Add(2 * time.Minute) // ch-short's cache (1m) has expired, ch-long's (1h) lives

			ses, long := h.residencyOf("ch-long", "b-builtin")
			if long == nil {
				t.Fatalf("ch-long has no residency in the listing: %+v", ses)
			}
			if long.Policy != tc.policy || !strings.HasPrefix(long.Keep, tc.keepLong) || long.CacheTTLS != 3600 || long.CacheExpires == nil || long.ContextTokens <= 0 || long.ContextSource != "agent" {
				t.Fatalf("ch-long's residency %+v", *long)
			}
			if want := c.Now().Add(-3 * time.Minute).Add(time.Hour); !long.CacheExpires.Equal(want) {
				t.Fatalf("ch-long's cache expires %v, want its last request plus 1h, %v", long.CacheExpires, want)
			}
			if _, short := h.residencyOf("ch-short", "b-short"); short == nil || !strings.HasPrefix(short.Keep, tc.keepShort) || short.CacheTTLS != 60 || !short.CacheExpires.Before(c.Now()) {
				t.Fatalf("ch-short's residency %+v", short)
			}

			reply(t, h.mention("ch-new", "b-builtin", "m3", "@agent hi"))
			if got, want := h.evictions(), []string{tc.victim + " capacity"}; !slices.Equal(got, want) {
				t.Fatalf("evictions %v, want %v", got, want)
			}
			if n := h.decisions(tc.victimBinding, tc.policy, "evict", tc.why); n != 1 {
				t.Fatalf("residentd_residency_decisions_total{%s,%s,evict,%q} = %v, want 1", tc.victimBinding, tc.policy, tc.why, n)
			}
			if got := decisionLogs(logs, "evict"); len(got) != 1 || !strings.HasPrefix(got[0], tc.victim+" "+tc.why) {
				t.Fatalf("logged evictions %v, want one: %s %s…", got, tc.victim, tc.why)
			}
		})
	}
}

// TestResidencyReaperKeepsALiveCache: past the idle timeout, the timer
// reaps a process whose 1-hour cache still lives; "cache" keeps it, saying
// so, and lets it go once the cache has expired.
func TestResidencyReaperKeepsALiveCache(t *testing.T) {
	t.Parallel()
	for _, policy := range []string{"timer", "cache"} {
		t.Run(policy, func(t *testing.T) {
			t.Parallel()
			c := &fakeClock{t: time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)}
			h, logs := newResidencyHarness(t, c, func(cfg *config.Config) {
				cfg.Residency = policy
				cfg.Bindings[0].CacheTTL = "1h"
			})
			reply(t, h.mention("ch", "b-builtin", "m1", "@agent hi"))
			c.Add(31 * time.Minute)
			stopped, why := h.d.ReapIdle(), "idle past 30m0s"
			if policy == "cache" {
				if stopped != 0 {
					t.Fatalf("cache: the reaper stopped %d processes whose cache lives", stopped)
				}
				if _, r := h.residencyOf("ch", "b-builtin"); r == nil || r.Keep != "cache alive" {
					t.Fatalf("cache: kept process's residency %+v, want keep \"cache alive\"", r)
				}
				c.Add(30 * time.Minute)
				stopped, why = h.d.ReapIdle(), "cache expired and idle past 30m0s"
			}
			if stopped != 1 || len(h.d.Sessions()) != 0 {
				t.Fatalf("%s: the reaper stopped %d, left %+v", policy, stopped, h.d.Sessions())
			}
			if n := h.decisions("b-builtin", policy, "expire", why); n != 1 {
				t.Fatalf("residentd_residency_decisions_total{b-builtin,%s,expire,%q} = %v, want 1", policy, why, n)
			}
			if got, want := decisionLogs(logs, "expire"), []string{key("ch", "b-builtin") + " " + why}; !slices.Equal(got, want) {
				t.Fatalf("logged %v, want %v", got, want)
			}
		})
	}
}

// TestMemoryLimitShedsSparesThenLeastSaving: over max_memory (a key's
// process made big by a child holding 128 MiB), the spare goes first,
// then the key the policy saves least by keeping (its cache expired,
// though it was used last), and no more once the rest fits. Then, under
// memory pressure (a PSI file reporting it), one process goes per look:
// the spare that came back once memory was fine, then the last key.
func TestMemoryLimitShedsSparesThenLeastSaving(t *testing.T) {
	t.Parallel()
	c := &fakeClock{t: time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)}
	psi := t.TempDir() + "/memory"
	writePSI(t, psi, 0)
	one := 1
	h, logs := newResidencyHarnessPSI(t, c, psi, withBinding(t, "b-big", "1m", "--fault", "grandchild", "--grandchild-mib", "128"), func(cfg *config.Config) {
		cfg.Residency, cfg.MaxMemory, cfg.MemoryPressure = "cache", 100<<20, 20
		cfg.Bindings[0].CacheTTL, cfg.Bindings[0].Spare = "1h", &one
	})
	reply(t, h.mention("ch-small", "b-builtin", "m1", "@agent hi"))
	c.Add(time.Minute)
	reply(t, h.mention("ch-big", "b-big", "m2", "@agent hi"))
	spare := h.nextSpare()
	testkit.WaitFor(t, 20*time.Second, func() bool {
		ses, _ := h.residencyOf("ch-big", "b-big")
		return ses != nil && ses.RSSBytes >= 128<<20
	}, testkit.Waiting("ch-big's process to hold its child's 128 MiB"))
	c.Add(2 * time.Minute) // ch-big's cache (1m) has expired; ch-small's (1h) lives

	h.d.Tend(context.Background())
	if got, want := h.evictions(), []string{key("ch-big", "b-big") + " memory"}; !slices.Equal(got, want) {
		t.Fatalf("evictions over max_memory %v, want %v", got, want)
	}
	if got := sparePids(h.d.Spares(), "b-builtin"); slices.Contains(got, spare.pid) {
		t.Fatalf("the spare %d was kept over max_memory", spare.pid)
	}
	if got, want := decisionLogs(logs, "memory"), []string{"b-builtin spares first", key("ch-big", "b-big") + " cache expired"}; !slices.Equal(got, want) {
		t.Fatalf("memory decisions logged %v, want %v", got, want)
	}
	if n := h.decisions("b-builtin", "rule", "memory", "spares first"); n != 1 {
		t.Fatalf("spares first counted %v times, want 1", n)
	}
	if n := h.decisions("b-big", "cache", "memory", "cache expired"); n != 1 {
		t.Fatalf("ch-big's memory decision counted %v times, want 1", n)
	}
	if ses, _ := h.residencyOf("ch-small", "b-builtin"); ses == nil {
		t.Fatalf("ch-small was stopped though the rest fit in max_memory: %+v", h.d.Sessions())
	}

	// Memory is fine again: the spare comes back. Then pressure.
	back := h.nextSpare()
	writePSI(t, psi, 35)
	h.d.Tend(context.Background())
	if got := sparePids(h.d.Spares(), "b-builtin"); slices.Contains(got, back.pid) {
		t.Fatalf("under pressure the spare %d was kept", back.pid)
	}
	if ses, _ := h.residencyOf("ch-small", "b-builtin"); ses == nil {
		t.Fatal("under pressure a key went in the same look as the spare")
	}
	h.d.Tend(context.Background())
	if got, want := h.evictions(), []string{key("ch-big", "b-big") + " memory", key("ch-small", "b-builtin") + " memory"}; !slices.Equal(got, want) {
		t.Fatalf("evictions %v, want %v", got, want)
	}
	writePSI(t, psi, 0)
	h.d.Tend(context.Background())
	h.nextSpare() // no longer tight: spares start again
}

// newResidencyHarnessPSI is newResidencyHarness reading memory pressure
// from the file psi ("": the kernel's, where it has one).
func newResidencyHarnessPSI(t *testing.T, c *fakeClock, psi string, tweak ...func(*config.Config)) (*harness, *observer.ObservedLogs) {
	t.Helper()
	dir := t.TempDir()
	cfg := &config.Config{StateDir: dir, AgentGrace: config.Duration(2 * time.Second)}
	cfg.Bindings = []config.Binding{testBinding(t, "b-builtin", dir)}
	for _, f := range tweak {
		f(cfg)
	}
	core, logs := observer.New(zap.InfoLevel)
	h := &harness{t: t, dir: dir, cfg: cfg, now: c.Now, log: zap.New(core), tendEvery: -1, pressure: psi, spares: make(chan readySpare, 256)}
	h.open()
	t.Cleanup(h.close)
	return h, logs
}

// writePSI writes a PSI memory file whose "some avg10" is some.
func writePSI(t *testing.T, path string, some float64) {
	t.Helper()
	body := fmt.Sprintf("some avg10=%.2f avg60=0.00 avg300=0.00 total=1000\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=10\n", some)
	if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
}

// TestIdleCompactionTimedByDaemon: a session with a large context whose
// 1-hour cache is about to expire is compacted by the daemon itself (a
// /compact of its own on the idle session): an agent run on the key whose
// events carry the agent's compaction_update with its summary, counted and
// logged as a decision; not before the cache's last tenth, and not twice.
func TestIdleCompactionTimedByDaemon(t *testing.T) {
	t.Parallel()
	c := &fakeClock{t: time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)}
	h, logs := newResidencyHarness(t, c, func(cfg *config.Config) { cfg.Bindings[0].CacheTTL = "1h" })
	r := h.mention("ch", "b-builtin", "m1", "@agent [[context:250000]] read the whole repository")
	reply(t, r)
	if _, res := h.residencyOf("ch", "b-builtin"); res == nil || res.ContextTokens < 250000 {
		t.Fatalf("residency before: %+v", res)
	}
	c.Add(30 * time.Minute)
	h.d.Tend(context.Background())
	if got := decisionLogs(logs, "compact"); len(got) != 0 {
		t.Fatalf("compacted half-way through the cache's life: %v", got)
	}
	c.Add(25 * time.Minute) // 5 minutes left of its hour: within the last tenth
	h.d.Tend(context.Background())
	const why = "cache expires soon with a large context"
	if got, want := decisionLogs(logs, "compact"), []string{key("ch", "b-builtin") + " " + why}; !slices.Equal(got, want) {
		t.Fatalf("compactions logged %v, want %v", got, want)
	}
	if n := h.decisions("b-builtin", "rule", "compact", why); n != 1 {
		t.Fatalf("compact counted %v times", n)
	}
	ses, res := h.residencyOf("ch", "b-builtin")
	if ses == nil || ses.Pid != r.start.Pid || res.ContextTokens >= 250000 {
		t.Fatalf("after the compaction: %+v %+v", ses, res)
	}
	if ses.IdleS < (55 * time.Minute).Seconds() {
		t.Fatalf("the compaction counted as a use of the key: idle %vs", ses.IdleS)
	}
	if !compactionSummary(t, h) {
		t.Fatal("the agent run of the compaction has no compaction_update with a summary")
	}
	h.d.Tend(context.Background())
	if got := decisionLogs(logs, "compact"); len(got) != 1 {
		t.Fatalf("compacted again: %v", got)
	}
}

// compactionSummary is whether the last agent run of h ended and carried
// the agent's completed compaction_update with its summary.
func compactionSummary(t *testing.T, h *harness) bool {
	t.Helper()
	var runID string
	for _, l := range h.d.RunFeed().Read(0).Lines {
		var ev apitype.FeedEvent
		if json.Unmarshal(l, &ev) == nil && ev.Event == apitype.FeedRunEnded && ev.Kind == apitype.RunKindAgent {
			runID = ev.RunID
		}
	}
	if runID == "" {
		t.Fatal("no agent run ended")
	}
	for _, l := range h.ended(runID).Read(0, false).Lines {
		if s := string(l); strings.Contains(s, `"compaction_update"`) && strings.Contains(s, `"completed"`) && strings.Contains(s, "builtin summary of the session so far") {
			return true
		}
	}
	return false
}

// TestKeepAliveOnlyWhereSetAndItPays: a key that comes back 7 minutes
// after each burst loses a 5-minute cache every time; with keep_alive
// the daemon renews it shortly before it expires (a prompt of its own,
// an agent run), and its listed expiry moves on. Without keep_alive (the
// default) nothing is sent.
func TestKeepAliveOnlyWhereSetAndItPays(t *testing.T) {
	t.Parallel()
	for _, keep := range []bool{false, true} {
		t.Run(fmt.Sprint("keep_alive=", keep), func(t *testing.T) {
			t.Parallel()
			c := &fakeClock{t: time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)}
			h, logs := newResidencyHarness(t, c, func(cfg *config.Config) { cfg.Bindings[0].KeepAlive = keep })
			for i := range 4 {
				if i > 0 {
					c.Add(7 * time.Minute)
				}
				reply(t, h.mention("ch", "b-builtin", fmt.Sprintf("m%d", i), "@agent hi"))
			}
			_, before := h.residencyOf("ch", "b-builtin")
			c.Add(4*time.Minute + 40*time.Second) // within the last tenth of its 5 minutes
			h.d.Tend(context.Background())
			got := decisionLogs(logs, "keep_alive")
			_, after := h.residencyOf("ch", "b-builtin")
			if !keep {
				if len(got) != 0 || !after.CacheExpires.Equal(*before.CacheExpires) {
					t.Fatalf("keep-alive sent without keep_alive: %v, expiry %v -> %v", got, before.CacheExpires, after.CacheExpires)
				}
				return
			}
			const why = "returns within the next cache life often enough to pay"
			if want := []string{key("ch", "b-builtin") + " " + why}; !slices.Equal(got, want) {
				t.Fatalf("keep-alives logged %v, want %v", got, want)
			}
			if n := h.decisions("b-builtin", "rule", "keep_alive", why); n != 1 {
				t.Fatalf("keep_alive counted %v times", n)
			}
			if want := c.Now().Add(5 * time.Minute); !after.CacheExpires.Equal(want) {
				t.Fatalf("cache expires %v after the keep-alive, want %v", after.CacheExpires, want)
			}
		})
	}
}

// TestResidencyReloadsAtOnce: a reload that names another residency
// policy puts it in force for the live processes at once: the listing's
// policy and reason to keep change with no process restarted.
func TestResidencyReloadsAtOnce(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	file := dir + "/config.json"
	b := testBinding(t, "b-builtin", dir)
	b.CacheTTL = "1h"
	cfg := config.Config{StateDir: dir, Residency: "timer", Bindings: []config.Binding{b}}
	write := func() { t.Helper(); writeConfigFile(t, file, cfg) }
	write()
	load := daemontest.FileLoader(file, dir)
	c, err := load()
	if err != nil {
		t.Fatal(err)
	}
	d := daemontest.New(t, c, daemontest.Options{Reload: load, ConfigFile: file, TendEvery: -1})
	if r := d.Turn(context.Background(), apitype.TurnRequest{Channel: "ch", Binding: "b-builtin", Text: "@agent hi"}); r.Err != nil {
		t.Fatal(r.Err)
	}
	before := d.Sessions()
	if len(before) != 1 || before[0].Residency == nil || before[0].Residency.Policy != "timer" || before[0].Residency.Keep != "idle for less than 30m0s" {
		t.Fatalf("before the reload: %+v", before)
	}
	cfg.Residency = "cache"
	write()
	if _, err := d.Reload(); err != nil {
		t.Fatal(err)
	}
	after := d.Sessions()
	if len(after) != 1 || after[0].Pid != before[0].Pid || after[0].Residency.Policy != "cache" || after[0].Residency.Keep != "cache alive" {
		t.Fatalf("after the reload: %+v", after)
	}
}
