// Package channel owns the chat-channel data model shared by delivery and the
// store: a posted message and the per-session watermark of what was shown.
package channel

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/residentd/residentd/internal/session"
)

// Author kinds.
const (
	KindUser  = "user"
	KindAgent = "agent"
)

// MaxBodyBytes bounds one message body accepted from the desktop app.
const MaxBodyBytes = 64 << 10

// Message is one channel message as the desktop app posted it.
type Message struct {
	ID         string `json:"id"`
	Channel    string `json:"channel_id"`
	ThreadRoot string `json:"thread_root_id,omitempty"`
	Author     string `json:"author"`
	AuthorKind string `json:"author_kind"`
	// BindingID marks an agent's own post: the binding that wrote it.
	BindingID string    `json:"binding_id,omitempty"`
	CreatedAt time.Time `json:"created_at"`
	Body      string    `json:"body"`
	// Seq numbers this version's arrival in its channel (1, 2, ...); the
	// store assigns it, and an edit gets a new one.
	Seq uint64 `json:"seq,omitempty"`
	// First is the arrival of its first version; an edit keeps it, so a
	// session can tell an edit of a message it saw from a message it has
	// never seen.
	First uint64 `json:"first_seq,omitempty"`
	// Edited is set once the body was changed after the first push.
	Edited bool `json:"edited,omitempty"`
	// Attachments are the files of the first push, stored by content hash;
	// an edit changes the body only.
	Attachments []Attachment `json:"attachments,omitempty"`
}

// Attachment is one file a message carries: its name and media type as
// pushed, its size and the SHA-256 of its content, by which the store
// keeps it once however many messages carry it.
type Attachment struct {
	Name   string `json:"name"`
	Type   string `json:"type"`
	Size   int64  `json:"size"`
	SHA256 string `json:"sha256"`
	// Path is where the store keeps the content; set when read back, never
	// stored (the folder may move with the state file).
	Path string `json:"-"`
	// Message and Author name the message that carries it, for a turn.
	Message string `json:"-"`
	Author  string `json:"-"`
}

// ErrInvalidAttachment classifies an attachment refused at push: too
// large, unreadable, outside the attachments folder, or not of the type it
// declares. Nothing of its batch is written.
var ErrInvalidAttachment = errors.New("invalid attachment")

// ErrInvalid classifies a message the daemon refuses to store.
var ErrInvalid = errors.New("invalid channel message")

// Validate reports why m cannot be stored, wrapping ErrInvalid.
func (m Message) Validate() error {
	switch {
	case m.ID == "":
		return fmt.Errorf("%w: missing id", ErrInvalid)
	case m.Channel == "":
		return fmt.Errorf("%w %q: missing channel_id", ErrInvalid, m.ID)
	case m.Author == "":
		return fmt.Errorf("%w %q: missing author (the poster's handle or name)", ErrInvalid, m.ID)
	case m.CreatedAt.IsZero():
		return fmt.Errorf("%w %q: missing or zero created_at (RFC 3339 expected)", ErrInvalid, m.ID)
	case m.AuthorKind != KindUser && m.AuthorKind != KindAgent:
		return fmt.Errorf("%w %q: author_kind must be %q or %q, got %q", ErrInvalid, m.ID, KindUser, KindAgent, m.AuthorKind)
	case len(m.Body) > MaxBodyBytes:
		return fmt.Errorf("%w %q: body is %d bytes, limit is %d", ErrInvalid, m.ID, len(m.Body), MaxBodyBytes)
	case !utf8.ValidString(m.Body):
		return fmt.Errorf("%w %q: body is not valid UTF-8", ErrInvalid, m.ID)
	}
	return nil
}

// MaxWatermarkIDs bounds the marks a watermark keeps; the oldest go first.
const MaxWatermarkIDs = 200

// WatermarkKey names one watermark: what a resident session has been shown
// of its channel, or of one thread in it (Thread is the thread's root id,
// "" for the main timeline).
type WatermarkKey struct {
	Key    session.Key `json:"key"`
	Thread string      `json:"thread,omitempty"`
}

func (wk WatermarkKey) String() string {
	if wk.Thread == "" {
		return wk.Key.String()
	}
	return wk.Key.String() + "#" + wk.Thread
}

// Watermark records what one native agent session has seen of one channel
// timeline. The store numbers every message version in order of arrival
// (Message.Seq); a successful delivery accounts for every message of the
// timeline that had arrived when it was rendered (shown, left out by the
// bound and counted, the agent's own, or the mention itself), so one number
// says nearly all: a message is seen when its current version arrived at
// or before Seq. Marks hold what was seen outside that prefix: mentions
// this session answered before the desktop app pushed them, and a thread's
// root shown in the thread. Held are the holes in the prefix: mentions
// waiting on the key for a later turn when a block was read, left out of
// it as the addressed message is, and not seen until a delivery gives
// them (that turn's, or a later block once it ended unanswered).
type Watermark struct {
	Native string `json:"native"`
	Seq    uint64 `json:"seq"`
	Marks  []Mark `json:"marks,omitempty"`
	Held   []Mark `json:"held,omitempty"`
}

// Mark says the session has seen message ID up to the version that arrived
// as Seq; Seq 0 means any version that is not an edit (a mention answered
// before it was pushed).
type Mark struct {
	ID  string `json:"id"`
	Seq uint64 `json:"seq,omitempty"`
}

// Unedited returns marks of any unedited version of ids: mentions answered
// before the desktop app pushed them.
func Unedited(ids ...string) []Mark {
	out := make([]Mark, len(ids))
	for i, id := range ids {
		out[i] = Mark{ID: id}
	}
	return out
}

// MarkIDs lists the ids of marks, in order.
func MarkIDs(ms []Mark) []string {
	out := make([]string, len(ms))
	for i, m := range ms {
		out[i] = m.ID
	}
	return out
}

// For returns the watermark when it belongs to native session native, the
// process that will answer (the spec's watermark_for). A watermark of any
// other native session says nothing about what this one saw: a replaced
// process gets a fresh snapshot, never a gap.
func (w Watermark) For(native string) (Watermark, bool) {
	if native == "" || w.Native != native {
		return Watermark{}, false
	}
	return w, true
}

// Covers reports whether the session has seen the version of message id
// that arrived as seq, edited telling whether that version is an edit. An
// edit is always news unless that very version was seen.
func (w Watermark) Covers(id string, seq uint64, edited bool) bool {
	return seq <= w.Seq && !w.Holds(id, seq) || w.Marked(id, seq, edited)
}

// Holds reports whether the version of message id that arrived as seq is
// a hole in the prefix: left out of a block because a later turn of the
// key was to carry it.
func (w Watermark) Holds(id string, seq uint64) bool {
	return slices.Contains(w.Held, Mark{ID: id, Seq: seq})
}

// Marked reports whether one of the marks alone covers that version: what
// the session was given outside this timeline's prefix (a mention, a
// replayed mention, a thread's root), which holds in every timeline.
func (w Watermark) Marked(id string, seq uint64, edited bool) bool {
	return MarksCover(w.Marks, id, seq, edited)
}

// MarksCover reports whether one of marks covers the version of message id
// that arrived as seq (edited: that version is an edit).
func MarksCover(marks []Mark, id string, seq uint64, edited bool) bool {
	for _, m := range marks {
		if m.ID == id && (m.Seq == 0 && !edited || m.Seq != 0 && seq <= m.Seq) {
			return true
		}
	}
	return false
}

// Seen is what one delivery accounted for; it moves a watermark once the
// run succeeds.
type Seen struct {
	Seq   uint64 `json:"seq"`   // the channel's arrival number when the block was rendered
	Marks []Mark `json:"marks"` // seen outside the prefix up to Seq; a mark fills a hole it covers
	// Held are versions up to Seq the delivery left out for a later turn
	// of the key: holes in the prefix until a delivery fills them.
	Held []Mark `json:"held,omitempty"`
}

// Empty reports whether there is nothing to commit.
func (s Seen) Empty() bool { return s.Seq == 0 && len(s.Marks) == 0 && len(s.Held) == 0 }

// Advance returns w moved past s for native session native. A watermark of
// another native session is replaced, never merged: that process saw nothing
// of the old one. Marks the new Seq covers are dropped; at most limit are kept
// (MaxWatermarkIDs when max <= 0), the oldest dropped first. A hole is
// filled by a mark of s that covers it and kept otherwise; s's holes are
// added. Holes are never dropped for the limit: each is a mention still
// waiting on the key, and the key's queue is bounded.
func (w Watermark) Advance(native string, s Seen, limit int) Watermark {
	if limit <= 0 {
		limit = MaxWatermarkIDs
	}
	out := Watermark{Native: native}
	var marks, held []Mark
	if own, ok := w.For(native); ok {
		out.Seq = own.Seq
		marks = append(marks, own.Marks...)
		held = append(held, own.Held...)
	}
	out.Seq = max(out.Seq, s.Seq)
	marks = append(marks, s.Marks...)
	for _, m := range marks {
		if (m.Seq == 0 || m.Seq > out.Seq) && !slices.Contains(out.Marks, m) {
			out.Marks = append(out.Marks, m)
		}
	}
	if len(out.Marks) > limit {
		out.Marks = append([]Mark(nil), out.Marks[len(out.Marks)-limit:]...)
	}
	for _, h := range append(held, s.Held...) {
		if h.Seq <= out.Seq && !MarksCover(s.Marks, h.ID, h.Seq, false) && !slices.Contains(out.Held, h) {
			out.Held = append(out.Held, h)
		}
	}
	return out
}

// Self names the answering agent, to recognise its own channel posts.
type Self struct {
	Handle  string // the binding's handle, as in "@claude"
	Binding string // the binding id
}

// Wrote reports whether a post by author, carrying binding id binding (""
// when the desktop app sent none), is the agent's own, by what the daemon
// knows and nothing else. A post that carries a binding id is this agent's
// exactly when the id is this binding's. One without is when it is marked
// an agent's post (agent, author_kind agent) and its author is the handle
// written with or without the leading "@", in any letter case ("@claude",
// "claude", "Claude"). A person's post is never the agent's, whatever its
// display name: a person called "@claude" is a person, and leaving the post
// out would hide it from the agent without a trace.
func (s Self) Wrote(author, binding string, agent bool) bool {
	if binding != "" {
		return binding == s.Binding
	}
	h := strings.TrimPrefix(strings.TrimSpace(s.Handle), "@")
	a := strings.TrimPrefix(strings.TrimSpace(author), "@")
	return agent && h != "" && strings.EqualFold(a, h)
}

// Candidate is one message a channel block may show, as the store's arrival
// index describes it: enough to decide on it without decoding the message.
type Candidate struct {
	ID      string
	Seq     uint64    // arrival of its current version
	First   uint64    // arrival of its first version (Seq when never edited)
	At      time.Time // created_at: the block's display order
	Author  string
	Binding string // binding_id, "" when none
	Agent   bool   // author_kind is agent
	Edited  bool
}

// View is what one channel block may be made of, read in one transaction.
type View struct {
	Rows []Message // the chosen messages, oldest first by (created_at, id)
	Seq  uint64    // the channel's newest arrival number when read
	// Total is how many messages the timeline holds, a thread's root
	// included; Candidates how many of them were candidates (arrived after
	// the watermark, or the root).
	Total, Candidates int
	// Known are the ids asked about, in order.
	Known []Known
	// Attached are the attachments of the known ids the channel holds, by
	// id (none when they carry none).
	Attached map[string][]Attachment
}

// Known is where one id the prompt carries lives: the arrival of its
// current version and its timeline; Seq 0 when the channel does not hold it.
type Known struct {
	ID     string
	Seq    uint64
	Thread string
	Author string // who posted it, when the channel holds it
}
