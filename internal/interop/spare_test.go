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
		b := claudeBinding(t, home, api.env())
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
		pid := testkit.Recv(t, s.h.spares, 2*time.Minute, "spare")
		if pid == 0 {
			t.Fatal("the spare failed to start")
		}
		return pid
	}
	// turn runs a mention on s in round i and checks that it started with
	// shape, on the spare pid when there is one.
	turn := func(s *side, i, pid int, ch, id, text, shape string) result {
		t.Helper()
		r := s.h.mention(ctx, ch, "b-claude", id, text)
		if r.err != nil || r.start.Shape != shape {
			t.Fatalf("%s round %d %s: %v shape %q", s.name, i, shape, r.err, r.start.Shape)
		}
		if pid != 0 && r.start.Pid != pid {
			t.Fatalf("round %d: the %s turn ran on pid %d, not the spare %d", i, shape, r.start.Pid, pid)
		}
		return r
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
			r := turn(s, i, pid, ch, ch+"-q1", "@claude first look", "cold")
			s.cold, s.coldDone = append(s.cold, r.ready), append(s.coldDone, r.total)
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
			r := turn(s, i, pid, ch, ch+"-q2", "@claude and now?", "restored")
			s.rest, s.restDone = append(s.rest, r.ready), append(s.restDone, r.total)
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
