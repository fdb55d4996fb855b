package apitype

import "time"

// CapabilityHeader carries the token an agent's MCP server presents on the
// /v1/tools endpoints.
const CapabilityHeader = "X-Residentd-Capability"

// Page sizes of the tool endpoints.
const (
	DefaultHistoryLimit  = 30
	MaxHistoryLimit      = 100
	DefaultActivityLimit = 20
	MaxActivityLimit     = 100
)

// HistoryMessage is one full, untruncated channel message.
type HistoryMessage struct {
	ID         string `json:"id"`
	ThreadRoot string `json:"thread_root_id,omitempty"`
	Author     string `json:"author"`
	AuthorKind string `json:"author_kind"`
	CreatedAt  string `json:"created_at"` // RFC 3339
	Body       string `json:"body"`
	Edited     bool   `json:"edited,omitempty"`
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

// Member is one roster entry as the desktop app pushes it.
type Member struct {
	Handle    string `json:"handle"`
	Kind      string `json:"kind"`
	Reachable bool   `json:"reachable"`
}

// Roster is GET /v1/tools/channel_roster: the members as last pushed.
type Roster struct {
	Channel string   `json:"channel_id"`
	Pushed  bool     `json:"pushed"` // false: the desktop app never pushed one
	Members []Member `json:"members"`
	// Worktrees are the git worktrees the channel's keys work in (every
	// binding's, threads' too), with their uncommitted changes.
	Worktrees []Worktree `json:"worktrees"`
}

// Activity is one project event as the desktop app pushes it.
type Activity struct {
	Kind    string    `json:"kind"`
	Summary string    `json:"summary"`
	Link    string    `json:"link"`
	At      time.Time `json:"at"`
}

// ActivityItem is one project event as an agent reads it.
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
	Members []Member `json:"members"`
}

// RosterResponse acknowledges a roster push.
type RosterResponse struct {
	Channel string `json:"channel_id"`
	Members int    `json:"members"`
}

// ProjectRequest is PUT /v1/channels/{channel}/project.
type ProjectRequest struct {
	Project string `json:"project"`
}

// ProjectResponse is the channel's project after the push.
type ProjectResponse struct {
	Channel string `json:"channel_id"`
	Project string `json:"project"`
}

// ActivityRequest is POST /v1/projects/{project}/activity.
type ActivityRequest struct {
	Items []Activity `json:"items"`
}

// ActivityResponse acknowledges an activity push.
type ActivityResponse struct {
	Project string `json:"project"`
	Added   int    `json:"added"`
}
