package api

import (
	"bufio"
	"context"
	"encoding/json"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/residentd/residentd/apitype"
	"github.com/residentd/residentd/client"
	"github.com/residentd/residentd/internal/agent"
	"github.com/residentd/residentd/internal/config"
	"github.com/residentd/residentd/internal/testkit"
)

// A turn whose agent streams 100,000 tiny chunks in a burst ends ok: every
// update was numbered in the run's log (the oldest fell out of its bounded
// buffer, so a follower from the start is told they are gone) and the
// result holds the whole reply.
func TestBurstOfUpdatesEndsOK(t *testing.T) {
	n := 100000
	if testkit.Race {
		n = 5000 // still 5 times the SDK's queue; the detector makes each update slow
	}
	e := newEnv(t, func(c *config.Config) {
		c.Bindings[0].Args = append(c.Bindings[0].Args, "--burst", strconv.Itoa(n))
	})
	ctx := context.Background()
	ev, err := e.c.Turn(ctx, apitype.TurnRequest{Channel: "ch-burst", Binding: "b-builtin", RunID: "run-burst", Text: "@agent [[fault:burst]]"}, nil)
	if err != nil {
		t.Fatalf("burst turn: %v", err)
	}
	var want strings.Builder
	for i := range n {
		want.WriteString(agent.BurstChunk(i))
	}
	run, err := e.c.Run(ctx, "run-burst")
	if err != nil || run.Result == nil {
		t.Fatalf("run: %+v, %v", run, err)
	}
	if !strings.HasPrefix(run.Result.Text, want.String()) || !strings.Contains(run.Result.Text, "builtin turn=1") {
		t.Fatalf("result text (%d bytes) is not the %d chunks and the reply", len(run.Result.Text), n)
	}
	if ev.Event != apitype.EventDone || run.State != apitype.RunSucceeded {
		t.Fatalf("burst turn ended %+v, state %s", ev, run.State)
	}
	if run.LastSeq <= int64(n) {
		t.Fatalf("run logged %d events for %d chunks", run.LastSeq, n)
	}
	code, body := e.rawBody(t, "GET", "/v1/runs/run-burst/events?after=0", "")
	if code != 410 || !strings.Contains(string(body), "events_gone") {
		t.Fatalf("follow from 0: %d %s, want 410 events_gone", code, body)
	}
	// The process is still the key's: the next turn is warm.
	ev, err = e.c.Turn(ctx, apitype.TurnRequest{Channel: "ch-burst", Binding: "b-builtin", Text: "@agent again"}, nil)
	if err != nil || ev.Shape != "warm" {
		t.Fatalf("turn after the burst: %+v, %v", ev, err)
	}
}

// A session/load that replays 5,000 messages restores the session: the
// replay is swallowed, the turn is restored and ends ok.
func TestLongLoadReplayRestores(t *testing.T) {
	e := newEnv(t, func(c *config.Config) {
		c.MaxLive = 1
		c.Bindings[0].Args = append(c.Bindings[0].Args, "--fault", agent.FaultLongReplay)
		c.Bindings[0].RestoreMethod = "load"
	})
	ctx := context.Background()
	for _, step := range []struct{ ch, shape string }{{"ch-a", "cold"}, {"ch-b", "cold"}, {"ch-a", "restored"}} {
		ev, err := e.c.Turn(ctx, apitype.TurnRequest{Channel: step.ch, Binding: "b-builtin", Text: "@agent hello"}, nil)
		if err != nil || ev.Shape != step.shape {
			t.Fatalf("turn in %s: %+v, %v; want %s", step.ch, ev, err, step.shape)
		}
		if step.shape == "restored" && strings.Contains(ev.Text, "replayed message") {
			t.Fatalf("the replayed history leaked into the turn: %q", ev.Text)
		}
	}
	sessions, err := e.c.Sessions(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range sessions {
		if s.Channel == "ch-a" && s.RestoredBy != "load" {
			t.Fatalf("ch-a restored by %q, want load", s.RestoredBy)
		}
	}
}

// A notice becomes an update event with its severity, title and
// description, and is counted in the scraped metrics; a compaction_update
// is an update event that carries the summary.
func TestNoticeAndCompactionAreRunEvents(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	var notice, compaction *apitype.Update
	_, err := e.c.Turn(ctx, apitype.TurnRequest{Channel: "ch-n", Binding: "b-builtin", Text: "@agent [[notice:warning]] [[compaction-update]]"}, func(ev apitype.Event) {
		if u := ev.Update; u != nil {
			switch u.Kind {
			case apitype.UpdateNotice:
				notice = u
			case apitype.UpdateCompaction:
				if u.Compaction != nil && u.Compaction.Status == "completed" {
					compaction = u
				}
			}
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	if notice == nil || notice.Notice == nil || *notice.Notice != (apitype.Notice{Severity: "warning", Title: "builtin warning notice", Description: "asked for by a directive"}) {
		t.Fatalf("notice event %+v", notice)
	}
	if compaction == nil || compaction.Compaction.ID != "cmp-1" || compaction.Compaction.Summary != "builtin summary of the session so far" {
		t.Fatalf("compaction event %+v", compaction)
	}
	code, body := e.rawBody(t, "GET", "/metrics", "")
	if code != 200 || !strings.Contains(string(body), `residentd_agent_notices_total{binding="b-builtin",severity="warning"} 1`) {
		t.Fatalf("metrics (%d) lack the notice:\n%s", code, body)
	}
}

// A session/resume that never answers cannot hang the turn: past
// restore_timeout with no sign of progress it is given up, its process
// stopped, and session/load runs on another process; the waiting run's
// stream says each way, how the resume ended, and where the load ran.
func TestResumeThatNeverAnswersFallsBackToLoad(t *testing.T) {
	e := newEnv(t, func(c *config.Config) {
		c.MaxLive = 1
		c.RestoreTimeout = config.Duration(500 * time.Millisecond)
		c.Bindings[0].Args = append(c.Bindings[0].Args, "--fault", agent.FaultResumeHang)
	})
	ctx := context.Background()
	for _, ch := range []string{"ch-a", "ch-b"} {
		if _, err := e.c.Turn(ctx, apitype.TurnRequest{Channel: ch, Binding: "b-builtin", Text: "@agent hello"}, nil); err != nil {
			t.Fatal(err)
		}
	}
	var steps []apitype.Event
	t0 := time.Now()
	ev, err := e.c.Turn(ctx, apitype.TurnRequest{Channel: "ch-a", Binding: "b-builtin", Text: "@agent again"}, func(ev apitype.Event) {
		if ev.Event == apitype.EventRestoring {
			steps = append(steps, ev)
		}
	})
	if err != nil || ev.Shape != "restored" {
		t.Fatalf("restored turn: %+v, %v", ev, err)
	}
	if len(steps) != 3 || steps[0].Method != "resume" || steps[0].Result != "" || steps[1].Method != "resume" || steps[1].Result != apitype.RestoreTimeout ||
		steps[2].Method != "load" || steps[2].Pid == steps[0].Pid || steps[1].Pid != steps[0].Pid || steps[2].Native != steps[0].Native {
		t.Fatalf("restoring events %+v, want resume, its timeout, then load of the same session on another process", steps)
	}
	if d := time.Since(t0); d > 30*time.Second {
		t.Fatalf("the restore took %v", d)
	}
	code, body := e.rawBody(t, "GET", "/metrics", "")
	if code != 200 || !strings.Contains(string(body), `residentd_session_restores_total{method="resume",result="timeout"} 1`) {
		t.Fatalf("metrics (%d) lack the timed-out resume:\n%s", code, body)
	}
}

// feedReader follows GET /v1/events?after=after; lines come on the channel
// (keepalives left out) until the test ends.
func feedReader(t *testing.T, e *env, after int64) <-chan apitype.FeedEvent {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	req, err := http.NewRequestWithContext(ctx, "GET", "http://residentd/v1/events?after="+strconv.FormatInt(after, 10), nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := e.hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != 200 {
		t.Fatalf("GET /v1/events: %s", resp.Status)
	}
	out := make(chan apitype.FeedEvent, 64)
	go func() {
		defer resp.Body.Close()
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			var ev apitype.FeedEvent
			if json.Unmarshal(sc.Bytes(), &ev) != nil || ev.Event == apitype.EventKeepalive {
				continue
			}
			select {
			case out <- ev:
			case <-ctx.Done():
				return
			}
		}
	}()
	return out
}

func nextFeed(t *testing.T, ch <-chan apitype.FeedEvent) apitype.FeedEvent {
	t.Helper()
	return testkit.Recv(t, ch, 30*time.Second, "feed announcement")
}

// Output the agent sends after its prompt returned becomes an agent run:
// announced on the feed, listed, with its text as the result and in the
// key's conversation; a client that re-attaches to the feed after a seq
// gets exactly the announcements after it.
func TestAgentRunOnTheFeed(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	feed := feedReader(t, e, 0)
	ev, err := e.c.Turn(ctx, apitype.TurnRequest{Channel: "ch-later", Binding: "b-builtin", RunID: "run-later", Text: "@agent [[later:100ms]] go on"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	var seen []apitype.FeedEvent
	var agentRun string
	for turnEnded := false; agentRun == "" || !turnEnded; {
		a := nextFeed(t, feed)
		seen = append(seen, a)
		if a.Event == apitype.FeedRunEnded && a.Kind == apitype.RunKindAgent {
			agentRun = a.RunID
		}
		turnEnded = turnEnded || a.Event == apitype.FeedRunEnded && a.RunID == ev.RunID
	}
	// run-later started and ended, the agent run started and ended, each
	// in order, the agent run after the turn started. The turn's end and
	// the agent's later output race (the agent writes 100ms after its
	// prompt returned, maybe while the turn still commits), so the feed
	// may announce either first.
	at := map[string]int{}
	for i, a := range seen {
		at[a.Event+" "+a.Kind] = i
		if a.Seq != seen[0].Seq+int64(i) {
			t.Fatalf("feed seqs not consecutive: %+v", seen)
		}
	}
	if len(seen) != 4 || len(at) != 4 || seen[0].Event != apitype.FeedRunStarted || seen[0].RunID != ev.RunID ||
		at["run_ended agent"] < at["run_started agent"] || seen[at["run_ended agent"]].State != apitype.RunSucceeded {
		t.Fatalf("feed %+v", seen)
	}
	run, err := e.c.Run(ctx, agentRun)
	if err != nil || run.Kind != apitype.RunKindAgent || run.Channel != "ch-later" || run.Result == nil || run.Result.Text != "later output, after the prompt returned" {
		t.Fatalf("agent run %+v (err %v)", run, err)
	}
	runs, err := e.c.Runs(ctx)
	if err != nil || !slices.ContainsFunc(runs, func(r apitype.Run) bool { return r.ID == agentRun }) {
		t.Fatalf("GET /v1/runs %+v (err %v) lacks the agent run", runs, err)
	}
	// Re-attach after the first announcement: exactly the three after it.
	again := feedReader(t, e, seen[0].Seq)
	for i := 1; i < len(seen); i++ {
		a := nextFeed(t, again)
		if a.Seq != seen[i].Seq || a.RunID != seen[i].RunID || a.Event != seen[i].Event {
			t.Fatalf("re-attached feed line %d: %+v, want %+v", i, a, seen[i])
		}
	}
	select {
	case a := <-again:
		t.Fatalf("re-attached feed sent more: %+v", a)
	case <-time.After(200 * time.Millisecond):
	}
}

// A feed position beyond the newest announcement (a seq from before a
// restart; here the largest there is) is not gone: GET /v1/events answers
// 200 and streams the next announcement, numbered right after the newest.
func TestFeedBeyondTheNewestStreamsTheNext(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	feed := feedReader(t, e, 0)
	if _, err := e.c.Turn(ctx, apitype.TurnRequest{Channel: "ch", Binding: "b-builtin", RunID: "run-before", Text: "@agent hi"}, nil); err != nil {
		t.Fatal(err)
	}
	var newest int64
	for newest == 0 {
		if a := nextFeed(t, feed); a.Event == apitype.FeedRunEnded && a.RunID == "run-before" {
			newest = a.Seq
		}
	}
	// feedReader returns once the answer's header is out, after the feed
	// was read: the turn below is announced after that read.
	beyond := feedReader(t, e, math.MaxInt64)
	if _, err := e.c.Turn(ctx, apitype.TurnRequest{Channel: "ch", Binding: "b-builtin", RunID: "run-after", Text: "@agent again"}, nil); err != nil {
		t.Fatal(err)
	}
	for i, want := range []string{apitype.FeedRunStarted, apitype.FeedRunEnded} {
		if a := nextFeed(t, beyond); a.Event != want || a.RunID != "run-after" || a.Seq != newest+1+int64(i) {
			t.Fatalf("the feed from beyond the newest (seq %d): %+v, want %s of run-after at seq %d", newest, a, want, newest+1+int64(i))
		}
	}
}

// Error messages that come from a setting name it as the docs do: the
// binding's turn_timeout, queue_len and queue_timeout, runs.retention and
// runs.ended (runs.events and runs.bytes: TestEventsGone).
func TestErrorMessagesNameTheirSettings(t *testing.T) {
	t.Run("turn_timeout", func(t *testing.T) {
		e := newEnv(t, func(c *config.Config) { c.Bindings[0].TurnTimeout = config.Duration(300 * time.Millisecond) })
		_, err := e.c.Turn(context.Background(), apitype.TurnRequest{Channel: "ch", Binding: "b-builtin", Text: "@agent [[fault:hang-turn]] slow"}, nil)
		if !client.IsCode(err, apitype.CodeTimeout) || !strings.Contains(err.Error(), `binding "b-builtin"'s turn_timeout (300ms)`) {
			t.Fatalf("a turn past its timeout: %v, want timeout naming turn_timeout", err)
		}
	})
	t.Run("runs.retention", func(t *testing.T) {
		e := newEnv(t)
		if status, apiErr := e.raw(t, http.MethodGet, "/v1/runs/run-never", ""); status != http.StatusNotFound || !strings.Contains(apiErr.Message, "runs.retention") || !strings.Contains(apiErr.Message, "runs.ended") {
			t.Fatalf("unknown run: %d %+v", status, apiErr)
		}
	})
	// One slot, held by a turn: a turn for another key waits for it.
	held := func(t *testing.T, e *env, hold string) {
		t.Helper()
		s := e.post(t, apitype.TurnRequest{Channel: "ch-hold", Binding: "b-builtin", Text: "@agent [[hold:" + hold + "]]"})
		t.Cleanup(s.hangUp)
		s.until(apitype.EventStarted)
	}
	t.Run("queue_len", func(t *testing.T) {
		e := newEnv(t, func(c *config.Config) { c.MaxLive, c.QueueLen, c.QueueTimeout = 1, 1, config.Duration(time.Hour) })
		hold := filepath.Join(t.TempDir(), "hold")
		held(t, e, hold)
		defer os.WriteFile(hold, nil, 0o600)
		waiting := e.post(t, apitype.TurnRequest{Channel: "ch-wait", Binding: "b-builtin", Text: "@agent next"})
		defer waiting.hangUp()
		if ev := waiting.next(); ev.Event != apitype.EventQueued || ev.Reason != apitype.QueueNoSlot {
			t.Fatalf("the second key's turn: %+v, want it queued for a slot", ev)
		}
		status, apiErr := e.raw(t, http.MethodPost, "/v1/turns", `{"channel_id":"ch-full","binding_id":"b-builtin","text":"@agent one too many"}`)
		if status != http.StatusServiceUnavailable || apiErr.Code != apitype.CodeQueueFull || !strings.Contains(apiErr.Message, "queue_len") {
			t.Fatalf("a turn over the queue: %d %+v, want queue_full naming queue_len", status, apiErr)
		}
	})
	t.Run("queue_timeout", func(t *testing.T) {
		e := newEnv(t, func(c *config.Config) { c.MaxLive, c.QueueTimeout = 1, config.Duration(200*time.Millisecond) })
		hold := filepath.Join(t.TempDir(), "hold")
		held(t, e, hold)
		defer os.WriteFile(hold, nil, 0o600)
		// Its stream starts (queued); the timeout is its last line.
		waiting := e.post(t, apitype.TurnRequest{Channel: "ch-wait", Binding: "b-builtin", Text: "@agent next"})
		defer waiting.hangUp()
		evs := waiting.until(apitype.EventError)
		if end := evs[len(evs)-1]; end.Code != apitype.CodeQueueTimeout || !strings.Contains(end.Message, "queue_timeout") {
			t.Fatalf("a turn that waited out the queue: %+v, want queue_timeout naming the setting", end)
		}
	})
}
