// Package inbox owns the channel data the desktop app pushes and the agents'
// tools read: messages (new, edited, deleted), each channel's roster, the
// channel → project map and the projects' activity. It validates what is
// pushed, counts the ingest in metrics, and keeps it in the store; the turns
// read it back from the store when they compose a prompt.
package inbox

import (
	"errors"
	"fmt"
	"time"

	"github.com/residentd/residentd/apitype"
	"github.com/residentd/residentd/internal/channel"
	"github.com/residentd/residentd/internal/config"
	"github.com/residentd/residentd/internal/metrics"
	"github.com/residentd/residentd/internal/store"
)

// ErrBadRequest classifies a push that is not well formed (a roster member
// without a handle, an activity item without a kind); a message the store
// refuses wraps channel.ErrInvalid instead.
var ErrBadRequest = errors.New("bad request")

// Inbox is the channel data of one daemon. The zero value is not usable:
// create it with New.
type Inbox struct {
	st  *store.Store
	m   *metrics.Metrics
	att config.Attachments
}

// New returns the inbox over st, counting into m, taking attachments as att
// allows.
func New(st *store.Store, m *metrics.Metrics, att config.Attachments) *Inbox {
	return &Inbox{st: st, m: m, att: att}
}

// PutMessages stores channel messages pushed by the desktop app: a batch is
// validated whole and written in one transaction.
func (in *Inbox) PutMessages(msgs []channel.Message) (apitype.MessagesResponse, error) {
	batch := make([]Push, len(msgs))
	for i, m := range msgs {
		batch[i] = Push{Message: m}
	}
	return in.Push(batch)
}

// Push is PutMessages for messages that may carry attachments: each is
// read (a file inside the attachments folder, or inline base64), checked
// (size, media type against its content) and hashed before anything is
// written; one refused refuses the batch, wrapping
// channel.ErrInvalidAttachment and naming it.
func (in *Inbox) Push(batch []Push) (apitype.MessagesResponse, error) {
	msgs, blobs, err := resolve(in.att, batch)
	if err != nil {
		in.m.Ingested(0, 0, 0, len(batch))
		return apitype.MessagesResponse{}, err
	}
	res, err := in.st.PutMessagesWith(msgs, blobs)
	if err != nil {
		in.m.Ingested(0, 0, 0, len(msgs))
		return apitype.MessagesResponse{}, err
	}
	in.m.Ingested(res.Added, res.Edited, res.Duplicates, 0)
	return apitype.MessagesResponse{Added: res.Added, Edited: res.Edited, Duplicates: res.Duplicates}, nil
}

// DeleteMessage deletes a channel message: no session is shown it again
// and channel_history leaves it out. An unknown one wraps store.ErrNotFound.
func (in *Inbox) DeleteMessage(ch, id string) error {
	if err := in.st.DeleteMessage(ch, id); err != nil {
		return err
	}
	in.m.Deleted()
	return nil
}

// History pages a channel's timeline (or one thread) backwards for the
// channel_history tool: full bodies, oldest first, and the cursor of the
// next older page ("" at the start).
func (in *Inbox) History(ch, thread, before string, limit int) ([]apitype.HistoryMessage, string, error) {
	msgs, next, err := in.st.History(ch, thread, before, limit)
	if err != nil {
		return nil, "", err
	}
	out := make([]apitype.HistoryMessage, 0, len(msgs))
	for _, m := range msgs {
		out = append(out, apitype.HistoryMessage{ID: m.ID, ThreadRoot: m.ThreadRoot, Author: m.Author, AuthorKind: m.AuthorKind, CreatedAt: m.CreatedAt.UTC().Format(time.RFC3339Nano), Body: m.Body, Edited: m.Edited})
	}
	return out, next, nil
}

// HasMessage reports whether channel ch holds message id.
func (in *Inbox) HasMessage(ch, id string) (bool, error) { return in.st.HasMessage(ch, id) }

// Roster returns a channel's roster as last pushed, and whether one was.
func (in *Inbox) Roster(ch string) ([]apitype.Member, bool, error) {
	m, err := in.st.Roster(ch)
	if err != nil {
		return nil, false, err
	}
	if m == nil {
		return []apitype.Member{}, false, nil
	}
	return m, true, nil
}

// SetRoster replaces a channel's roster; nil members is refused (send an
// empty list to clear it), and each member needs a handle and a kind.
func (in *Inbox) SetRoster(ch string, members []apitype.Member) error {
	if members == nil {
		return fmt.Errorf("%w: members is required (send [] to clear the roster)", ErrBadRequest)
	}
	for i, m := range members {
		if m.Handle == "" {
			return fmt.Errorf("%w: member %d has no handle", ErrBadRequest, i)
		}
		if m.Kind != apitype.AuthorUser && m.Kind != apitype.AuthorAgent {
			return fmt.Errorf("%w: member %d (%q): kind %q must be %q or %q", ErrBadRequest, i, m.Handle, m.Kind, apitype.AuthorUser, apitype.AuthorAgent)
		}
	}
	return in.st.SetRoster(ch, members)
}

// Project returns the project a channel's agents see the activity of.
func (in *Inbox) Project(ch string) (string, error) { return in.st.Project(ch) }

// SetProject maps a channel to a project ("" removes the mapping) and
// returns the channel's project after the change.
func (in *Inbox) SetProject(ch, project string) (string, error) {
	if err := in.st.SetProject(ch, project); err != nil {
		return "", err
	}
	return in.st.Project(ch)
}

// AddActivity appends project activity: at least one item, each with a
// kind, a summary and a time.
func (in *Inbox) AddActivity(project string, items []apitype.Activity) error {
	if len(items) == 0 {
		return fmt.Errorf("%w: items must hold at least one activity item", ErrBadRequest)
	}
	for i, it := range items {
		if it.Kind == "" || it.Summary == "" || it.At.IsZero() {
			return fmt.Errorf("%w: item %d needs kind, summary and at (RFC 3339)", ErrBadRequest, i)
		}
	}
	return in.st.AddActivity(project, items)
}

// Activity returns a project's newest n activity items, newest first.
func (in *Inbox) Activity(project string, n int) ([]apitype.Activity, error) {
	return in.st.Activity(project, n)
}
