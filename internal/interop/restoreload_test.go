package interop

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/residentd/residentd/apitype"
	"github.com/residentd/residentd/internal/config"
	"github.com/residentd/residentd/internal/testkit"
)

// restoreLoadEnv sets the restore_timeout TestClaudeRestoreUnderLoad runs
// its loaded restores with; it is skipped without it (timings are for
// BENCHMARKS.md, not pass/fail).
const restoreLoadEnv = "RESIDENTD_RESTORE_UNDER_LOAD"

// TestClaudeRestoreUnderLoad measures claude-agent-acp 0.101's restores
// when several keys restore at once on a loaded machine (run a second go
// test ./... beside it): four keys answer a cold turn each, the daemon
// restarts with restore_timeout from the environment and max_live 2, and
// the four keys' next turns are sent at once (two restore at a time); it
// reports each turn's time to started, its shape and whether it runs on
// the key's saved session. Then the daemon restarts with the default
// restore_timeout and each key's next turn says whether the key still has
// its first session (the conversation kept) or a stand-in.
//
//	RESIDENTD_RESTORE_UNDER_LOAD=20s go test -run TestClaudeRestoreUnderLoad -v -timeout 30m ./internal/interop/
func TestClaudeRestoreUnderLoad(t *testing.T) {
	timeout, err := time.ParseDuration(os.Getenv(restoreLoadEnv))
	if err != nil || timeout <= 0 {
		t.Skipf("timings only: set %s to the restore_timeout to measure with (e.g. 20s)", restoreLoadEnv)
	}
	const keys = 4
	api := newFakeAPI(t, "Looked into it.")
	home := t.TempDir()
	b := claude0101Binding(t, home, api.env())
	b.TurnTimeout = config.Duration(20 * time.Minute)
	h := newHarnessCfg(t, func(c *config.Config) { c.MaxLive = 2 }, b)
	for i := range h.cfg.Bindings {
		h.cfg.Bindings[i].TurnTimeout = config.Duration(20 * time.Minute)
	}
	ctx := context.Background()
	saved := make([]string, keys)
	for i := range keys {
		ch := fmt.Sprintf("ch-%d", i)
		r := h.mention(ctx, ch, "b-claude", ch+"-q1", "@claude first look")
		if r.err != nil || r.done.Shape != "cold" {
			t.Fatalf("%s: first turn %v, shape %q", ch, r.err, r.done.Shape)
		}
		saved[i] = r.done.Native
		transcript := filepath.Join(home, ".claude", "projects", "*", r.done.Native+".jsonl")
		testkit.WaitFor(t, time.Minute, func() bool {
			m, _ := filepath.Glob(transcript)
			return len(m) > 0
		}, testkit.Waiting("claude-agent-acp to write its transcript %s", transcript))
	}

	h.close()
	h.cfg.RestoreTimeout = config.Duration(timeout)
	h.open()
	t.Logf("load average before the restores: %s", loadavg())
	var wg sync.WaitGroup
	res := make([]result, keys)
	for i := range keys {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ch := fmt.Sprintf("ch-%d", i)
			res[i] = h.mention(ctx, ch, "b-claude", ch+"-q2", "@claude and now?")
		}()
	}
	wg.Wait()
	t.Logf("load average after the restores: %s", loadavg())
	for i, r := range res {
		var ways []string
		for _, ev := range r.updates {
			if ev.Event == apitype.EventRestoring {
				ways = append(ways, ev.Method)
			}
		}
		t.Logf("ch-%d: started after %.1fs, shape %s, on the saved session: %v, restoring %s, err %v",
			i, r.ready.Seconds(), r.start.Shape, r.done.Native == saved[i], strings.Join(ways, ","), r.err)
	}

	h.close()
	h.cfg.RestoreTimeout = 0
	h.cfg.SetDefaults()
	h.open()
	kept := 0
	for i := range keys {
		ch := fmt.Sprintf("ch-%d", i)
		r := h.mention(ctx, ch, "b-claude", ch+"-q3", "@claude still with me?")
		ok := r.err == nil && r.done.Native == saved[i]
		if ok {
			kept++
		}
		t.Logf("%s afterwards: started after %.1fs, shape %s, its first session: %v (err %v)", ch, r.ready.Seconds(), r.start.Shape, ok, r.err)
	}
	t.Logf("keys that kept their first session: %d of %d", kept, keys)
}

// loadavg is the first three fields of /proc/loadavg.
func loadavg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
}
