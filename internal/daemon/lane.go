package daemon

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/residentd/residentd/apitype"
	"github.com/residentd/residentd/internal/config"
	"github.com/residentd/residentd/internal/session"
)

// A lane is one key's line of accepted mentions, and the one place the
// rules of a binding's bursts mode live. It hands the key to its turns one
// at a time, in the order they were accepted; a restart enters the
// recorded runs in that order before any of them runs, so an interrupted
// attempt of the oldest runs before the runs queued behind it. Every
// mention it holds is answered by exactly one turn:
//
//	queue     each waiting mention gets a turn of its own
//	coalesce  the turn that gets the key takes every mention waiting then
//	          into its one prompt, which lists them
//	steer     while the key's turn is with an agent that takes steering
//	          (from its first update on), the first waiting mention is
//	          steered into it, then the next (so they keep their order)
//
// A mention taken into another turn leaves the lane for good: it is never
// listed or answered again. The mentions still waiting when a turn
// composes its prompt are left out of its channel block, as the addressed
// message is (held): they are not news to the session, their own turn
// carries them.
type lane struct {
	key  session.Key
	now  func() time.Time
	pool reserver

	mu      sync.Mutex    // guards the fields below and each turn's lane fields (turn.by, turn.tried, turn.waitPos); held for no call out of the lane but the stamp of enter (lock order: lane.mu, then pool.Pool.mu)
	waiting []*turn       // accepted and not answered, in acceptance order, none holding the key
	head    *turn         // holds the key, from the end of its wait to its release
	steer   *steerTarget  // the head's prompt, while its agent takes steering
	changed chan struct{} // closed and replaced at every change: waiting turns look again
	lastEnd time.Time     // when the key's last turn ended, in this daemon's life
	ended   bool
}

// reserver keeps a key for the turn the lane hands it to next
// (*pool.Pool): the turn that holds it passes it on at its release, so
// the next one takes the key's warm process before a turn of another key
// waiting for a slot can evict it.
type reserver interface {
	Reserve(k session.Key, owner string)
	Unreserve(k session.Key, owner string)
}

func newLane(k session.Key, now func() time.Time, pool reserver) *lane {
	return &lane{key: k, now: now, pool: pool, changed: make(chan struct{})}
}

// signalLocked wakes every waiting turn to look at the lane again.
func (l *lane) signalLocked() {
	close(l.changed)
	l.changed = make(chan struct{})
}

// enter puts t at the end of the line; stamp runs under the lane's lock
// (its acceptance is numbered there, so numbers follow the line) and is
// told whether the key was idle: no turn holds it or waits for it.
func (l *lane) enter(t *turn, stamp func(idle bool)) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if stamp != nil {
		stamp(l.head == nil && len(l.waiting) == 0)
	}
	l.waiting = append(l.waiting, t)
	l.signalLocked()
}

// wait returns once t holds the key (nil, nil), or another turn answers
// its mention (that turn), or t's context ends first (its error; t has
// left the line). While it waits, t's run hears where it stands.
func (l *lane) wait(t *turn) (*turn, error) {
	for {
		l.mu.Lock()
		if t.by != nil {
			by := t.by
			l.mu.Unlock()
			return by, nil
		}
		if l.head == nil {
			l.promoteLocked(false)
		}
		if l.head == t {
			l.mu.Unlock()
			return nil, nil
		}
		i := l.indexLocked(t)
		if i < 0 {
			l.mu.Unlock()
			return nil, fmt.Errorf("daemon: run %q is not in the line of key %s", t.r.ID, l.key)
		}
		target := l.steer
		steer := i == 0 && target != nil && t.tried != target && t.b.Bursts == config.BurstsSteer
		changed := l.changed
		report := i+1 != t.waitPos
		t.waitPos = i + 1
		l.mu.Unlock()
		if report {
			t.r.Emit(apitype.Event{Event: apitype.EventQueued, Reason: apitype.QueueKeyBusy, Position: i + 1})
		}
		if steer {
			l.trySteer(t, target)
			continue
		}
		select {
		case <-changed:
		case <-t.ctx.Done():
			return l.leave(t), t.ctx.Err()
		}
	}
}

func (l *lane) indexLocked(t *turn) int {
	for i, w := range l.waiting {
		if w == t {
			return i
		}
	}
	return -1
}

// promoteLocked hands the key to the first turn in line, when one waits;
// reserve: the key is still held in the pool by the turn releasing it,
// which passes it to this one.
func (l *lane) promoteLocked(reserve bool) {
	if l.head != nil || len(l.waiting) == 0 {
		return
	}
	l.head, l.waiting = l.waiting[0], l.waiting[1:]
	if reserve {
		l.pool.Reserve(l.key, l.head.r.ID)
	}
	l.signalLocked()
}

// leave takes t out of the line (its run ends unanswered), or out of the
// head's place when the key was handed to it just as it gave up (the next
// turn gets it). It returns the turn that took t's mention in meanwhile,
// if one did: that turn answers it, whatever t's context says.
func (l *lane) leave(t *turn) *turn {
	l.mu.Lock()
	defer l.mu.Unlock()
	if t.by != nil {
		return t.by
	}
	if i := l.indexLocked(t); i >= 0 {
		l.waiting = append(l.waiting[:i], l.waiting[i+1:]...)
	}
	if l.head == t {
		l.head = nil
		l.pool.Unreserve(l.key, t.r.ID)
		l.promoteLocked(false)
	}
	l.signalLocked()
	return nil
}

// release ends the head's hold on the key before its turn gives the key
// back to the pool: the next turn in line gets it, reserved in the pool.
func (l *lane) release(t *turn) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.head == t {
		l.head = nil
		l.lastEnd, l.ended = l.now(), true
		l.promoteLocked(true)
	}
	l.signalLocked()
}

// gap is the time from the end of the key's previous turn in this
// daemon's life to start; false for its first.
func (l *lane) gap(start time.Time) (time.Duration, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.ended {
		return 0, false
	}
	return max(0, start.Sub(l.lastEnd)), true
}

// take gives the head t, when its binding coalesces, every mention
// waiting now: they leave the line, answered by t.
func (l *lane) take(t *turn) []*turn {
	if t.b.Bursts != config.BurstsCoalesce {
		return nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	taken := l.waiting
	l.waiting = nil
	for _, w := range taken {
		w.by = t
	}
	l.signalLocked()
	return taken
}

// held lists the message ids of the mentions waiting now, which a later
// turn carries: the head leaves them out of its block.
func (l *lane) held() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var ids []string
	for _, w := range l.waiting {
		if w.req.MessageID != "" {
			ids = append(ids, w.req.MessageID)
		}
	}
	return ids
}

// steerTarget is the head's prompt while its agent takes steering.
type steerTarget struct {
	head     *turn
	s        steerer
	taken    []*turn        // mentions steered into it; guarded by lane.mu
	inflight sync.WaitGroup // steers sent and not answered yet
}

// steerer is a running session that takes text into its turn.
type steerer interface {
	Steer(ctx context.Context, text string) error
}

// openSteer opens t's prompt on s to the mentions waiting behind it.
func (l *lane) openSteer(t *turn, s steerer) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.steer = &steerTarget{head: t, s: s}
	l.signalLocked()
}

// closeSteer ends the steering of t's prompt (it returned) and returns the
// mentions steered into it, once every steer in flight has its answer.
func (l *lane) closeSteer(t *turn) []*turn {
	l.mu.Lock()
	target := l.steer
	if target == nil || target.head != t {
		l.mu.Unlock()
		return nil
	}
	l.steer = nil
	l.mu.Unlock()
	target.inflight.Wait()
	l.mu.Lock()
	defer l.mu.Unlock()
	return target.taken
}

// trySteer puts t's mention into target's prompt. Taken, t leaves the
// line answered by the head; refused (the prompt ended, the agent said
// no), t waits for its own turn and does not try that prompt again.
func (l *lane) trySteer(t *turn, target *steerTarget) {
	l.mu.Lock()
	if l.steer != target {
		l.mu.Unlock()
		return
	}
	target.inflight.Add(1)
	l.mu.Unlock()
	defer target.inflight.Done()
	err := target.s.Steer(t.ctx, t.d.mentionLine(t.req))
	l.mu.Lock()
	defer l.mu.Unlock()
	if err != nil {
		t.tried = target
		t.d.log.Debug("steering refused; the mention waits for its own turn", zap.String("run", t.r.ID), zap.Error(err))
		return
	}
	if i := l.indexLocked(t); i >= 0 {
		l.waiting = append(l.waiting[:i], l.waiting[i+1:]...)
	}
	t.by = target.head
	target.taken = append(target.taken, t)
	l.signalLocked()
}

// mentionLine is one mention as a coalesced or steered prompt lists it:
// message id, author and text.
func (d *Daemon) mentionLine(q apitype.TurnRequest) string {
	author := "someone"
	if q.MessageID != "" {
		if m, ok, err := d.st.Message(q.Channel, q.MessageID); err == nil && ok {
			author = m.Author
		}
	}
	id := q.MessageID
	if id == "" {
		id = "-"
	}
	return fmt.Sprintf("- [%s] %s: %s", id, author, strings.ReplaceAll(q.Text, "\n", " "))
}

// coalescedText is the user text of a turn that answers several mentions:
// each with its message id, author and text, the turn's own first.
func (d *Daemon) coalescedText(req apitype.TurnRequest, taken []*turn) string {
	var sb strings.Builder
	sb.WriteString("Several mentions arrived while you were busy; they are answered together in this turn. Answer each of them, naming its message id:\n")
	sb.WriteString(d.mentionLine(req) + "\n")
	for _, o := range taken {
		sb.WriteString(d.mentionLine(o.req) + "\n")
	}
	return sb.String()
}
