// The daemon-wide feed: every run's start and end, numbered, so a client
// learns of runs it did not start (an agent's own output between prompts)
// and re-attaches after the last announcement it has.

package run

import (
	"bytes"
	"sync"
	"time"

	"github.com/residentd/residentd/apitype"
)

// DefaultFeed is how many announcements the feed keeps.
const DefaultFeed = 4096

// Feed is the bounded log of run announcements. Safe for concurrent use.
type Feed struct {
	max int
	now func() time.Time

	// mu is taken under no other lock: a run is announced once its own
	// and the registry's are let go.
	mu      sync.Mutex
	lines   [][]byte      // encoded announcements, seq first-..last
	first   int64         // the seq of lines[0]
	last    int64         // the last seq handed out
	changed chan struct{} // closed by the next announcement; made by the first reader that may wait (nil: none)
}

// NewFeed returns an empty feed keeping the newest max announcements.
func NewFeed(max int, now func() time.Time) *Feed {
	if max <= 0 {
		max = DefaultFeed
	}
	if now == nil {
		now = time.Now
	}
	return &Feed{max: max, now: now, first: 1}
}

// announce appends ev, numbered and stamped.
func (f *Feed) announce(ev apitype.FeedEvent) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.last++
	ev.Seq, ev.At = f.last, f.now()
	e := encoders.Get().(*encoder)
	e.buf.Reset()
	_ = e.enc.Encode(ev) // every field encodes
	f.lines = append(f.lines, bytes.Clone(e.buf.Bytes()))
	encoders.Put(e)
	if len(f.lines) > f.max {
		f.lines[0] = nil
		f.lines = f.lines[1:]
		f.first++
	}
	if f.changed != nil {
		close(f.changed)
		f.changed = nil
	}
}

// FeedBatch is what Feed.Read found.
type FeedBatch struct {
	Lines   [][]byte // announcements after the asked seq, in order
	Last    int64    // the seq of the last line, or the asked one
	Gone    bool     // announcements after the asked seq fell out of the feed
	Changed <-chan struct{}
}

// Read returns the announcements after seq after.
func (f *Feed) Read(after int64) FeedBatch {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.changed == nil {
		f.changed = make(chan struct{})
	}
	b := FeedBatch{Last: after, Changed: f.changed}
	if after > f.last {
		// Beyond the newest (a seq from before a restart, or any larger
		// one): everything from now on.
		after = f.last
		b.Last = after
	}
	if after+1 < f.first {
		b.Gone = true
		return b
	}
	i := int(after + 1 - f.first)
	b.Lines = append(b.Lines, f.lines[i:]...)
	if len(b.Lines) > 0 {
		b.Last = f.last
	}
	return b
}

// Last is the seq of the newest announcement.
func (f *Feed) Last() int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.last
}

// announcement describes r for the feed.
func (r *Run) announcement(event string) apitype.FeedEvent {
	r.mu.Lock()
	defer r.mu.Unlock()
	return apitype.FeedEvent{Event: event, RunID: r.ID, Kind: r.Kind, Channel: r.Key.Channel, Binding: r.Key.Binding, MessageID: r.MessageID, State: r.state, TraceID: r.traceID, SpanID: r.spanID}
}
