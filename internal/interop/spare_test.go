package interop

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"testing"
	"time"

	"github.com/residentd/residentd/internal/config"
	"github.com/residentd/residentd/internal/testkit"
)

// spareRoundsEnv sets how many rounds TestClaudeSpareTimings measures; it
// is skipped without it (timings are for BENCHMARKS.md, not pass/fail).
const spareRoundsEnv = "RESIDENTD_SPARE_ROUNDS"

// TestClaudeSpareTimings measures claude-agent-acp 0.49's time to started
// (the Turn call to the started event) through two daemons side by side,
// one binding with a spare (spare 1, spare_at_start) and one without,
// against the fake Messages API. Each round, interleaved: a cold turn on
// a new channel in each, then both daemons restart and the same channel's
// turn is restored (session/resume) in each.
//
//	RESIDENTD_SPARE_ROUNDS=5 go test -run TestClaudeSpareTimings -v -timeout 30m ./internal/interop/
func TestClaudeSpareTimings(t *testing.T) {
	rounds, _ := strconv.Atoi(os.Getenv(spareRoundsEnv))
	if rounds <= 0 {
		t.Skipf("timings only: set %s=N to measure N rounds", spareRoundsEnv)
	}
	ctx := context.Background() // each turn is bounded by the binding's turn timeout
	type side struct {
		name string
		h    *harness
		home string
		cold []time.Duration
		rest []time.Duration
		// Turn call to done, for the turn's whole wait.
		coldDone, restDone []time.Duration
	}
	mk := func(name string, spare int) *side {
		api := newFakeAPI(t, "Looked into it.")
		home := t.TempDir()
		b := claudeBinding(t, home, map[string]string{"ANTHROPIC_BASE_URL": api.URL(), "ANTHROPIC_API_KEY": "dummy"})
		b.Spare, b.SpareAtStart = &spare, spare > 0
		return &side{name: name, h: newHarnessCfg(t, func(c *config.Config) { c.MaxLive = 8 }, b), home: home}
	}
	sides := []*side{mk("spare", 1), mk("none", 0)}
	// waitSpare waits for the side's spare and returns its pid (0 for the
	// side without).
	waitSpare := func(s *side) int {
		t.Helper()
		if s.name != "spare" {
			return 0
		}
		select {
		case pid := <-s.h.spares:
			if pid == 0 {
				t.Fatal("the spare failed to start")
			}
			return pid
		case <-time.After(2 * time.Minute):
			t.Fatal("no spare within 2 minutes")
		}
		return 0
	}
	for i := range rounds {
		ch := fmt.Sprintf("ch-%d", i)
		order := sides
		if i%2 == 1 {
			order = []*side{sides[1], sides[0]}
		}
		for _, s := range order {
			pid := waitSpare(s)
			for _, sp := range s.h.d.Spares() {
				if sp.Pid == pid {
					t.Logf("round %d: the idle spare's memory: %d KiB (%s)", i, sp.RSSBytes>>10, sp.MemorySource)
				}
			}
			r := s.h.mention(ctx, ch, "b-claude", ch+"-q1", "@claude first look")
			if r.err != nil || r.start.Shape != "cold" {
				t.Fatalf("%s round %d cold: %v shape %q", s.name, i, r.err, r.start.Shape)
			}
			s.cold, s.coldDone = append(s.cold, r.ready), append(s.coldDone, r.total)
			if pid != 0 && r.start.Pid != pid {
				t.Fatalf("round %d: the cold turn ran on pid %d, not the spare %d", i, r.start.Pid, pid)
			}
			transcript := filepath.Join(s.home, ".claude", "projects", "*", r.done.Native+".jsonl")
			testkit.WaitFor(t, 30*time.Second, func() bool {
				m, _ := filepath.Glob(transcript)
				return len(m) > 0
			}, testkit.Waiting("claude-agent-acp to write its transcript %s", transcript))
		}
		for _, s := range order {
			s.h.close()
			for len(s.h.spares) > 0 {
				<-s.h.spares // the stopped daemon's
			}
			s.h.open()
			pid := waitSpare(s) // spare_at_start: ready before the restored turn
			r := s.h.mention(ctx, ch, "b-claude", ch+"-q2", "@claude and now?")
			if r.err != nil || r.start.Shape != "restored" {
				t.Fatalf("%s round %d restored: %v shape %q", s.name, i, r.err, r.start.Shape)
			}
			s.rest, s.restDone = append(s.rest, r.ready), append(s.restDone, r.total)
			if pid != 0 && r.start.Pid != pid {
				t.Fatalf("round %d: the restored turn ran on pid %d, not the spare %d", i, r.start.Pid, pid)
			}
		}
	}
	median := func(ds []time.Duration) time.Duration {
		s := append([]time.Duration(nil), ds...)
		sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
		return s[len(s)/2]
	}
	for _, s := range sides {
		t.Logf("%s: cold %v, restored %v", s.name, s.cold, s.rest)
	}
	cs, cn := median(sides[0].cold), median(sides[1].cold)
	rs, rn := median(sides[0].rest), median(sides[1].rest)
	t.Logf("time to started, median of %d: cold %v with a spare, %v without (%.2f×); restored %v with a spare, %v without (%.2f×)",
		rounds, cs.Round(time.Millisecond), cn.Round(time.Millisecond), float64(cs)/float64(cn), rs.Round(time.Millisecond), rn.Round(time.Millisecond), float64(rs)/float64(rn))
	cs, cn = median(sides[0].coldDone), median(sides[1].coldDone)
	rs, rn = median(sides[0].restDone), median(sides[1].restDone)
	t.Logf("time to done, median of %d: cold %v with a spare, %v without (%.2f×); restored %v with a spare, %v without (%.2f×)",
		rounds, cs.Round(time.Millisecond), cn.Round(time.Millisecond), float64(cs)/float64(cn), rs.Round(time.Millisecond), rn.Round(time.Millisecond), float64(rs)/float64(rn))
}
