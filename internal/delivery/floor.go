package delivery

import (
	"bytes"
	"encoding/json"
	"strings"
	"sync"
)

// With the brief in the framing, a turn carries only what is new: what
// never changes for a key (Facts) goes once, after the brief, and again only
// as one line when it changes; a warm turn is the mention line and the new
// channel lines. Every token a warm turn sends stays in the session's
// history and is re-read on every later turn, so this is the floor.

// Facts is what does not change between mentions of one key: it goes with
// the framing once, as FactsPrefix and one line of JSON. Field order and
// names are part of the prompt.
type Facts struct {
	ChannelID     string  `json:"channel_id"`
	BindingID     string  `json:"binding_id"`
	Runtime       string  `json:"runtime"`
	Supervised    bool    `json:"supervised"`
	Resident      bool    `json:"resident"`
	ChannelAgents []Agent `json:"channel_agents"` // encoded as [] when empty
	MaxRecipients int     `json:"max_recipients"`
	// Worktree is the key's own git worktree, when the session works in
	// one; absent otherwise.
	Worktree *Worktree `json:"worktree,omitempty"`
}

// Worktree is where a session works when its key has a git worktree of its
// own (a binding with workspace "worktree"): the folder (the session's
// cwd) and the branch checked out there.
type Worktree struct {
	Path   string `json:"path"`
	Branch string `json:"branch"`
}

// Mention is what a framing-placement turn says about the mention itself:
// one line of JSON. A thread root and an author appear only when set.
type Mention struct {
	MessageID    string  `json:"message_id"`
	ThreadRootID *string `json:"thread_root_id,omitempty"`
	Author       string  `json:"author,omitempty"`
	Text         string  `json:"text"`
}

// Prefixes of the lines a framing-placement prompt carries besides the
// mention and the block.
const (
	FactsPrefix        = "Channel facts: "
	FactsChangedPrefix = "Channel facts changed: "
	// Reopened opens a restored turn: the session already holds its framing,
	// brief and facts.
	Reopened = "(This session was reopened; your instructions and the channel facts still hold.)"
)

// Facts returns the part of p that never changes for a key.
func (p Payload) Facts() Facts {
	return Facts{ChannelID: p.ChannelID, BindingID: p.BindingID, Runtime: p.Runtime, Supervised: p.Supervised,
		Resident: p.Resident, ChannelAgents: p.ChannelAgents, MaxRecipients: p.MaxRecipients, Worktree: p.Worktree}
}

// Mention returns the part of p that is new with every mention.
func (p Payload) Mention() Mention {
	return Mention{MessageID: p.MessageID, ThreadRootID: p.ThreadRootID, Author: p.Author, Text: p.Text}
}

// JSON returns f as one line of compact JSON.
func (f Facts) JSON() string {
	if f.ChannelAgents == nil {
		f.ChannelAgents = []Agent{}
	}
	return compact(f)
}

// JSON returns m as one line of compact JSON.
func (m Mention) JSON() string { return compact(m) }

// compact encodes v as one line without HTML escaping, so "<", ">" and "&"
// in a message reach the agent as written. The types encoded here (strings,
// bools, ints, slices of the same) cannot fail to encode. Every turn
// encodes two or three, so the encoder is reused.
func compact(v any) string {
	e := encoders.Get().(*encoder)
	defer encoders.Put(e)
	e.buf.Reset()
	_ = e.enc.Encode(v)
	return string(bytes.TrimSuffix(e.buf.Bytes(), []byte("\n")))
}

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

// IsMentionLine reports whether line (without a replay's "User: ") is a
// mention line of either placement: a framing-placement Mention or a
// turn-placement Payload.
func IsMentionLine(line string) bool {
	return strings.HasPrefix(line, `{"message_id"`) || strings.HasPrefix(line, `{"channel_id"`)
}

// FloorTurn assembles a framing-placement user turn: the lines before the
// mention (the reopened line, the brief when it is due, a facts-changed
// line; empty ones are skipped), the mention line (Mention.JSON), and the
// block after a blank line when there is one.
func FloorTurn(before []string, mention, block string) string {
	var b strings.Builder
	for _, s := range before {
		if s == "" {
			continue
		}
		b.WriteString(s)
		if strings.Contains(s, "\n") {
			b.WriteString("\n\n") // a paragraph (the brief) keeps a blank line after it
		} else {
			b.WriteString("\n")
		}
	}
	b.WriteString(mention)
	if block != "" {
		b.WriteString("\n\n")
		b.WriteString(block)
	}
	return b.String()
}

// NewestTurn returns prompt from its newest mention line on (either
// placement's; a cold replay carries older ones before it), or all of
// prompt when it holds none: the part that is this turn's own.
func NewestTurn(prompt string) string {
	at := -1
	for i := 0; i < len(prompt); {
		line := prompt[i:]
		if j := strings.IndexByte(line, '\n'); j >= 0 {
			line = line[:j]
		}
		if IsMentionLine(strings.TrimPrefix(line, "User: ")) {
			at = i
		}
		i += len(line) + 1
	}
	if at < 0 {
		return prompt
	}
	return prompt[at:]
}
