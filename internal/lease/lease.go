// Package lease owns a turn's lease: whether the answering process is cold,
// warm or restored, Compose (the one place that shape picks what is sent),
// and the watermarks the turn stages until its run succeeds or fails.
package lease

import (
	"fmt"
	"sort"
	"sync"

	"github.com/residentd/residentd/internal/channel"
	"github.com/residentd/residentd/internal/session"
)

// Shape says what the answering process already knows.
type Shape int

const (
	// Cold: a new process with a new native session; it knows nothing.
	Cold Shape = iota
	// Warm: the process answered this key before and remembers the conversation.
	Warm
	// Restored: a new process that reloaded the key's saved native session.
	Restored
)

// Shapes lists every shape, for metrics that pre-create their series.
var Shapes = []Shape{Cold, Warm, Restored}

// Unstarted is the shape label of a turn that never got a process: the spawn
// failed, the binding was backing off, or the queue was full or timed out.
const Unstarted = "none"

// Outcome is how a turn ended, for metrics and logs.
type Outcome string

// Outcomes. Only OutcomeOK commits the turn's watermarks.
const (
	OutcomeOK         Outcome = "ok"
	OutcomeAgentError Outcome = "agent_error" // the agent answered with an error or an unsuccessful stop reason
	OutcomeCrash      Outcome = "crash"       // the agent process exited mid-turn
	OutcomeCancelled  Outcome = "cancelled"   // a client, start fresh or shutdown ended it
	OutcomeTimeout    Outcome = "timeout"     // the turn time limit
	OutcomeRejected   Outcome = "rejected"    // never ran: queue full or timed out, crash-loop backoff
	OutcomeRefused    Outcome = "refused"     // never reached the agent: a spent daily budget, a session option the agent does not list
)

// Outcomes lists every outcome, for metrics that pre-create their series.
var Outcomes = []Outcome{OutcomeOK, OutcomeAgentError, OutcomeCrash, OutcomeCancelled, OutcomeTimeout, OutcomeRejected, OutcomeRefused}

func (s Shape) String() string {
	switch s {
	case Cold:
		return "cold"
	case Warm:
		return "warm"
	case Restored:
		return "restored"
	}
	return fmt.Sprintf("shape(%d)", int(s))
}

// Lease is held by one turn. Create it with New; finish it with exactly one of
// Commit or Discard (later calls do nothing).
type Lease struct {
	Shape  Shape
	Native string // native ACP session id of the process that will answer

	mu     sync.Mutex // guards staged and done
	staged map[channel.WatermarkKey]channel.Seen
	done   bool
}

// New returns a lease for a turn answered by native session native.
func New(shape Shape, native string) *Lease {
	return &Lease{Shape: shape, Native: native}
}

// Stage keeps what a delivery accounted for until the run's outcome is known.
func (l *Lease) Stage(k channel.WatermarkKey, seen channel.Seen) {
	if seen.Empty() {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.done {
		return
	}
	if l.staged == nil {
		l.staged = make(map[channel.WatermarkKey]channel.Seen)
	}
	prev := l.staged[k]
	prev.Seq = max(prev.Seq, seen.Seq)
	prev.Marks = append(prev.Marks, seen.Marks...)
	prev.Held = append(prev.Held, seen.Held...)
	l.staged[k] = prev
}

// Source is what a turn's compose reads of the store (*store.Store): what
// the key's session saw, its conversation, and the timeline's messages.
type Source interface {
	Seen(k session.Key, thread string) (wm, main *channel.Watermark, err error)
	Conversation(k session.Key) ([]session.Turn, error)
	Unseen(ch, thread string, after uint64, also, known []string, pick func([]channel.Candidate) []int) (channel.View, error)
}

// Compose decides the turn's prompt (see Compose) for the lease's shape
// and native session, reading what it needs of key's timeline thread ("" the
// main one) from src, and stages the watermarks a success would move: the
// timeline's own, and the marks of the other timelines. in's Shape, Native,
// Watermark, Main, Conversation and Unseen are the lease's to fill.
func (l *Lease) Compose(src Source, key session.Key, thread string, in Input) (Output, error) {
	wm, main, err := src.Seen(key, thread)
	if err != nil {
		return Output{}, fmt.Errorf("lease: compose: %w", err)
	}
	in.Shape, in.Native, in.Watermark, in.Main = l.Shape, l.Native, wm, main
	in.Conversation = func() ([]session.Turn, error) { return src.Conversation(key) }
	in.Unseen = func(after uint64, also, known []string, pick func([]channel.Candidate) []int) (channel.View, error) {
		return src.Unseen(key.Channel, thread, after, also, known, pick)
	}
	out, err := Compose(in)
	if err != nil {
		return Output{}, err
	}
	l.Stage(channel.WatermarkKey{Key: key, Thread: thread}, out.Stage)
	for th, ms := range out.Marks {
		l.Stage(channel.WatermarkKey{Key: key, Thread: th}, channel.Seen{Marks: ms})
	}
	return out, nil
}

// Committer persists a successful run's staged watermarks, all at once, for
// native session native; *store.Store implements it, and the daemon wraps
// it to store the turn's exchange in the same transaction.
type Committer interface {
	CommitWatermarks(native string, staged map[channel.WatermarkKey]channel.Seen) error
}

// Commit moves the staged watermarks after a successful run and reports how
// many were written. It calls c once, even with nothing staged, so a caller
// that stores more with the watermarks always gets its call. It is a no-op
// after the first Commit or Discard.
func (l *Lease) Commit(c Committer) (int, error) {
	l.mu.Lock()
	staged := l.staged
	done := l.done
	l.done, l.staged = true, nil
	l.mu.Unlock()
	if done {
		return 0, nil
	}
	if err := c.CommitWatermarks(l.Native, staged); err != nil {
		var keys []string
		for k := range staged {
			keys = append(keys, k.String())
		}
		sort.Strings(keys)
		return 0, fmt.Errorf("lease: commit watermarks %q of native session %q: %w", keys, l.Native, err)
	}
	return len(staged), nil
}

// Discard drops the staged watermarks after a failed run: a run that failed
// may never have shown the agent anything. It reports how many were dropped.
func (l *Lease) Discard() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.done {
		return 0
	}
	n := len(l.staged)
	l.done, l.staged = true, nil
	return n
}

// Staged reports how many watermarks wait for the run's outcome.
func (l *Lease) Staged() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.staged)
}
