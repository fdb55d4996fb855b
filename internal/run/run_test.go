package run

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/residentd/residentd/apitype"
	"github.com/residentd/residentd/internal/session"
)

var key = session.Key{Channel: "ch", Binding: "b"}

type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

func newRun(t *testing.T, l Limits) (*Registry, *Run, *clock) {
	t.Helper()
	c := &clock{t: time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)}
	g := NewRegistry(l, c.now)
	r, err := g.New("run-1", key, "m1")
	if err != nil {
		t.Fatal(err)
	}
	return g, r, c
}

func decode(t *testing.T, lines [][]byte) []apitype.Event {
	t.Helper()
	var out []apitype.Event
	for _, l := range lines {
		var ev apitype.Event
		if err := json.Unmarshal(l, &ev); err != nil {
			t.Fatalf("line %q: %v", l, err)
		}
		out = append(out, ev)
	}
	return out
}

// A run's listed state is always true: starting until it waits, queued
// with its reason while it waits, starting again once it has left the
// queue, running once started.
func TestRunStatesAroundTheQueue(t *testing.T) {
	_, r, _ := newRun(t, Limits{})
	want := func(state, reason string, pos int) {
		t.Helper()
		if s := r.Snapshot(); s.State != state || s.QueueReason != reason || s.QueuePosition != pos {
			t.Fatalf("snapshot %+v; want %s %q %d", s, state, reason, pos)
		}
	}
	want(apitype.RunStarting, "", 0)
	r.Emit(apitype.Event{Event: apitype.EventQueued, Reason: apitype.QueueKeyBusy, Position: 1})
	want(apitype.RunQueued, apitype.QueueKeyBusy, 1)
	r.Starting()
	want(apitype.RunStarting, "", 0)
	if b := r.Read(0, true); b.Last != 1 {
		t.Fatalf("Starting logged an event: last seq %d", b.Last)
	}
	r.Emit(apitype.Event{Event: apitype.EventStarted, Shape: "cold"})
	r.Starting()
	want(apitype.RunRunning, "", 0)
	r.Finish(apitype.Event{Event: apitype.EventDone}, nil)
	r.Starting()
	want(apitype.RunSucceeded, "", 0)
}

func TestEventsAreNumberedAndReadAfterSeq(t *testing.T) {
	_, r, _ := newRun(t, Limits{})
	r.Emit(apitype.Event{Event: apitype.EventQueued, Reason: apitype.QueueNoSlot, Position: 2})
	if s := r.Snapshot(); s.State != apitype.RunQueued || s.QueueReason != apitype.QueueNoSlot || s.QueuePosition != 2 {
		t.Fatalf("queued snapshot %+v", s)
	}
	r.Emit(apitype.Event{Event: apitype.EventStarted, Shape: "cold", Pid: 42})
	for i := range 3 {
		r.Emit(apitype.Event{Event: apitype.EventUpdate, Update: &apitype.Update{Kind: apitype.UpdateMessage, Text: fmt.Sprint(i)}})
	}
	b := r.Read(0, true)
	evs := decode(t, b.Lines)
	if len(evs) != 5 || b.Last != 5 || b.Ended || b.Gone {
		t.Fatalf("read 0: %d events, last %d, ended %v", len(evs), b.Last, b.Ended)
	}
	for i, ev := range evs {
		if ev.Seq != int64(i+1) || ev.RunID != "run-1" || ev.At.IsZero() {
			t.Fatalf("event %d: %+v", i, ev)
		}
	}
	if s := r.Snapshot(); s.State != apitype.RunRunning || s.Shape != "cold" || s.StartedAt == nil || s.QueuePosition != 0 {
		t.Fatalf("running snapshot %+v", s)
	}
	evs = decode(t, r.Read(3, true).Lines)
	if len(evs) != 2 || evs[0].Seq != 4 {
		t.Fatalf("read after 3: %+v", evs)
	}
	changed := r.Read(5, true).Changed
	select {
	case <-changed:
		t.Fatal("changed before anything happened")
	default:
	}
	r.Finish(apitype.Event{Event: apitype.EventDone, Text: "ok"}, nil)
	<-changed
	b = r.Read(5, true)
	if evs := decode(t, b.Lines); len(evs) != 1 || evs[0].Event != apitype.EventDone || evs[0].Shape != "cold" || !b.Ended {
		t.Fatalf("after finish: %+v ended %v", evs, b.Ended)
	}
	if s := r.Snapshot(); s.State != apitype.RunSucceeded || s.Result == nil || s.Result.Text != "ok" || s.EndedAt == nil || s.LastSeq != 6 {
		t.Fatalf("ended snapshot %+v", s)
	}
	r.Emit(apitype.Event{Event: apitype.EventUpdate}) // after the end: dropped
	if r.Snapshot().LastSeq != 6 {
		t.Fatal("an event was logged after Finish")
	}
}

func TestFinishStates(t *testing.T) {
	for _, tt := range []struct {
		ev   apitype.Event
		want string
	}{
		{apitype.Event{Event: apitype.EventDone}, apitype.RunSucceeded},
		{apitype.Event{Event: apitype.EventError, Code: apitype.CodeCancelled}, apitype.RunCancelled},
		{apitype.Event{Event: apitype.EventError, Code: apitype.CodeShuttingDown}, apitype.RunCancelled},
		{apitype.Event{Event: apitype.EventError, Code: apitype.CodeAgentCrashed}, apitype.RunFailed},
	} {
		_, r, _ := newRun(t, Limits{})
		boom := errors.New("boom")
		r.Finish(tt.ev, boom)
		r.Finish(apitype.Event{Event: apitype.EventDone}, nil) // ignored
		ev, err, ended := r.Result()
		if s := r.Snapshot(); s.State != tt.want || !ended || ev.Event != tt.ev.Event || err != boom {
			t.Errorf("%+v: state %s, result %+v %v", tt.ev, s.State, ev, err)
		}
	}
}

func TestBufferBoundsAndGone(t *testing.T) {
	_, r, _ := newRun(t, Limits{Events: 3})
	for range 5 {
		r.Emit(apitype.Event{Event: apitype.EventUpdate, Update: &apitype.Update{Kind: apitype.UpdateMessage, Text: "x"}})
	}
	if b := r.Read(1, true); !b.Gone {
		t.Fatal("events 2 were dropped, but reading after 1 was not gone")
	}
	if b := r.Read(2, true); b.Gone || len(b.Lines) != 3 {
		t.Fatalf("read after 2: gone %v, %d lines", b.Gone, len(b.Lines))
	}
	// A byte bound keeps the newest event even when it alone is over it.
	_, r, _ = newRun(t, Limits{Bytes: 10})
	r.Emit(apitype.Event{Event: apitype.EventUpdate, Update: &apitype.Update{Kind: apitype.UpdateMessage, Text: "first"}})
	r.Emit(apitype.Event{Event: apitype.EventUpdate, Update: &apitype.Update{Kind: apitype.UpdateMessage, Text: "second"}})
	b := r.Read(1, true)
	if evs := decode(t, b.Lines); b.Gone || len(evs) != 1 || evs[0].Update.Text != "second" {
		t.Fatalf("byte bound: %+v", evs)
	}
	if !r.Read(0, true).Gone {
		t.Fatal("event 1 is out of the byte bound, but not gone")
	}
}

func TestRegistryRetention(t *testing.T) {
	g, r, c := newRun(t, Limits{Retention: time.Minute, Ended: 2})
	if _, err := g.New("run-1", key, ""); !errors.Is(err, ErrInUse) {
		t.Fatalf("reusing a live run id: %v", err)
	}
	r.Finish(apitype.Event{Event: apitype.EventDone}, nil)
	if _, err := g.New("run-1", key, ""); !errors.Is(err, ErrInUse) {
		t.Fatalf("reusing a retained run id: %v", err)
	}
	c.add(59 * time.Second)
	if _, ok := g.Get("run-1"); !ok {
		t.Fatal("ended run dropped before its retention")
	}
	c.add(2 * time.Second)
	if _, ok := g.Get("run-1"); ok {
		t.Fatal("ended run kept past its retention")
	}
	// At most Ended ended runs; live ones are never pruned.
	live, _ := g.New("live", key, "")
	for i := range 3 {
		c.add(time.Second)
		r, _ := g.New(fmt.Sprint("e", i), key, "")
		r.Finish(apitype.Event{Event: apitype.EventDone}, nil)
	}
	var ids []string
	for _, s := range g.List() {
		ids = append(ids, s.ID)
	}
	if fmt.Sprint(ids) != "[live e1 e2]" {
		t.Fatalf("runs %v, want the live one and the two newest ended", ids)
	}
	live.Finish(apitype.Event{Event: apitype.EventDone}, nil)
}

var options = []apitype.PermissionOption{
	{ID: "allow", Name: "Allow", Kind: "allow_once"},
	{ID: "always", Name: "Always", Kind: "allow_always"},
	{ID: "reject", Name: "Reject", Kind: "reject_once"},
}

var tool = apitype.ToolCall{ID: "call-1", Title: "go test", Kind: "execute"}

// pendingRequest waits until the run shows a pending request and returns it.
func pendingRequest(t *testing.T, r *Run) apitype.PermissionRequest {
	t.Helper()
	for {
		// The channel is taken before the look: a change between the two
		// closes it, so the wake-up is not lost.
		changed := r.Wait()
		if p := r.Snapshot().Pending; len(p) > 0 {
			return p[0]
		}
		<-changed
	}
}

func TestAskAnswered(t *testing.T) {
	_, r, _ := newRun(t, Limits{})
	type got struct{ id, by string }
	done := make(chan got, 1)
	go func() {
		id, by := r.Ask(context.Background(), tool, options, time.Hour)
		done <- got{id, by}
	}()
	req := pendingRequest(t, r)
	if req.ToolCall.Title != "go test" || len(req.Options) != 3 || req.ExpiresAt.IsZero() {
		t.Fatalf("request %+v", req)
	}
	if err := r.Answer(req.ID, "maybe"); !errors.Is(err, ErrBadOption) {
		t.Fatalf("wrong option: %v", err)
	}
	if err := r.Answer("perm-99", "allow"); !errors.Is(err, ErrUnknownRequest) {
		t.Fatalf("unknown request: %v", err)
	}
	// Two clients race; exactly one wins.
	var wg sync.WaitGroup
	errs := make([]error, 2)
	for i, opt := range []string{"allow", "reject"} {
		wg.Add(1)
		go func() { defer wg.Done(); errs[i] = r.Answer(req.ID, opt) }()
	}
	wg.Wait()
	won := 0
	for _, err := range errs {
		switch {
		case err == nil:
			won++
		case !errors.Is(err, ErrAlreadyAnswered):
			t.Fatalf("losing answer: %v", err)
		}
	}
	if won != 1 {
		t.Fatalf("%d answers accepted, want exactly 1: %v", won, errs)
	}
	g := <-done
	if g.by != apitype.DecidedByPerson || (g.id != "allow" && g.id != "reject") || (errs[0] == nil) != (g.id == "allow") {
		t.Fatalf("Ask returned %+v; accepted %v", g, errs)
	}
	if err := r.Answer(req.ID, "allow"); !errors.Is(err, ErrAlreadyAnswered) {
		t.Fatalf("answer after the decision: %v", err)
	}
	evs := decode(t, r.Read(0, true).Lines)
	if len(evs) != 2 || evs[0].Event != apitype.EventPermissionRequest || evs[1].Event != apitype.EventPermissionDecision ||
		evs[1].Decision.DecidedBy != apitype.DecidedByPerson || evs[1].Decision.OptionID != g.id || evs[1].Decision.RequestID != req.ID {
		t.Fatalf("events %+v", evs)
	}
	if len(r.Snapshot().Pending) != 0 {
		t.Fatal("a decided request is still pending")
	}
}

func TestAskTimeoutRejects(t *testing.T) {
	_, r, _ := newRun(t, Limits{})
	id, by := r.Ask(context.Background(), tool, options, 10*time.Millisecond)
	if id != "reject" || by != apitype.DecidedByTimeout {
		t.Fatalf("timeout: %q by %s, want the reject option", id, by)
	}
	evs := decode(t, r.Read(0, true).Lines)
	if d := evs[len(evs)-1].Decision; d == nil || d.Kind != "reject_once" || d.DecidedBy != apitype.DecidedByTimeout {
		t.Fatalf("decision %+v", evs[len(evs)-1])
	}
	if err := r.Answer(evs[0].Permission.ID, "allow"); !errors.Is(err, ErrAlreadyAnswered) {
		t.Fatalf("answer after the timeout: %v", err)
	}
	// No reject option offered: the timeout answers cancelled.
	id, by = r.Ask(context.Background(), tool, options[:2], 10*time.Millisecond)
	if id != "" || by != apitype.DecidedByTimeout {
		t.Fatalf("timeout without reject option: %q by %s", id, by)
	}
}

func TestAskCancelled(t *testing.T) {
	_, r, _ := newRun(t, Limits{})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan string, 1)
	go func() {
		id, by := r.Ask(ctx, tool, options, time.Hour)
		done <- id + "/" + by
	}()
	pendingRequest(t, r)
	cancel()
	if got := <-done; got != "/"+apitype.DecidedByCancel {
		t.Fatalf("cancelled ask: %q", got)
	}
	evs := decode(t, r.Read(0, true).Lines)
	if d := evs[len(evs)-1].Decision; d == nil || d.Kind != "cancelled" || d.DecidedBy != apitype.DecidedByCancel {
		t.Fatalf("decision %+v", evs[len(evs)-1])
	}
	r.Finish(apitype.Event{Event: apitype.EventDone}, nil)
	if id, by := r.Ask(context.Background(), tool, options, time.Hour); id != "" || by != apitype.DecidedByCancel {
		t.Fatalf("ask after the run ended: %q %s", id, by)
	}
}

// With Limits.Pending requests waiting, the next is rejected at once,
// decided by the limit, without a request event; an answer frees a place.
func TestAskBeyondThePendingLimit(t *testing.T) {
	_, r, _ := newRun(t, Limits{Pending: 1})
	done := make(chan string, 1)
	go func() {
		id, by := r.Ask(context.Background(), tool, options, time.Hour)
		done <- id + "/" + by
	}()
	first := pendingRequest(t, r)
	id, by := r.Ask(context.Background(), tool, options, time.Hour)
	if id != "reject" || by != apitype.DecidedByLimit {
		t.Fatalf("a request beyond the limit: %q by %s, want reject by the limit", id, by)
	}
	// No reject option: cancelled.
	if id, by := r.Ask(context.Background(), tool, options[:2], time.Hour); id != "" || by != apitype.DecidedByLimit {
		t.Fatalf("beyond the limit without a reject option: %q by %s", id, by)
	}
	evs := decode(t, r.Read(0, true).Lines)
	if len(evs) != 3 || evs[0].Event != apitype.EventPermissionRequest || evs[1].Decision == nil || evs[2].Decision == nil {
		t.Fatalf("events %s, want the first request and two decisions", kindsOf(evs))
	}
	if d := evs[1].Decision; d.DecidedBy != apitype.DecidedByLimit || d.Kind != "reject_once" || d.RequestID != "perm-2" {
		t.Fatalf("decision %+v", d)
	}
	if d := evs[2].Decision; d.Kind != "cancelled" || d.OptionID != "" {
		t.Fatalf("decision without a reject option %+v", d)
	}
	if err := r.Answer("perm-2", "allow"); !errors.Is(err, ErrAlreadyAnswered) {
		t.Fatalf("answering a request the limit rejected: %v", err)
	}
	if err := r.Answer(first.ID, "allow"); err != nil {
		t.Fatal(err)
	}
	<-done
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		id, by := r.Ask(ctx, tool, options, time.Hour)
		done <- id + "/" + by
	}()
	if next := pendingRequest(t, r); next.ID != "perm-4" {
		t.Fatalf("after an answer the next request waits: %+v", next)
	}
	cancel()
	<-done
}

func kindsOf(evs []apitype.Event) []string {
	var k []string
	for _, ev := range evs {
		k = append(k, ev.Event)
	}
	return k
}

// BenchmarkEmit is the run machinery's cost per event: numbering, encoding
// once and buffering.
func BenchmarkEmit(b *testing.B) {
	g := NewRegistry(Limits{}, nil)
	r, _ := g.New("run-b", key, "")
	u := &apitype.Update{Kind: apitype.UpdateMessage, Text: "a chunk of the agent's reply", Raw: json.RawMessage(`{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"a chunk of the agent's reply"}}`)}
	b.ReportAllocs()
	for b.Loop() {
		r.Emit(apitype.Event{Event: apitype.EventUpdate, Update: u})
	}
}

// fillEnded ends n runs in g, each with events update events of chunk
// bytes of text between started and done.
func fillEnded(g *Registry, n, events, chunk int) {
	text := strings.Repeat("x", chunk)
	for i := range n {
		r, _ := g.New(fmt.Sprintf("run-%d", i), key, "")
		r.Emit(apitype.Event{Event: apitype.EventStarted, Shape: "warm", Native: "nat-1", Pid: 4242})
		for range events {
			r.Emit(apitype.Event{Event: apitype.EventUpdate, Update: &apitype.Update{Kind: apitype.UpdateMessage, Text: text,
				Raw: json.RawMessage(`{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"` + text + `"}}`)}})
		}
		r.Finish(apitype.Event{Event: apitype.EventDone, Shape: "warm", Text: text}, nil)
	}
}

// Ended runs hold at most the per-run byte bound each, however long the
// agent talked.
func TestEndedRunsBounded(t *testing.T) {
	g := NewRegistry(Limits{}, nil)
	fillEnded(g, 64, 2000, 300) // about 1.4 MiB per run before the bound
	if got, limit := g.Bytes(), 64*DefaultBytes; got > limit || got < limit/2 {
		t.Fatalf("64 full ended runs hold %d bytes of events; the bound is %d", got, limit)
	}
	if n := len(g.List()); n != 64 {
		t.Fatalf("%d runs listed, want 64", n)
	}
}

// BenchmarkEndedRuns64 reports the memory 64 ended runs hold at the default
// bounds: a typical warm turn (a started, 4 chunks, done) and runs whose
// agents talked past the bounds. buffer-B is the encoded events, heap-B the
// Go heap the registry holds.
func BenchmarkEndedRuns64(b *testing.B) {
	for _, c := range []struct {
		name          string
		events, chunk int
	}{{"typical", 4, 200}, {"full", 2000, 300}} {
		b.Run(c.name, func(b *testing.B) {
			var buffer, heap float64
			for b.Loop() {
				var before, after runtime.MemStats
				runtime.GC()
				runtime.ReadMemStats(&before)
				g := NewRegistry(Limits{}, nil)
				fillEnded(g, 64, c.events, c.chunk)
				runtime.GC()
				runtime.ReadMemStats(&after)
				buffer = float64(g.Bytes())
				heap = float64(after.HeapAlloc) - float64(before.HeapAlloc)
				runtime.KeepAlive(g)
			}
			b.ReportMetric(buffer, "buffer-B")
			b.ReportMetric(heap, "heap-B")
		})
	}
}

// A feed position beyond the newest, however large, waits for the next
// announcement as a smaller one does; one that fell out is gone.
func TestFeedBeyondTheNewestWaits(t *testing.T) {
	f := NewFeed(2, nil)
	for range 3 {
		f.announce(apitype.FeedEvent{Event: apitype.FeedRunStarted})
	}
	for _, after := range []int64{3, 4, math.MaxInt64 - 1, math.MaxInt64} {
		b := f.Read(after)
		if b.Gone || len(b.Lines) != 0 || b.Last != 3 {
			t.Fatalf("read after %d: gone %v, %d lines, last %d; want to wait after 3", after, b.Gone, len(b.Lines), b.Last)
		}
		f.announce(apitype.FeedEvent{Event: apitype.FeedRunEnded})
		if nb := f.Read(b.Last); len(nb.Lines) != 1 {
			t.Fatalf("after %d: the next announcement did not come (%d lines)", after, len(nb.Lines))
		}
		select {
		case <-b.Changed:
		default:
			t.Fatalf("after %d: the wait was not woken", after)
		}
		f = NewFeed(2, nil)
		for range 3 {
			f.announce(apitype.FeedEvent{Event: apitype.FeedRunStarted})
		}
	}
	if !f.Read(0).Gone {
		t.Fatal("announcement 1 fell out, but reading after 0 was not gone")
	}
}
