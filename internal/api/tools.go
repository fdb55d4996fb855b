package api

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/residentd/residentd/internal/channel"
	"github.com/residentd/residentd/internal/daemon"
	"github.com/residentd/residentd/internal/store"
)

// CapabilityHeader carries the token an agent's MCP server presents on the
// /v1/tools endpoints.
const CapabilityHeader = "X-Residentd-Capability"

// Page sizes of the tool endpoints.
const (
	DefaultHistoryLimit  = store.DefaultHistoryLimit // 30
	MaxHistoryLimit      = 100
	DefaultActivityLimit = 20
	MaxActivityLimit     = 100
)

// Capabilities checks a tool capability token; the daemon's registry
// implements it. thread "" means the whole channel.
type Capabilities interface {
	Check(token string) (channelID, thread string, err error)
}

// HistoryMessage is one full, untruncated channel message.
type HistoryMessage struct {
	ID         string `json:"id"`
	ThreadRoot string `json:"thread_root_id,omitempty"`
	Author     string `json:"author"`
	AuthorKind string `json:"author_kind"`
	CreatedAt  string `json:"created_at"` // RFC 3339
	Body       string `json:"body"`
}

// HistoryPage is GET /v1/tools/channel_history: up to limit messages older
// than the cursor, oldest first.
type HistoryPage struct {
	Channel  string           `json:"channel_id"`
	Thread   string           `json:"thread_root_id,omitempty"`
	Messages []HistoryMessage `json:"messages"`
	// Next is the before cursor of the following, older page; "" once the
	// start of the channel (or thread) is reached.
	Next  string `json:"next_before"`
	Limit int    `json:"limit"`
	// Note says when the requested limit was clamped.
	Note string `json:"note,omitempty"`
}

// Roster is GET /v1/tools/channel_roster: the members as last pushed.
type Roster struct {
	Channel string         `json:"channel_id"`
	Pushed  bool           `json:"pushed"` // false: the desktop app never pushed one
	Members []store.Member `json:"members"`
}

// ActivityItem is one project event.
type ActivityItem struct {
	Kind    string `json:"kind"`
	Summary string `json:"summary"`
	Link    string `json:"link,omitempty"`
	At      string `json:"at"` // RFC 3339
}

// ProjectActivity is GET /v1/tools/project_activity, newest first.
type ProjectActivity struct {
	Project string         `json:"project"`
	Items   []ActivityItem `json:"items"`
	Limit   int            `json:"limit"`
	Note    string         `json:"note,omitempty"`
}

// RosterRequest is PUT /v1/channels/{channel}/roster.
type RosterRequest struct {
	Members []store.Member `json:"members"`
}

// ActivityRequest is POST /v1/projects/{project}/activity.
type ActivityRequest struct {
	Items []store.Activity `json:"items"`
}

// ProjectRequest is PUT /v1/channels/{channel}/project.
type ProjectRequest struct {
	Project string `json:"project"`
}

// toolsAPI serves the desktop pushes and the capability-scoped tool reads.
type toolsAPI struct {
	d    *daemon.Daemon
	caps Capabilities // nil: the tool endpoints answer 503
}

// registerTools adds the roster/activity push endpoints and the tool
// endpoints the MCP server calls.
func (s *Server) registerTools(mux *http.ServeMux, caps Capabilities) {
	t := &toolsAPI{d: s.d, caps: caps}
	mux.HandleFunc("PUT /v1/channels/{channel}/roster", t.putRoster)
	mux.HandleFunc("PUT /v1/channels/{channel}/project", t.putProject)
	mux.HandleFunc("POST /v1/projects/{project}/activity", t.postActivity)
	mux.HandleFunc("GET /v1/tools/channel_history", t.history)
	mux.HandleFunc("GET /v1/tools/channel_roster", t.roster)
	mux.HandleFunc("GET /v1/tools/project_activity", t.activity)
}

func (t *toolsAPI) putRoster(w http.ResponseWriter, r *http.Request) {
	var req RosterRequest
	if err := decode(w, r, MaxMessagesBody, &req); err != nil {
		fail(w, err)
		return
	}
	if req.Members == nil {
		fail(w, fmt.Errorf("%w: members is required (send [] to clear the roster)", daemon.ErrBadRequest))
		return
	}
	for i, m := range req.Members {
		if m.Handle == "" {
			fail(w, fmt.Errorf("%w: member %d has no handle", daemon.ErrBadRequest, i))
			return
		}
	}
	ch := r.PathValue("channel")
	if err := t.d.Store().SetRoster(ch, req.Members); err != nil {
		fail(w, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"channel_id": ch, "members": len(req.Members)})
}

func (t *toolsAPI) putProject(w http.ResponseWriter, r *http.Request) {
	var req ProjectRequest
	if err := decode(w, r, MaxSmallBody, &req); err != nil {
		fail(w, err)
		return
	}
	ch := r.PathValue("channel")
	if err := t.d.Store().SetProject(ch, req.Project); err != nil {
		fail(w, err)
		return
	}
	p, err := t.d.Store().Project(ch)
	if err != nil {
		fail(w, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"channel_id": ch, "project": p})
}

func (t *toolsAPI) postActivity(w http.ResponseWriter, r *http.Request) {
	var req ActivityRequest
	if err := decode(w, r, MaxMessagesBody, &req); err != nil {
		fail(w, err)
		return
	}
	if len(req.Items) == 0 {
		fail(w, fmt.Errorf("%w: items must hold at least one activity item", daemon.ErrBadRequest))
		return
	}
	for i, it := range req.Items {
		if it.Kind == "" || it.Summary == "" || it.At.IsZero() {
			fail(w, fmt.Errorf("%w: item %d needs kind, summary and at (RFC 3339)", daemon.ErrBadRequest, i))
			return
		}
	}
	p := r.PathValue("project")
	if err := t.d.Store().AddActivity(p, req.Items); err != nil {
		fail(w, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"project": p, "added": len(req.Items)})
}

// scope authenticates a tool request and returns the channel (and thread,
// "" for all) its capability may read. It writes the error itself.
func (t *toolsAPI) scope(w http.ResponseWriter, r *http.Request) (ch, thread string, ok bool) {
	if t.caps == nil {
		writeError(w, http.StatusServiceUnavailable, "tools_disabled", "agent tools are not enabled in this daemon")
		return "", "", false
	}
	token := r.Header.Get(CapabilityHeader)
	if token == "" {
		writeError(w, http.StatusUnauthorized, "missing_capability", "tool endpoints need the "+CapabilityHeader+" header carrying the capability the daemon gave this agent's MCP server (RESIDENTD_CAPABILITY)")
		return "", "", false
	}
	ch, thread, err := t.caps.Check(token)
	if err != nil {
		writeError(w, http.StatusUnauthorized, "bad_capability", err.Error())
		return "", "", false
	}
	if asked := r.URL.Query().Get("channel_id"); asked != "" && asked != ch {
		writeError(w, http.StatusForbidden, "out_of_scope", fmt.Sprintf("this session's tools may read channel %q only; channel %q is refused", ch, asked))
		return "", "", false
	}
	return ch, thread, true
}

func (t *toolsAPI) history(w http.ResponseWriter, r *http.Request) {
	ch, scopeThread, ok := t.scope(w, r)
	if !ok {
		return
	}
	q := r.URL.Query()
	thread := q.Get("thread_root_id")
	if scopeThread != "" {
		if thread != "" && thread != scopeThread {
			writeError(w, http.StatusForbidden, "out_of_scope", fmt.Sprintf("this session's tools may read thread %q of channel %q only; thread %q is refused", scopeThread, ch, thread))
			return
		}
		thread = scopeThread
	}
	limit, note, err := pageLimit(q.Get("limit"), DefaultHistoryLimit, MaxHistoryLimit)
	if err != nil {
		fail(w, err)
		return
	}
	before := q.Get("before")
	st := t.d.Store()
	msgs, next, err := st.History(ch, thread, before, limit)
	if errors.Is(err, store.ErrNotFound) {
		writeError(w, http.StatusBadRequest, "bad_cursor", fmt.Sprintf("before %q is neither a message id in this channel nor an RFC 3339 timestamp; pass next_before from the previous page, or leave before empty to start at the newest message", before))
		return
	}
	if err != nil {
		fail(w, err)
		return
	}
	if thread != "" && len(msgs) == 0 {
		// An empty thread page: refuse a root that is not a message of this
		// channel, the same way whether or not another channel holds it.
		if _, _, err := st.History(ch, "", thread, 1); errors.Is(err, store.ErrNotFound) {
			writeError(w, http.StatusForbidden, "out_of_scope", fmt.Sprintf("thread_root_id %q is not a message of channel %q, the only channel this session's tools may read", thread, ch))
			return
		}
	}
	page := HistoryPage{Channel: ch, Thread: thread, Messages: make([]HistoryMessage, 0, len(msgs)), Next: next, Limit: limit, Note: note}
	for _, m := range msgs {
		page.Messages = append(page.Messages, historyMessage(m))
	}
	writeJSON(w, http.StatusOK, page)
}

func historyMessage(m channel.Message) HistoryMessage {
	return HistoryMessage{ID: m.ID, ThreadRoot: m.ThreadRoot, Author: m.Author, AuthorKind: m.AuthorKind, CreatedAt: m.CreatedAt.UTC().Format(time.RFC3339Nano), Body: m.Body}
}

func (t *toolsAPI) roster(w http.ResponseWriter, r *http.Request) {
	ch, _, ok := t.scope(w, r)
	if !ok {
		return
	}
	members, err := t.d.Store().Roster(ch)
	if err != nil {
		fail(w, err)
		return
	}
	out := Roster{Channel: ch, Pushed: members != nil, Members: members}
	if out.Members == nil {
		out.Members = []store.Member{}
	}
	writeJSON(w, http.StatusOK, out)
}

func (t *toolsAPI) activity(w http.ResponseWriter, r *http.Request) {
	ch, _, ok := t.scope(w, r)
	if !ok {
		return
	}
	limit, note, err := pageLimit(r.URL.Query().Get("limit"), DefaultActivityLimit, MaxActivityLimit)
	if err != nil {
		fail(w, err)
		return
	}
	p, err := t.d.Store().Project(ch)
	if err != nil {
		fail(w, err)
		return
	}
	items, err := t.d.Store().Activity(p, limit)
	if err != nil {
		fail(w, err)
		return
	}
	out := ProjectActivity{Project: p, Items: make([]ActivityItem, 0, len(items)), Limit: limit, Note: note}
	for _, it := range items {
		out.Items = append(out.Items, ActivityItem{Kind: it.Kind, Summary: it.Summary, Link: it.Link, At: it.At.UTC().Format(time.RFC3339Nano)})
	}
	writeJSON(w, http.StatusOK, out)
}

// pageLimit parses a limit query value: empty or 0 gives def, above max is
// clamped to max with a note saying so, negative or non-numeric is refused.
func pageLimit(v string, def, max int) (int, string, error) {
	if v == "" {
		return def, "", nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 {
		return 0, "", fmt.Errorf("%w: limit %q must be a whole number from 1 to %d", daemon.ErrBadRequest, v, max)
	}
	switch {
	case n == 0:
		return def, "", nil
	case n > max:
		return max, fmt.Sprintf("limit %d is above the maximum of %d; clamped to %d", n, max, max), nil
	}
	return n, "", nil
}
