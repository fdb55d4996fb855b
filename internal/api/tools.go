package api

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/residentd/residentd/apitype"
	"github.com/residentd/residentd/internal/store"
)

// Capabilities checks a tool capability token; the daemon's registry
// implements it. thread "" means the whole channel.
type Capabilities interface {
	Check(token string) (channelID, thread string, err error)
}

// toolsAPI serves the desktop pushes and the capability-scoped tool reads.
type toolsAPI struct {
	d    Channel
	keys Sessions     // the channel's worktrees, for the roster; nil: none
	caps Capabilities // nil: the tool endpoints answer 503
}

// toolsPrefix is the only part of the API an agent's process tree may use.
const toolsPrefix = "/v1/tools/"

// registerTools adds the roster/activity push endpoints and the tool
// endpoints the MCP server calls.
func (s *Server) registerTools(mux *http.ServeMux, caps Capabilities) {
	t := &toolsAPI{d: s.inbox, keys: s.keys, caps: caps}
	mux.HandleFunc("PUT /v1/channels/{channel}/roster", t.putRoster)
	mux.HandleFunc("PUT /v1/channels/{channel}/project", t.putProject)
	mux.HandleFunc("POST /v1/projects/{project}/activity", t.postActivity)
	mux.HandleFunc("GET /v1/tools/channel_history", t.history)
	mux.HandleFunc("GET /v1/tools/channel_roster", t.roster)
	mux.HandleFunc("GET /v1/tools/project_activity", t.activity)
}

func (t *toolsAPI) putRoster(w http.ResponseWriter, r *http.Request) {
	var req apitype.RosterRequest
	if err := decode(w, r, MaxMessagesBody, &req); err != nil {
		fail(w, err)
		return
	}
	ch := r.PathValue("channel")
	if err := checkIDs(inPath("channel", ch)); err != nil {
		fail(w, err)
		return
	}
	err := t.d.SetRoster(ch, req.Members)
	reply(w, http.StatusOK, apitype.RosterResponse{Channel: ch, Members: len(req.Members)}, err)
}

func (t *toolsAPI) putProject(w http.ResponseWriter, r *http.Request) {
	var req apitype.ProjectRequest
	if err := decode(w, r, MaxSmallBody, &req); err != nil {
		fail(w, err)
		return
	}
	ch := r.PathValue("channel")
	if err := checkIDs(inPath("channel", ch), field("project", req.Project)); err != nil {
		fail(w, err)
		return
	}
	p, err := t.d.SetProject(ch, req.Project)
	reply(w, http.StatusOK, apitype.ProjectResponse{Channel: ch, Project: p}, err)
}

func (t *toolsAPI) postActivity(w http.ResponseWriter, r *http.Request) {
	var req apitype.ActivityRequest
	if err := decode(w, r, MaxMessagesBody, &req); err != nil {
		fail(w, err)
		return
	}
	p := r.PathValue("project")
	if err := checkIDs(inPath("project", p)); err != nil {
		fail(w, err)
		return
	}
	err := t.d.AddActivity(p, req.Items)
	reply(w, http.StatusOK, apitype.ActivityResponse{Project: p, Added: len(req.Items)}, err)
}

// scope authenticates a tool request and returns the channel (and thread,
// "" for all) its capability may read. It writes the error itself.
func (t *toolsAPI) scope(w http.ResponseWriter, r *http.Request) (ch, thread string, ok bool) {
	if t.caps == nil {
		writeError(w, http.StatusServiceUnavailable, apitype.CodeToolsDisabled, "agent tools are not enabled in this daemon")
		return "", "", false
	}
	token := r.Header.Get(apitype.CapabilityHeader)
	if token == "" {
		writeError(w, http.StatusUnauthorized, apitype.CodeMissingCapability, "tool endpoints need the "+apitype.CapabilityHeader+" header carrying the capability the daemon gave this agent's MCP server (RESIDENTD_CAPABILITY)")
		return "", "", false
	}
	ch, thread, err := t.caps.Check(token)
	if err != nil {
		writeError(w, http.StatusUnauthorized, apitype.CodeBadCapability, err.Error())
		return "", "", false
	}
	q := r.URL.Query()
	if err := checkIDs(inQuery("channel_id", q.Get("channel_id")), inQuery("thread_root_id", q.Get("thread_root_id")), inQuery("before", q.Get("before"))); err != nil {
		fail(w, err)
		return "", "", false
	}
	if asked := q.Get("channel_id"); asked != "" && asked != ch {
		writeError(w, http.StatusForbidden, apitype.CodeOutOfScope, fmt.Sprintf("this session's tools may read channel %q only; channel %q is refused", ch, asked))
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
			writeError(w, http.StatusForbidden, apitype.CodeOutOfScope, fmt.Sprintf("this session's tools may read thread %q of channel %q only; thread %q is refused", scopeThread, ch, thread))
			return
		}
		thread = scopeThread
	}
	limit, note, err := pageLimit(q.Get("limit"), apitype.DefaultHistoryLimit, apitype.MaxHistoryLimit)
	if err != nil {
		fail(w, err)
		return
	}
	before := q.Get("before")
	msgs, next, err := t.d.History(ch, thread, before, limit)
	if errors.Is(err, store.ErrNotFound) {
		writeError(w, http.StatusBadRequest, apitype.CodeBadCursor, fmt.Sprintf("before %q is neither a message id in this channel nor an RFC 3339 timestamp; pass next_before from the previous page, or leave before empty to start at the newest message", before))
		return
	}
	if err != nil {
		fail(w, err)
		return
	}
	if thread != "" && len(msgs) == 0 {
		// An empty thread page: refuse a root that is not a message of this
		// channel, the same way whether or not another channel holds it.
		if known, err := t.d.HasMessage(ch, thread); err == nil && !known {
			writeError(w, http.StatusForbidden, apitype.CodeOutOfScope, fmt.Sprintf("thread_root_id %q is not a message of channel %q, the only channel this session's tools may read", thread, ch))
			return
		}
	}
	writeJSON(w, http.StatusOK, apitype.HistoryPage{Channel: ch, Thread: thread, Messages: msgs, Next: next, Limit: limit, Note: note})
}

func (t *toolsAPI) roster(w http.ResponseWriter, r *http.Request) {
	ch, _, ok := t.scope(w, r)
	if !ok {
		return
	}
	members, pushed, err := t.d.Roster(ch)
	wts := []apitype.Worktree{}
	if t.keys != nil && err == nil {
		wts = t.keys.Worktrees(ch)
	}
	reply(w, http.StatusOK, apitype.Roster{Channel: ch, Pushed: pushed, Members: members, Worktrees: wts}, err)
}

func (t *toolsAPI) activity(w http.ResponseWriter, r *http.Request) {
	ch, _, ok := t.scope(w, r)
	if !ok {
		return
	}
	limit, note, err := pageLimit(r.URL.Query().Get("limit"), apitype.DefaultActivityLimit, apitype.MaxActivityLimit)
	if err != nil {
		fail(w, err)
		return
	}
	p, err := t.d.Project(ch)
	if err != nil {
		fail(w, err)
		return
	}
	items, err := t.d.Activity(p, limit)
	if err != nil {
		fail(w, err)
		return
	}
	out := apitype.ProjectActivity{Project: p, Items: make([]apitype.ActivityItem, 0, len(items)), Limit: limit, Note: note}
	for _, it := range items {
		out.Items = append(out.Items, apitype.ActivityItem{Kind: it.Kind, Summary: it.Summary, Link: it.Link, At: it.At.UTC().Format(time.RFC3339Nano)})
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
		return 0, "", fmt.Errorf("%w: limit %q must be a whole number from 1 to %d", errBadRequest, v, max)
	}
	switch {
	case n == 0:
		return def, "", nil
	case n > max:
		return max, fmt.Sprintf("limit %d is above the maximum of %d; clamped to %d", n, max, max), nil
	}
	return n, "", nil
}
