// Package session names a resident session and holds its conversation: the
// (channel, binding) key every package files a session's state under, and
// the turns kept for a cold replay.
package session

import (
	"errors"
	"fmt"
	"strings"
	"time"
)

// Key names one resident session: a binding answering in a channel, or in
// one thread of it (a binding with scope "thread"). At most one agent
// process serves a key at a time.
type Key struct {
	Channel string `json:"channel"`
	Binding string `json:"binding"`
	// Thread is the thread's root message id for a thread key, "" for the
	// channel's own key: a key without a thread is the same value, and is
	// stored the same way, as before thread keys existed.
	Thread string `json:"thread,omitempty"`
}

// String is the key's one string form, "<channel>/<binding>" or, for a
// thread key, "<channel>/<binding>#<thread>", used in logs, errors and as
// the session part of a watermark's key. A binding id holds neither '/'
// nor '#' (config refuses them), so no two keys share a form.
func (k Key) String() string {
	if k.Thread == "" {
		return k.Channel + "/" + k.Binding
	}
	return k.Channel + "/" + k.Binding + "#" + k.Thread
}

// Main is the channel's own key of k: k without its thread.
func (k Key) Main() Key { return Key{Channel: k.Channel, Binding: k.Binding} }

// ErrBadKey classifies a key with a missing part.
var ErrBadKey = errors.New("session key needs both a channel and a binding")

// Check reports a key with a missing part.
func (k Key) Check() error {
	if k.Channel == "" || k.Binding == "" {
		return fmt.Errorf("%w: got %q", ErrBadKey, k.String())
	}
	return nil
}

// ParseKey reads the String form of a channel's own key back. The binding
// id never holds a '/' (config refuses it), so the last '/' separates the
// parts. (A thread key's form is for people: a thread id may hold both
// separators.)
func ParseKey(s string) (Key, error) {
	i := strings.LastIndexByte(s, '/')
	if i < 0 {
		return Key{}, fmt.Errorf("%w: %q has no '/'", ErrBadKey, s)
	}
	k := Key{Channel: s[:i], Binding: s[i+1:]}
	return k, k.Check()
}

// Role says who spoke a turn.
type Role string

// Turn roles. Only user and assistant turns are stored; system and tool
// turns may appear in a conversation handed to the prompt builder, which
// skips them.
const (
	RoleUser      Role = "user"
	RoleAssistant Role = "assistant"
	RoleSystem    Role = "system"
	RoleTool      Role = "tool"
)

// Stored reports whether r is a role the conversation store keeps.
func (r Role) Stored() bool { return r == RoleUser || r == RoleAssistant }

// Turn is one half of an exchange, kept for replay into a new process.
type Turn struct {
	Role Role      `json:"role"`
	Text string    `json:"text"`
	At   time.Time `json:"at"`
	// MessageID is the channel message a user turn answered: a replay
	// carries it, so the replay's channel block leaves it out.
	MessageID string `json:"message_id,omitempty"`
	// MessageSeq is the arrival of the version of that message the turn
	// answered, 0 when the channel did not hold it yet: a replay carries
	// that version, and a later edit is still news.
	MessageSeq uint64 `json:"message_seq,omitempty"`
	// Answers are the message ids of the other mentions a user turn
	// answered (a coalesced list, mentions steered into it): a replay
	// carries them too, so its block leaves them out.
	Answers []string `json:"answers,omitempty"`
	// Facts is the key's facts JSON a user turn went out with (brief in the
	// framing): a restored session is told only when they changed since.
	Facts string `json:"facts,omitempty"`
}
