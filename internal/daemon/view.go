package daemon

import (
	"time"

	"github.com/residentd/residentd/apitype"
	"github.com/residentd/residentd/internal/channel"
	"github.com/residentd/residentd/internal/child"
)

// Status reports the pool's counts and the configuration's size: the part
// of the health response the daemon knows.
func (d *Daemon) Status() apitype.Health {
	return apitype.Health{
		Live: d.pool.Live(), Busy: d.pool.Busy(), Queued: d.pool.Queued(),
		MaxLive: d.cfg.MaxLive, Bindings: len(d.cfg.Bindings), RestoreStopped: d.RestoreStops(),
		OptionErrors: d.OptionErrors(),
	}
}

// Sessions lists the live agent processes, sorted by key, with each one's
// memory (0 where it cannot be read): its cgroup's, covering the whole
// tree, when it has one with the memory controller, else its RSS.
func (d *Daemon) Sessions() []apitype.Session {
	infos := d.pool.Sessions()
	out := make([]apitype.Session, 0, len(infos))
	for _, in := range infos {
		rss, source, err := child.Memory(in.Pid)
		if err != nil {
			source = ""
		}
		ses := apitype.Session{
			Channel: in.Key.Channel, Binding: in.Key.Binding, Pid: in.Pid, Native: in.Native, State: in.State,
			IdleS: in.Idle.Seconds(), Started: in.Started, Turns: in.Turns, RSSBytes: rss, MemorySource: source,
			RestoreStopped: d.restoreStopped(in.Key.Binding),
		}
		if v, ok := d.residents.Load(in.Pid); ok {
			r := v.(*resident)
			ses.RestoredBy, ses.Usage, ses.Options = r.restoredBy, r.usedSoFar(), r.currentOptions()
			ses.Working, _ = r.Working()
		}
		out = append(out, ses)
	}
	return out
}

// Bindings lists the configured bindings in configuration order.
func (d *Daemon) Bindings() []apitype.Binding {
	out := make([]apitype.Binding, 0, len(d.cfg.Bindings))
	for _, b := range d.cfg.Bindings {
		out = append(out, apitype.Binding{
			ID: b.ID, Handle: b.Handle, Runtime: b.Runtime, Command: b.Command,
			Supervised: b.Supervised, Resident: b.Resident, Restore: b.RestoreOn(),
			RestoreMethod: b.RestoreMethod, BriefPlacement: string(b.BriefPlacement), SessionOptions: b.SessionOptions,
		})
	}
	return out
}

// PutMessages stores channel messages pushed by the desktop app: a batch is
// validated whole and written in one transaction.
func (d *Daemon) PutMessages(msgs []apitype.Message) (apitype.MessagesResponse, error) {
	in := make([]channel.Message, len(msgs))
	for i, m := range msgs {
		in[i] = channel.Message{ID: m.ID, Channel: m.Channel, ThreadRoot: m.ThreadRoot, Author: m.Author, AuthorKind: m.AuthorKind, BindingID: m.BindingID, CreatedAt: m.CreatedAt, Body: m.Body}
	}
	res, err := d.st.PutMessages(in)
	if err != nil {
		d.m.Ingested(0, 0, 0, len(msgs))
		return apitype.MessagesResponse{}, err
	}
	d.m.Ingested(res.Added, res.Edited, res.Duplicates, 0)
	return apitype.MessagesResponse{Added: res.Added, Edited: res.Edited, Duplicates: res.Duplicates}, nil
}

// DeleteMessage deletes a channel message: no session is shown it again
// and channel_history leaves it out. An unknown one wraps store.ErrNotFound.
func (d *Daemon) DeleteMessage(ch, id string) error {
	if err := d.st.DeleteMessage(ch, id); err != nil {
		return err
	}
	d.m.Deleted()
	return nil
}

// History pages a channel's timeline (or one thread) backwards for the
// channel_history tool: full bodies, oldest first, and the cursor of the
// next older page ("" at the start).
func (d *Daemon) History(ch, thread, before string, limit int) ([]apitype.HistoryMessage, string, error) {
	msgs, next, err := d.st.History(ch, thread, before, limit)
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
func (d *Daemon) HasMessage(ch, id string) (bool, error) {
	return d.st.HasMessage(ch, id)
}

// Roster returns a channel's roster as last pushed, and whether one was.
func (d *Daemon) Roster(ch string) ([]apitype.Member, bool, error) {
	m, err := d.st.Roster(ch)
	if err != nil {
		return nil, false, err
	}
	if m == nil {
		return []apitype.Member{}, false, nil
	}
	return m, true, nil
}

// SetRoster replaces a channel's roster.
func (d *Daemon) SetRoster(ch string, members []apitype.Member) error {
	return d.st.SetRoster(ch, members)
}

// Project returns the project a channel's agents see the activity of.
func (d *Daemon) Project(ch string) (string, error) { return d.st.Project(ch) }

// SetProject maps a channel to a project ("" removes the mapping) and
// returns the channel's project after the change.
func (d *Daemon) SetProject(ch, project string) (string, error) {
	if err := d.st.SetProject(ch, project); err != nil {
		return "", err
	}
	return d.st.Project(ch)
}

// AddActivity appends project activity.
func (d *Daemon) AddActivity(project string, items []apitype.Activity) error {
	return d.st.AddActivity(project, items)
}

// Activity returns a project's newest n activity items, newest first.
func (d *Daemon) Activity(project string, n int) ([]apitype.Activity, error) {
	return d.st.Activity(project, n)
}
