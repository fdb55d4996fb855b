// Package run owns a turn as clients see it: a run with an id and a state,
// the bounded log of its events with sequence numbers that any client can
// follow and re-attach to, and the permission requests waiting for a
// person's answer. The daemon records runs in the state file (Persisted,
// Registry.Restore) so that they survive a restart.
package run

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/residentd/residentd/apitype"
	"github.com/residentd/residentd/internal/permission"
	"github.com/residentd/residentd/internal/session"
)

// Defaults for Limits fields left zero.
const (
	DefaultEvents    = 4096
	DefaultBytes     = 1 << 20
	DefaultRetention = 15 * time.Minute
	DefaultEnded     = 256
	DefaultPending   = 16
)

// Limits bound what runs keep in memory.
type Limits struct {
	Events    int           // events kept per run; the oldest go first
	Bytes     int           // bytes of encoded events kept per run
	Retention time.Duration // how long an ended run can still be read
	Ended     int           // ended runs kept at most; the oldest go first
	// Pending bounds the permission requests one run keeps waiting for a
	// person; an agent's request beyond it is rejected at once.
	Pending int
}

func (l Limits) withDefaults() Limits {
	if l.Events <= 0 {
		l.Events = DefaultEvents
	}
	if l.Bytes <= 0 {
		l.Bytes = DefaultBytes
	}
	if l.Retention <= 0 {
		l.Retention = DefaultRetention
	}
	if l.Ended <= 0 {
		l.Ended = DefaultEnded
	}
	if l.Pending <= 0 {
		l.Pending = DefaultPending
	}
	return l
}

// Errors callers tell apart with errors.Is.
var (
	ErrInUse           = errors.New("run id already in use")
	ErrUnknownRequest  = errors.New("no such permission or elicitation request")
	ErrBadOption       = errors.New("not one of the options the agent offered")
	ErrAlreadyAnswered = errors.New("request already answered")
)

// Run is one turn's run. The daemon creates it with Registry.New, reports
// its progress with Emit and ends it with Finish; clients read it with
// Snapshot and Read and answer its permission requests with Answer. Safe
// for concurrent use.
type Run struct {
	ID        string
	Kind      string // apitype.RunKindTurn or RunKindAgent
	Key       session.Key
	MessageID string
	Created   time.Time
	// Fingerprint names the mention the run answers (set by its creator):
	// a resubmission of the run's id with the same fingerprint is the same
	// mention sent again.
	Fingerprint string
	// TraceID and SpanID name the run's root span when the daemon traces
	// (set at its creation, or by SetTrace before it goes on).
	traceID, spanID string

	limits Limits
	now    func() time.Time
	reg    *Registry

	mu       sync.Mutex // guards everything below; taken under Registry.mu, nothing else under it
	state    string
	shape    string
	qReason  string
	qPos     int
	started  time.Time
	ended    time.Time
	attempt  int    // attempts started
	lines    []line // buffered events, seq order
	chunked  bool   // reply chunks were logged: the done line need not repeat the text
	bytes    int
	dropped  int64         // the seq of the last event the bounds dropped
	last     int64         // the last seq handed out
	changed  chan struct{} // closed on every change; made again by the next reader that waits (nil: nobody waits)
	result   *apitype.Event
	err      error
	pending  map[string]*ask
	answered map[string]bool
	nextAsk  int
	elicits  map[string]*elicitWait // elicitation requests waiting; they count against Limits.Pending with pending
	// author is the mention's author as the turn request named it ("" when
	// it named none): the approver when the binding's approvers are
	// "author".
	author string
}

type line struct {
	seq   int64
	data  []byte // the event's JSON and a newline, lean (see Read)
	start bool   // a started event: the turn's first output follows within moments
	// full is the event as a client that did not ask for the lean stream
	// reads it, where that differs: a text chunk with its raw form, the done
	// event with the reply text. Built on the first such read from ev.
	full []byte
	ev   *apitype.Event
}

// ask is a permission request waiting for a person.
type ask struct {
	req    apitype.PermissionRequest
	answer chan string // buffered: the chosen option id
	by     string      // who answered (answered_by), set with the answer
	done   bool        // answered, timed out or cancelled
}

// Emit appends ev to the run's log, numbered and stamped, and returns it as
// logged. A queued event marks the run queued and records the wait, a
// started event marks it running. Emit after Finish does nothing.
func (r *Run) Emit(ev apitype.Event) apitype.Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.result != nil {
		return ev
	}
	switch ev.Event {
	case apitype.EventQueued:
		r.state, r.qReason, r.qPos = apitype.RunQueued, ev.Reason, ev.Position
	case apitype.EventStarted:
		r.state, r.shape, r.started, r.qReason, r.qPos = apitype.RunRunning, ev.Shape, r.now(), "", 0
		if ev.Attempt > 0 {
			r.attempt = ev.Attempt
		}
	}
	return r.appendLocked(ev)
}

// Starting marks a run that has left its queue and has not started: it
// has its session's key and a slot and its process is being readied
// (spawned, restored, options set). A listing then never shows a queued
// run without its reason. It logs no event: the stream's next is started,
// or the error.
func (r *Run) Starting() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.result != nil || r.state != apitype.RunQueued {
		return
	}
	r.state, r.qReason, r.qPos = apitype.RunStarting, "", 0
}

// Finish ends the run with its last event, done or error, and the Go error
// behind an error event (nil for done). Later calls do nothing.
func (r *Run) Finish(ev apitype.Event, err error) {
	r.mu.Lock()
	if r.result != nil {
		r.mu.Unlock()
		return
	}
	r.state = endState(ev)
	if ev.Shape == "" {
		ev.Shape = r.shape
	}
	// The stream already carried the reply in its chunks; the done line
	// leaves the text out (the result, GET /v1/runs/{run}, keeps it).
	lean := ev
	if ev.Event == apitype.EventDone && r.chunked {
		lean.Text = ""
	}
	logged := r.appendLocked(lean)
	logged.Text = ev.Text
	if lean.Text != ev.Text {
		full := logged
		r.lines[len(r.lines)-1].ev = &full
	}
	r.result, r.err, r.ended = &logged, err, r.now()
	r.qReason, r.qPos = "", 0
	for _, a := range r.pending {
		a.done = true
	}
	for _, e := range r.elicits {
		e.done = true
	}
	r.mu.Unlock()
	if r.reg != nil {
		r.reg.ended(r)
	}
}

func (r *Run) appendLocked(ev apitype.Event) apitype.Event {
	r.last++
	ev.RunID, ev.Seq = r.ID, r.last
	if ev.At.IsZero() {
		ev.At = r.now()
	}
	e := encoders.Get().(*encoder)
	defer encoders.Put(e)
	e.buf.Reset()
	// Every field of an Event encodes; a Raw payload came from the agent's
	// own valid JSON.
	if err := e.enc.Encode(ev); err != nil {
		// Keep the event's place in the log as an update that says so.
		ev = apitype.Event{Event: apitype.EventUpdate, RunID: ev.RunID, Seq: ev.Seq, At: ev.At,
			Update: &apitype.Update{Kind: apitype.UpdateOther, Text: "an update could not be encoded: " + err.Error()}}
		e.buf.Reset()
		_ = e.enc.Encode(ev)
	}
	data := bytes.Clone(e.buf.Bytes())
	if ev.Update != nil && ev.Update.Kind == apitype.UpdateMessage {
		r.chunked = true
	}
	l := line{seq: ev.Seq, data: data, start: ev.Event == apitype.EventStarted}
	if u := ev.Update; u != nil && (u.Kind == apitype.UpdateMessage || u.Kind == apitype.UpdateThought) && u.Raw == nil {
		full := ev
		l.ev = &full
	}
	r.lines = append(r.lines, l)
	r.bytes += len(data)
	// Keep the newest within both bounds, and always the newest one.
	for len(r.lines) > 1 && (len(r.lines) > r.limits.Events || r.bytes > r.limits.Bytes) {
		r.bytes -= len(r.lines[0].data)
		r.dropped = r.lines[0].seq
		r.lines[0] = line{}
		r.lines = r.lines[1:]
	}
	if r.changed != nil {
		close(r.changed)
		r.changed = nil
	}
	return ev
}

// changedLocked returns the channel the next change closes.
func (r *Run) changedLocked() chan struct{} {
	if r.changed == nil {
		r.changed = make(chan struct{})
	}
	return r.changed
}

// encoder is a reusable event encoder: one buffer and one json.Encoder
// for every event of every run, instead of a new pair each.
type encoder struct {
	buf bytes.Buffer
	enc *json.Encoder
}

var encoders = sync.Pool{New: func() any {
	e := &encoder{}
	e.enc = json.NewEncoder(&e.buf)
	e.enc.SetEscapeHTML(false)
	return e
}}

// textChunk is the raw form of a text chunk, as ACP sends it.
type textChunk struct {
	SessionUpdate string `json:"sessionUpdate"`
	Content       struct {
		Type string `json:"type"`
		Text string `json:"text"`
	} `json:"content"`
}

// fullLine encodes ev as a reader of the whole stream gets it: a text chunk
// with the raw form of the agent's update.
func fullLine(ev apitype.Event) []byte {
	if u := ev.Update; u != nil && u.Raw == nil {
		cu := *u
		var c textChunk
		c.SessionUpdate, c.Content.Type, c.Content.Text = u.Kind, "text", u.Text
		cu.Raw, _ = json.Marshal(c)
		ev.Update = &cu
	}
	e := encoders.Get().(*encoder)
	defer encoders.Put(e)
	e.buf.Reset()
	_ = e.enc.Encode(ev)
	return bytes.Clone(e.buf.Bytes())
}

// Batch is what Read found.
type Batch struct {
	Lines   [][]byte        // encoded events after the asked sequence, in order
	Last    int64           // the seq of the last line, or the asked one when none
	Ended   bool            // the run has ended and Lines hold everything up to its end (none when the reader asked for events after its last)
	Gone    bool            // events after the asked sequence fell out of the buffer
	Hold    bool            // the last line is the started event: the next ones follow within moments
	Changed <-chan struct{} // closed when there is more to read; nil once Ended (nothing more can come)
}

// Read returns the buffered events after seq after. A lean reader gets
// the reply once: text chunks without their raw form and, when chunks
// carried the reply, the done event without its text (the run's result
// keeps it). Others read every event whole, as /v1 always sent them.
func (r *Run) Read(after int64, lean bool) Batch {
	return r.ReadInto(after, lean, nil)
}

// ReadInto is Read with the batch's lines appended to lines (a follower's
// slice from its last read, reused rather than made anew for every read).
func (r *Run) ReadInto(after int64, lean bool, lines [][]byte) Batch {
	r.mu.Lock()
	defer r.mu.Unlock()
	b := Batch{Last: after, Lines: lines[:0]}
	if after < r.dropped {
		b.Gone, b.Changed = true, r.changedLocked()
		return b
	}
	i := sort.Search(len(r.lines), func(i int) bool { return r.lines[i].seq > after })
	if n := len(r.lines) - i; n > 0 && cap(b.Lines) < n {
		b.Lines = make([][]byte, 0, n)
	}
	for j := i; j < len(r.lines); j++ {
		l := &r.lines[j]
		data := l.data
		if !lean && l.ev != nil {
			if l.full == nil {
				l.full = fullLine(*l.ev)
			}
			data = l.full
		}
		b.Lines = append(b.Lines, data)
		b.Last = l.seq
		b.Hold = l.start
	}
	// Ended when nothing after b.Last can come: a reader that asked for
	// events after the run's last (after > r.last) has read its end too.
	b.Ended = r.result != nil && b.Last >= r.last
	if !b.Ended {
		b.Changed = r.changedLocked()
	}
	return b
}

// Result returns the final event and the Go error behind it, and whether
// the run has ended.
func (r *Run) Result() (apitype.Event, error, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.result == nil {
		return apitype.Event{}, nil, false
	}
	return *r.result, r.err, true
}

// Wait returns a channel closed at the run's next change.
func (r *Run) Wait() <-chan struct{} {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.changedLocked()
}

// Snapshot describes the run as GET /v1/runs/{id} does.
func (r *Run) Snapshot() apitype.Run {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := apitype.Run{
		ID: r.ID, Kind: r.Kind, State: r.state, Channel: r.Key.Channel, Binding: r.Key.Binding, MessageID: r.MessageID,
		Shape: r.shape, QueueReason: r.qReason, QueuePosition: r.qPos, CreatedAt: r.Created, LastSeq: r.last,
		Attempt: r.attempt, TraceID: r.traceID, SpanID: r.spanID,
	}
	if !r.started.IsZero() {
		t := r.started
		out.StartedAt = &t
	}
	if !r.ended.IsZero() {
		t := r.ended
		out.EndedAt = &t
	}
	if r.result != nil {
		res := *r.result
		out.Result = &res
	}
	for _, a := range r.pending {
		if !a.done {
			out.Pending = append(out.Pending, a.req)
		}
	}
	sort.Slice(out.Pending, func(i, j int) bool { return out.Pending[i].ID < out.Pending[j].ID })
	out.PendingElicitations = r.pendingElicitationsLocked()
	out.Author = r.author
	return out
}

// Ask puts a permission request to whoever follows the run and waits for
// the answer, at most timeout. It returns the chosen option id ("" for the
// cancelled outcome) and who decided: a person, the timeout (which rejects,
// when the agent offered a reject option) or a cancel, when ctx ends first.
// The request and its decision are both events of the run. With
// Limits.Pending requests already waiting, the request is rejected at once
// (decided by the limit) and only its decision is an event: an agent that
// floods requests holds no more than the limit's memory and goroutines.
func (r *Run) Ask(ctx context.Context, tc apitype.ToolCall, options []apitype.PermissionOption, timeout time.Duration) (optionID, decidedBy string) {
	d := r.Decide(ctx, tc, options, timeout)
	return d.OptionID, d.DecidedBy
}

// Decide is Ask returning the whole decision, with who answered
// (answered_by) when a person did.
func (r *Run) Decide(ctx context.Context, tc apitype.ToolCall, options []apitype.PermissionOption, timeout time.Duration) apitype.PermissionDecision {
	var optionID, decidedBy string
	r.mu.Lock()
	if r.result != nil {
		r.mu.Unlock()
		return apitype.PermissionDecision{Tool: tc.Title, Kind: "cancelled", DecidedBy: apitype.DecidedByCancel}
	}
	if r.pending == nil {
		r.pending, r.answered = map[string]*ask{}, map[string]bool{}
	}
	if len(r.pending)+len(r.elicits) >= r.limits.Pending {
		r.nextAsk++
		id := "perm-" + strconv.Itoa(r.nextAsk)
		r.answered[id] = true
		d := &apitype.PermissionDecision{RequestID: id, Tool: tc.Title, Kind: "cancelled", DecidedBy: apitype.DecidedByLimit}
		if o, ok := permission.Pick(toPolicyOptions(options), false); ok {
			d.OptionID, d.Kind = o.ID, o.Kind
		}
		r.appendLocked(apitype.Event{Event: apitype.EventPermissionDecision, Decision: d})
		r.mu.Unlock()
		return *d
	}
	r.nextAsk++
	a := &ask{
		req:    apitype.PermissionRequest{ID: "perm-" + strconv.Itoa(r.nextAsk), ToolCall: tc, Options: options, ExpiresAt: r.now().Add(timeout)},
		answer: make(chan string, 1),
	}
	r.pending[a.req.ID] = a
	req := a.req
	r.appendLocked(apitype.Event{Event: apitype.EventPermissionRequest, Permission: &req})
	r.mu.Unlock()

	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case optionID = <-a.answer:
		decidedBy = apitype.DecidedByPerson
	case <-t.C:
		decidedBy = apitype.DecidedByTimeout
	case <-ctx.Done():
		decidedBy = apitype.DecidedByCancel
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if decidedBy != apitype.DecidedByPerson {
		if a.done && len(a.answer) > 0 {
			// An answer got in first; it was accepted, so it stands.
			optionID, decidedBy = <-a.answer, apitype.DecidedByPerson
		} else if decidedBy == apitype.DecidedByTimeout {
			if o, ok := permission.Pick(toPolicyOptions(options), false); ok {
				optionID = o.ID
			}
		}
	}
	a.done = true
	delete(r.pending, a.req.ID)
	r.answered[a.req.ID] = true
	d := &apitype.PermissionDecision{RequestID: a.req.ID, Tool: tc.Title, OptionID: optionID, Kind: "cancelled", DecidedBy: decidedBy}
	if decidedBy == apitype.DecidedByPerson {
		d.AnsweredBy = a.by
	}
	for _, o := range options {
		if o.ID == optionID {
			d.Kind = o.Kind
		}
	}
	if r.result == nil {
		r.appendLocked(apitype.Event{Event: apitype.EventPermissionDecision, Decision: d})
	}
	return *d
}

func toPolicyOptions(options []apitype.PermissionOption) []permission.Option {
	out := make([]permission.Option, len(options))
	for i, o := range options {
		out[i] = permission.Option{ID: o.ID, Name: o.Name, Kind: o.Kind}
	}
	return out
}

// Answer chooses optionID for permission request requestID. The first
// answer wins; a second, or one after the request timed out or was
// cancelled, gets ErrAlreadyAnswered.
func (r *Run) Answer(requestID, optionID string) error { return r.AnswerBy(requestID, optionID, "") }

// AnswerBy is Answer naming who answered (the chat's user id; "" for
// nobody named), kept in the decision.
func (r *Run) AnswerBy(requestID, optionID, by string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	a := r.pending[requestID]
	switch {
	case a == nil && r.answered[requestID]:
		return fmt.Errorf("%w: %q of run %q", ErrAlreadyAnswered, requestID, r.ID)
	case a == nil:
		return fmt.Errorf("%w %q on run %q", ErrUnknownRequest, requestID, r.ID)
	case a.done:
		return fmt.Errorf("%w: %q of run %q", ErrAlreadyAnswered, requestID, r.ID)
	}
	ids := make([]string, len(a.req.Options))
	for i, o := range a.req.Options {
		ids[i] = o.ID
		if o.ID == optionID {
			a.done, a.by = true, by
			a.answer <- optionID
			return nil
		}
	}
	return fmt.Errorf("option %q for request %q: %w: %q", optionID, requestID, ErrBadOption, ids)
}

// Registry holds the runs of one daemon: every run until it ends, and ended
// runs for Limits.Retention (at most Limits.Ended of them). Ended runs are
// pruned as the registry is used; nothing runs in the background.
type Registry struct {
	limits Limits
	now    func() time.Time
	feed   *Feed

	// mu guards runs and order. Lock order: mu, then a Run's mu (pruning
	// reads when each ended); the feed is told after both are let go.
	mu    sync.Mutex
	runs  map[string]*Run
	order []*Run // ended runs, oldest end first
}

// NewRegistry returns an empty registry; now is the clock (nil: time.Now).
func NewRegistry(l Limits, now func() time.Time) *Registry {
	if now == nil {
		now = time.Now
	}
	return &Registry{limits: l.withDefaults(), now: now, runs: map[string]*Run{}, feed: NewFeed(0, now)}
}

// Feed is the announcements of the registry's runs' starts and ends.
func (g *Registry) Feed() *Feed { return g.feed }

// New registers a run, starting: it is queued only once it waits for its
// session's key or a slot (a queued event), and starting again once it
// has them. An id still held by a run, running or ended
// and retained, is refused with ErrInUse.
func (g *Registry) New(id string, k session.Key, messageID string) (*Run, error) {
	return g.newRun(apitype.RunKindTurn, id, k, messageID, "", Trace{})
}

// NewFor is New with the run's Fingerprint and its Trace ("" ids when it
// is not traced).
func (g *Registry) NewFor(id string, k session.Key, messageID, fingerprint string, t Trace) (*Run, error) {
	return g.newRun(apitype.RunKindTurn, id, k, messageID, fingerprint, t)
}

// NewKind is New for a run of kind (apitype.RunKindTurn, RunKindAgent),
// with its Trace. The feed announces it.
func (g *Registry) NewKind(kind, id string, k session.Key, messageID string, t Trace) (*Run, error) {
	return g.newRun(kind, id, k, messageID, "", t)
}

// Trace names a run's root span: its trace and span ids, hex.
type Trace struct{ TraceID, SpanID string }

// SetTrace names the run's root span (a run restored from the state file
// that goes on in a new trace).
func (r *Run) SetTrace(t Trace) {
	r.mu.Lock()
	r.traceID, r.spanID = t.TraceID, t.SpanID
	r.mu.Unlock()
}

func (g *Registry) newRun(kind, id string, k session.Key, messageID, fingerprint string, t Trace) (*Run, error) {
	g.mu.Lock()
	g.pruneLocked()
	if _, ok := g.runs[id]; ok {
		g.mu.Unlock()
		return nil, fmt.Errorf("%w: %q; use a new run_id", ErrInUse, id)
	}
	r := &Run{
		ID: id, Kind: kind, Key: k, MessageID: messageID, Created: g.now(), limits: g.limits, now: g.now, reg: g, Fingerprint: fingerprint,
		traceID: t.TraceID, spanID: t.SpanID,
		state: apitype.RunStarting,
		// Room for a turn's usual events (started, a few updates, done)
		// in one allocation; pending and answered are made by Ask.
		lines: make([]line, 0, 8),
	}
	g.runs[id] = r
	g.mu.Unlock()
	g.feed.announce(r.announcement(apitype.FeedRunStarted))
	return r, nil
}

// Get returns run id.
func (g *Registry) Get(id string) (*Run, bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.pruneLocked()
	r, ok := g.runs[id]
	return r, ok
}

// List describes every run, oldest first.
func (g *Registry) List() []apitype.Run {
	g.mu.Lock()
	g.pruneLocked()
	runs := make([]*Run, 0, len(g.runs))
	for _, r := range g.runs {
		runs = append(runs, r)
	}
	g.mu.Unlock()
	out := make([]apitype.Run, len(runs))
	for i, r := range runs {
		out[i] = r.Snapshot()
	}
	sort.Slice(out, func(i, j int) bool {
		if !out[i].CreatedAt.Equal(out[j].CreatedAt) {
			return out[i].CreatedAt.Before(out[j].CreatedAt)
		}
		return out[i].ID < out[j].ID
	})
	return out
}

// Bytes reports the encoded event bytes all runs hold.
func (g *Registry) Bytes() int {
	g.mu.Lock()
	runs := make([]*Run, 0, len(g.runs))
	for _, r := range g.runs {
		runs = append(runs, r)
	}
	g.mu.Unlock()
	n := 0
	for _, r := range runs {
		r.mu.Lock()
		n += r.bytes
		r.mu.Unlock()
	}
	return n
}

func (g *Registry) ended(r *Run) {
	g.feed.announce(r.announcement(apitype.FeedRunEnded))
	g.mu.Lock()
	defer g.mu.Unlock()
	g.order = append(g.order, r)
	g.pruneLocked()
}

func (g *Registry) pruneLocked() {
	cut := g.now().Add(-g.limits.Retention)
	for len(g.order) > 0 && (len(g.order) > g.limits.Ended || g.order[0].endedAt().Before(cut)) {
		if g.runs[g.order[0].ID] == g.order[0] {
			delete(g.runs, g.order[0].ID)
		}
		g.order[0] = nil
		g.order = g.order[1:]
	}
}

func (r *Run) endedAt() time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.ended
}

// Attempt returns the number of attempts started.
func (r *Run) Attempt() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.attempt
}

// MaxPersisted bounds the events Persisted returns, besides the result.
const MaxPersisted = 64

// Persisted returns the run's events as the state file keeps them: every
// logged event but the agent's updates (the done event carries the whole
// reply), at most the newest MaxPersisted and the result, each in the form
// a client that reads the whole stream gets, without its newline.
func (r *Run) Persisted() [][]byte {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out [][]byte
	for i := range r.lines {
		l := &r.lines[i]
		if bytes.HasPrefix(l.data, []byte(`{"event":"update"`)) {
			continue
		}
		data := l.data
		if l.ev != nil {
			if l.full == nil {
				l.full = fullLine(*l.ev)
			}
			data = l.full
		}
		out = append(out, bytes.TrimSuffix(data, []byte("\n")))
	}
	if n := len(out); n > MaxPersisted+1 && r.result != nil {
		out = append(out[n-MaxPersisted-1:n-1:n-1], out[n-1])
	} else if n > MaxPersisted {
		out = out[n-MaxPersisted:]
	}
	return out
}

// Final returns ev, the run's last event, as Finish will log it and
// Persisted will return it (when no event comes between): numbered next,
// stamped ev.At (set it), with its text. The daemon records a run's end in
// the turn's own transaction, before Finish.
func (r *Run) Final(ev apitype.Event) []byte {
	r.mu.Lock()
	defer r.mu.Unlock()
	ev.RunID, ev.Seq = r.ID, r.last+1
	if ev.Shape == "" {
		ev.Shape = r.shape
	}
	return bytes.TrimSuffix(fullLine(ev), []byte("\n"))
}

// Drop forgets run id, which must not have started: the daemon could not
// record it.
func (g *Registry) Drop(id string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	delete(g.runs, id)
}

// epoch is the step between the sequence numbers of a run's lives: the
// events a restarted daemon logs for a run number from the next multiple
// of it, so a seq a client holds from before the restart (events the state
// file did not keep) never names a different event after it.
const epoch = 1 << 32

// Restore registers run id as a restarted daemon finds it in the state
// file: its persisted events (lines, as Persisted returned them), ended
// with its result when the last is a done or error event. A run that goes
// on logs its next events from the next epoch. It returns ErrInUse when
// the id is registered already.
func (g *Registry) Restore(id string, k session.Key, messageID, fingerprint string, created time.Time, attempt int, lines [][]byte) (*Run, error) {
	g.mu.Lock()
	if _, ok := g.runs[id]; ok {
		g.mu.Unlock()
		return nil, fmt.Errorf("%w: %q", ErrInUse, id)
	}
	r := &Run{
		// Only turns are recorded in the state file.
		ID: id, Kind: apitype.RunKindTurn, Key: k, MessageID: messageID, Created: created, limits: g.limits, now: g.now, reg: g, Fingerprint: fingerprint,
		state: apitype.RunQueued, changed: make(chan struct{}), pending: map[string]*ask{}, answered: map[string]bool{},
		attempt: attempt,
	}
	var last *apitype.Event
	for _, data := range lines {
		var ev apitype.Event
		if err := json.Unmarshal(data, &ev); err != nil || ev.Seq <= r.last {
			continue // a damaged or out-of-order line: the rest still reads
		}
		l := line{seq: ev.Seq, data: append(bytes.Clone(data), '\n')}
		r.lines = append(r.lines, l)
		r.bytes += len(l.data)
		r.last = ev.Seq
		switch ev.Event {
		case apitype.EventStarted:
			r.shape, r.started = ev.Shape, ev.At
		case apitype.EventDone, apitype.EventError:
			e := ev
			last = &e
		}
	}
	if last != nil {
		res := *last
		r.result, r.ended = &res, res.At
		r.state = endState(res)
	} else {
		r.last = (r.last/epoch + 1) * epoch
	}
	g.runs[id] = r
	g.mu.Unlock()
	if last != nil {
		g.ended(r)
	}
	return r, nil
}

// endState is the state a run ends in with final event ev (its done or
// error): as it finishes, and as a restarted daemon reads it back.
func endState(ev apitype.Event) string {
	switch {
	case ev.Event == apitype.EventDone:
		return apitype.RunSucceeded
	case ev.Code == apitype.CodeCancelled || ev.Code == apitype.CodeShuttingDown:
		return apitype.RunCancelled
	case ev.Code == apitype.CodeInterrupted:
		return apitype.RunInterrupted
	default:
		return apitype.RunFailed
	}
}
