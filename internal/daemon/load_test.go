package daemon_test

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/residentd/residentd/apitype"
	"github.com/residentd/residentd/internal/channel"
	"github.com/residentd/residentd/internal/config"
	"github.com/residentd/residentd/internal/delivery"
	"github.com/residentd/residentd/internal/metrics"
	"github.com/residentd/residentd/internal/pool"
	"github.com/residentd/residentd/internal/session"
)

const (
	loadTurns    = 1000
	loadChannels = 20
	loadWorkers  = 32
	loadFaultMod = 9 // every 9th turn asks the agent to fail
)

var (
	shownLine = regexp.MustCompile(`(?m)^- \[user\] carla: @agent ping (m\d+)$`)
	// The mention's id names its run: m<i> or f<i> for run load-<i>.
	runIDRE = regexp.MustCompile(`"message_id":"[mf](\d+)"`)
)

func openFDs() int {
	fds, _ := os.ReadDir("/proc/self/fd")
	return len(fds)
}

// TestLoad sends 1,000 mentions across 20 channels and 2 bindings through 4
// slots from 32 goroutines, with some runs failing on purpose. Every turn
// ends (answered, or refused with a queue error); every key's committed
// watermark is exactly the union of what its successful runs were shown;
// the turn counters add up; and goroutines and descriptors come back once
// the daemon closes.
func TestLoad(t *testing.T) {
	if testing.Short() {
		t.Skip("load test skipped in -short mode")
	}
	// The agents are a plain build of residentd: the race-instrumented test
	// binary takes most of a second to start on two cores, and the load is
	// about the daemon, not the agent.
	recDir := t.TempDir()
	bin := filepath.Join(recDir, "residentd")
	build := exec.Command("go", "build", "-o", bin, "github.com/residentd/residentd/cmd/residentd")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build residentd: %v\n%s", err, out)
	}
	goroutines0, fds0 := runtime.NumGoroutine(), openFDs()
	h := newHarness(t, func(c *config.Config) {
		c.MaxLive = 4
		c.QueueLen = 24
		c.QueueTimeout = config.Duration(30 * time.Second)
		c.Bindings = nil
		for _, id := range []string{"b-one", "b-two"} {
			b := testBinding(t, id, c.StateDir, "--record", filepath.Join(recDir, id+".jsonl"))
			b.Command, b.Env = bin, nil
			c.Bindings = append(c.Bindings, b)
		}
	})

	type outcome struct {
		key   session.Key
		fault bool
		err   error
	}
	results := make([]outcome, loadTurns)
	work := make(chan int)
	var wg sync.WaitGroup
	start := time.Now()
	for range loadWorkers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				k := (i / 10) % (2 * loadChannels) // ten turns in a row per key: warm turns too
				key := session.Key{Channel: fmt.Sprintf("ch-%02d", k%loadChannels), Binding: []string{"b-one", "b-two"}[k/loadChannels]}
				req := apitype.TurnRequest{Channel: key.Channel, Binding: key.Binding, RunID: fmt.Sprintf("load-%d", i)}
				fault := i%loadFaultMod == 4
				if fault {
					// Not posted: the marker must not reach anyone's context.
					req.MessageID, req.Text = fmt.Sprintf("f%d", i), "@agent [[fault:fail-turn]]"
				} else {
					req.MessageID = fmt.Sprintf("m%d", i)
					req.Text = "@agent ping " + req.MessageID
					clock.Lock()
					clock.t = clock.t.Add(time.Second)
					at := clock.t
					clock.Unlock()
					if _, err := h.inbox.PutMessages([]channel.Message{{ID: req.MessageID, Channel: key.Channel, Author: "carla", AuthorKind: apitype.AuthorUser, Body: req.Text, CreatedAt: at}}); err != nil {
						results[i] = outcome{key, fault, fmt.Errorf("post: %w", err)}
						continue
					}
				}
				r := h.turn(req)
				if r.err == nil && !strings.HasPrefix(r.done.Text, "builtin") {
					r.err = fmt.Errorf("done without the agent's reply: %+v", r.done)
				}
				results[i] = outcome{key, fault, r.err}
			}
		}()
	}
	for i := range loadTurns {
		work <- i
	}
	close(work)
	wg.Wait()
	elapsed := time.Since(start)

	ok, failed, rejected := 0, 0, 0
	for i, r := range results {
		switch {
		case r.err == nil && !r.fault:
			ok++
		case r.err == nil:
			t.Errorf("turn %d: the fault turn succeeded", i)
		case errors.Is(r.err, pool.ErrQueueFull) || errors.Is(r.err, pool.ErrQueueTimeout):
			rejected++
		case r.fault && strings.Contains(r.err.Error(), "induced failure"):
			failed++
		default:
			t.Errorf("turn %d (%s, fault %v): unexpected error %v", i, r.key, r.fault, r.err)
		}
	}
	t.Logf("%d turns in %s (%.0f turns/s): %d answered, %d failed on purpose, %d refused by the queue; %d spawns",
		loadTurns, elapsed.Round(time.Millisecond), float64(loadTurns)/elapsed.Seconds(), ok, failed, rejected,
		int(testutil.ToFloat64(h.m.AgentExits.WithLabelValues("clean"))+testutil.ToFloat64(h.m.AgentExits.WithLabelValues("signal"))+testutil.ToFloat64(h.m.AgentExits.WithLabelValues("error")))+h.d.Live())
	if ok == 0 || failed == 0 {
		t.Fatalf("the load did not exercise both paths: %d ok, %d failed", ok, failed)
	}

	// The counters add up to the turns sent, outcome by outcome.
	var total float64
	byOutcome := map[string]float64{}
	for _, shape := range metrics.Shapes {
		for _, o := range metrics.Outcomes {
			n := testutil.ToFloat64(h.m.Turns.WithLabelValues(shape, o))
			total += n
			byOutcome[o] += n
		}
	}
	if total != loadTurns || byOutcome["ok"] != float64(ok) || byOutcome["agent_error"] != float64(failed) || byOutcome["rejected"] != float64(rejected) {
		t.Errorf("residentd_turns_total = %v by outcome %v; sent %d: %d ok, %d failed, %d rejected", total, byOutcome, loadTurns, ok, failed, rejected)
	}

	// What every run was shown, from the agents' own record of each prompt.
	shown := map[string][]string{} // run id -> message ids in its context block
	for _, b := range []string{"b-one", "b-two"} {
		for _, p := range prompts(t, filepath.Join(recDir, b+".jsonl")) {
			// A cold prompt replays earlier turns: only the last payload and
			// the block after it are this run's.
			m := runIDRE.FindAllStringSubmatchIndex(p, -1)
			if len(m) == 0 {
				t.Fatalf("%s: prompt without a mention line: %.200q", b, p)
			}
			last := m[len(m)-1]
			run := "load-" + p[last[2]:last[3]]
			tail := p[last[1]:]
			var ids []string
			if i := max(strings.LastIndex(tail, delivery.HeaderNew), strings.LastIndex(tail, delivery.HeaderSnapshot)); i >= 0 {
				for _, sm := range shownLine.FindAllStringSubmatch(tail[i:], -1) {
					ids = append(ids, sm[1])
				}
			}
			shown[run] = ids
		}
	}
	want := map[session.Key]map[string]bool{}
	for i, r := range results {
		run := fmt.Sprintf("load-%d", i)
		ids, ran := shown[run]
		if r.err == nil && !ran {
			t.Fatalf("run %s succeeded but its agent recorded no prompt", run)
		}
		if want[r.key] == nil {
			want[r.key] = map[string]bool{}
		}
		if r.err == nil {
			for _, id := range ids {
				want[r.key][id] = true
			}
		}
	}
	// Every message shown to a successful run is covered by the key's
	// watermark: none of them is still unseen.
	for key, ids := range want {
		wm, found := h.watermark(key.Channel, key.Binding)
		if len(ids) > 0 && !found {
			t.Errorf("%s: no watermark; successful runs were shown %d messages", key, len(ids))
			continue
		}
		v, err := h.st.Unseen(key.Channel, "", wm.Seq, nil, nil, func(c []channel.Candidate) []int {
			var still []string
			for _, c := range c {
				if ids[c.ID] && !wm.Covers(c.ID, c.Seq, c.Edited) {
					still = append(still, c.ID)
				}
			}
			if len(still) > 0 {
				slices.Sort(still)
				t.Errorf("%s: watermark %+v does not cover %v, shown to successful runs", key, wm, still)
			}
			return nil
		})
		if err != nil || v.Seq < wm.Seq {
			t.Errorf("%s: unseen read: %v (channel seq %d, watermark %d)", key, err, v.Seq, wm.Seq)
		}
	}

	// Everything the daemon started stops with it.
	h.close()
	waitFor(t, func() bool { return runtime.NumGoroutine() <= goroutines0 && openFDs() <= fds0 }, func() string {
		return fmt.Sprintf("after close: %d goroutines (started with %d), %d fds (started with %d)", runtime.NumGoroutine(), goroutines0, openFDs(), fds0)
	})
	if z := zombieChildren(); len(z) > 0 {
		t.Fatalf("zombie agents after close: %v", z)
	}
}
