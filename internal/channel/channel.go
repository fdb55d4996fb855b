// Package channel owns the chat-channel data model shared by delivery and the
// store: a posted message and the per-session watermark of what was shown.
package channel

import (
	"errors"
	"fmt"
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
	ID         string    `json:"id"`
	Channel    string    `json:"channel_id"`
	ThreadRoot string    `json:"thread_root_id,omitempty"`
	Author     string    `json:"author"`
	AuthorKind string    `json:"author_kind"`
	CreatedAt  time.Time `json:"created_at"`
	Body       string    `json:"body"`
}

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

// MaxWatermarkIDs bounds the ids a watermark remembers; the oldest go first.
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

// Watermark records what one native agent session has been shown of one
// channel (or thread): every row at or before LastAt, plus the listed ids.
type Watermark struct {
	Native string    `json:"native"`
	LastAt time.Time `json:"last_at"`
	IDs    []string  `json:"ids"`
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

// Seen is what one render showed; it moves a watermark once the run succeeds.
type Seen struct {
	IDs    []string  `json:"ids"`
	LastAt time.Time `json:"last_at"`
}

// Empty reports whether nothing was shown.
func (s Seen) Empty() bool { return len(s.IDs) == 0 }

// Advance returns w moved past s for native session native. A watermark of
// another native session is replaced, never merged: that process saw nothing
// of the old one. At most max ids are kept (MaxWatermarkIDs when max <= 0).
func (w Watermark) Advance(native string, s Seen, max int) Watermark {
	if max <= 0 {
		max = MaxWatermarkIDs
	}
	out := Watermark{Native: native}
	if own, ok := w.For(native); ok {
		out.LastAt = own.LastAt
		out.IDs = append(out.IDs, own.IDs...)
	}
	if s.LastAt.After(out.LastAt) {
		out.LastAt = s.LastAt
	}
	have := make(map[string]bool, len(out.IDs))
	for _, id := range out.IDs {
		have[id] = true
	}
	for _, id := range s.IDs {
		if !have[id] {
			out.IDs = append(out.IDs, id)
			have[id] = true
		}
	}
	if len(out.IDs) > max {
		out.IDs = append([]string(nil), out.IDs[len(out.IDs)-max:]...)
	}
	return out
}
