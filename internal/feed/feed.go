// Package feed owns the channel data the desktop app pushes and the agents'
// tools read: messages (new, edited, deleted), each channel's roster, the
// channel → project map and the projects' activity. It validates what is
// pushed, counts the ingest in metrics, and keeps it in the store; the turns
// read it back from the store when they compose a prompt.
package feed

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

// Feed is the channel data of one daemon. The zero value is not usable:
// create it with New.
type Feed struct {
	st  *store.Store
	m   *metrics.Metrics
	att config.Attachments
}

// New returns the feed over st, counting into m, taking attachments as att
// allows.
func New(st *store.Store, m *metrics.Metrics, att config.Attachments) *Feed {
	return &Feed{st: st, m: m, att: att}
}

// PutMessages stores channel messages pushed by the desktop app: a batch is
// validated whole and written in one transaction.
func (f *Feed) PutMessages(msgs []channel.Message) (apitype.MessagesResponse, error) {
	batch := make([]Push, len(msgs))
	for i, m := range msgs {
		batch[i] = Push{Message: m}
	}
	return f.Push(batch)
}

// Push is PutMessages for messages that may carry attachments: each is
// read (a file inside the attachments folder, or inline base64), checked
// (size, media type against its content) and hashed before anything is
// written; one refused refuses the batch, wrapping
// channel.ErrInvalidAttachment and naming it.
func (f *Feed) Push(batch []Push) (apitype.MessagesResponse, error) {
	msgs, blobs, err := resolve(f.att, batch)
	if err != nil {
		f.m.Ingested(0, 0, 0, len(batch))
		return apitype.MessagesResponse{}, err
	}
	res, err := f.st.PutMessagesWith(msgs, blobs)
	if err != nil {
		f.m.Ingested(0, 0, 0, len(msgs))
		return apitype.MessagesResponse{}, err
	}
	f.m.Ingested(res.Added, res.Edited, res.Duplicates, 0)
	return apitype.MessagesResponse{Added: res.Added, Edited: res.Edited, Duplicates: res.Duplicates}, nil
}

// DeleteMessage deletes a channel message: no session is shown it again
// and channel_history leaves it out. An unknown one wraps store.ErrNotFound.
func (f *Feed) DeleteMessage(ch, id string) error {
	if err := f.st.DeleteMessage(ch, id); err != nil {
		return err
	}
	f.m.Deleted()
	return nil
}

// History pages a channel's timeline (or one thread) backwards for the
// channel_history tool: full bodies, oldest first, and the cursor of the
// next older page ("" at the start).
func (f *Feed) History(ch, thread, before string, limit int) ([]apitype.HistoryMessage, string, error) {
	msgs, next, err := f.st.History(ch, thread, before, limit)
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
func (f *Feed) HasMessage(ch, id string) (bool, error) { return f.st.HasMessage(ch, id) }

// Roster returns a channel's roster as last pushed, and whether one was.
func (f *Feed) Roster(ch string) ([]apitype.Member, bool, error) {
	m, err := f.st.Roster(ch)
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
func (f *Feed) SetRoster(ch string, members []apitype.Member) error {
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
	return f.st.SetRoster(ch, members)
}

// Project returns the project a channel's agents see the activity of.
func (f *Feed) Project(ch string) (string, error) { return f.st.Project(ch) }

// SetProject maps a channel to a project ("" removes the mapping) and
// returns the channel's project after the change.
func (f *Feed) SetProject(ch, project string) (string, error) {
	if err := f.st.SetProject(ch, project); err != nil {
		return "", err
	}
	return f.st.Project(ch)
}

// AddActivity appends project activity: at least one item, each with a
// kind, a summary and a time.
func (f *Feed) AddActivity(project string, items []apitype.Activity) error {
	if len(items) == 0 {
		return fmt.Errorf("%w: items must hold at least one activity item", ErrBadRequest)
	}
	for i, it := range items {
		if it.Kind == "" || it.Summary == "" || it.At.IsZero() {
			return fmt.Errorf("%w: item %d needs kind, summary and at (RFC 3339)", ErrBadRequest, i)
		}
	}
	return f.st.AddActivity(project, items)
}

// Activity returns a project's newest n activity items, newest first.
func (f *Feed) Activity(project string, n int) ([]apitype.Activity, error) {
	return f.st.Activity(project, n)
}
