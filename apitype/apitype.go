// Package apitype holds every request, response, error and stream event of
// residentd's local API (HTTP/1.1 + JSON under /v1 on a Unix socket). It
// imports nothing but the standard library, so a desktop app or another Go
// module can speak the API without linking the daemon.
package apitype

import (
	"encoding/json"
	"time"
)

// TurnRequest is POST /v1/turns: one mention for a binding to answer.
type TurnRequest struct {
	Channel       string  `json:"channel_id"`
	Binding       string  `json:"binding_id"`
	MessageID     string  `json:"message_id"`
	ThreadRoot    *string `json:"thread_root_id"` // null (or absent) outside a thread
	RunID         string  `json:"run_id,omitempty"`
	Text          string  `json:"text"`
	ChannelAgents []Agent `json:"channel_agents,omitempty"`
	MaxRecipients int     `json:"max_recipients,omitempty"`
}

// Agent is one agent present in the channel, as the mention payload lists it.
type Agent struct {
	Handle    string `json:"handle"`
	Reachable bool   `json:"reachable"`
}

// Event kinds of a turn's NDJSON stream.
const (
	EventStart  = "start"  // the turn has its process: shape, native session, pid
	EventUpdate = "update" // one update from the agent
	EventDone   = "done"   // the turn succeeded; always the last line
	EventError  = "error"  // the turn failed after its stream started; always the last line
)

// Event is one line of a turn's stream.
type Event struct {
	Event      string         `json:"event"`
	RunID      string         `json:"run_id,omitempty"`
	Shape      string         `json:"shape,omitempty"`
	Native     string         `json:"native_session,omitempty"`
	Pid        int            `json:"pid,omitempty"`
	Update     *Update        `json:"update,omitempty"`
	StopReason string         `json:"stop_reason,omitempty"`
	Text       string         `json:"text,omitempty"`
	Watermark  string         `json:"watermark,omitempty"` // see the Watermark* constants
	Context    *ContextReport `json:"context,omitempty"`
	Usage      *Usage         `json:"usage,omitempty"`
	Code       string         `json:"code,omitempty"`
	Message    string         `json:"message,omitempty"`
}

// What a done event says of the turn's watermark.
const (
	WatermarkCommitted = "committed" // what the turn showed is remembered
	WatermarkNone      = "none"      // nothing to remember, or a binding that keeps no session
	WatermarkFailed    = "failed"    // the run succeeded but the commit did not; the next turn shows those lines again
)

// Update is one session/update the agent sent during the turn (or a
// permission decision). Raw is the agent's update as it sent it.
type Update struct {
	Kind string          `json:"kind"`
	Text string          `json:"text,omitempty"`
	Raw  json.RawMessage `json:"raw,omitempty"`
}

// Update kinds.
const (
	UpdateMessage    = "agent_message_chunk"
	UpdateThought    = "agent_thought_chunk"
	UpdateToolCall   = "tool_call"
	UpdateToolUpdate = "tool_call_update"
	UpdatePlan       = "plan"
	UpdateUsage      = "usage_update"
	UpdatePermission = "permission"
	UpdateOther      = "other"
)

// Usage is the token usage the agent reported for a turn.
type Usage struct {
	InputTokens      int64 `json:"input_tokens"`
	OutputTokens     int64 `json:"output_tokens"`
	CacheReadTokens  int64 `json:"cache_read_tokens"`
	CacheWriteTokens int64 `json:"cache_write_tokens"`
}

// ContextReport says what channel context the turn carried.
type ContextReport struct {
	Header       string `json:"header"` // snapshot, new, none
	Lines        int    `json:"lines"`
	Chars        int    `json:"chars"`
	DroppedSeen  int    `json:"dropped_seen"`
	DroppedBound int    `json:"dropped_bound"`
	Truncated    int    `json:"truncated"`
	OwnOmitted   int    `json:"own_omitted"`
	PromptBytes  int    `json:"prompt_bytes"`
}

// CancelResponse is POST /v1/turns/{run}/cancel.
type CancelResponse struct {
	Cancelled string `json:"cancelled"`
}

// Health is GET /v1/health.
type Health struct {
	OK       bool   `json:"ok"`
	Version  string `json:"version"`
	Pid      int    `json:"pid"`
	UptimeS  int64  `json:"uptime_seconds"`
	Live     int    `json:"live"`
	Busy     int    `json:"busy"`
	Queued   int    `json:"queued"`
	MaxLive  int    `json:"max_live"`
	Bindings int    `json:"bindings"`
}

// Session is one live agent process in GET /v1/sessions.
type Session struct {
	Channel  string         `json:"channel_id"`
	Binding  string         `json:"binding_id"`
	Pid      int            `json:"pid"`
	Native   string         `json:"native_session"`
	State    string         `json:"state"` // idle, busy
	IdleS    float64        `json:"idle_seconds"`
	Started  time.Time      `json:"started_at"`
	Turns    map[string]int `json:"turns"` // by shape
	RSSBytes int64          `json:"rss_bytes,omitempty"`
}

// Sessions is GET /v1/sessions.
type Sessions struct {
	Sessions []Session `json:"sessions"`
}

// FreshRequest is POST /v1/sessions/fresh.
type FreshRequest struct {
	Channel string `json:"channel_id"`
	Binding string `json:"binding_id"`
}

// FreshResponse says whether a process was (or, behind a running turn,
// will be) stopped.
type FreshResponse struct {
	StoppedProcess bool `json:"stopped_process"`
}

// Binding is one configured binding in GET /v1/bindings.
type Binding struct {
	ID         string `json:"id"`
	Handle     string `json:"handle"`
	Runtime    string `json:"runtime"`
	Command    string `json:"command"`
	Supervised bool   `json:"supervised"`
	Resident   bool   `json:"resident"`
	Restore    bool   `json:"restore"`
}

// Bindings is GET /v1/bindings.
type Bindings struct {
	Bindings []Binding `json:"bindings"`
}

// Author kinds of a channel message.
const (
	AuthorUser  = "user"
	AuthorAgent = "agent"
)

// Message is one channel message as the desktop app pushes it.
type Message struct {
	ID         string    `json:"id"`
	Channel    string    `json:"channel_id"`
	ThreadRoot string    `json:"thread_root_id,omitempty"`
	Author     string    `json:"author"`
	AuthorKind string    `json:"author_kind"` // AuthorUser or AuthorAgent
	CreatedAt  time.Time `json:"created_at"`
	Body       string    `json:"body"`
}

// MessagesRequest is POST /v1/messages: one message, a batch or a backfill.
type MessagesRequest struct {
	Messages []Message `json:"messages"`
}

// MessagesResponse counts what a push did.
type MessagesResponse struct {
	Added      int `json:"added"`
	Duplicates int `json:"duplicates"`
}

// LogLevel is GET and PUT /v1/log/level.
type LogLevel struct {
	Level string `json:"level"`
}

// ErrorBody is the body of every error response.
type ErrorBody struct {
	Error Error `json:"error"`
}

// Error is an error the daemon reports: a stable code and a message that
// says what failed and what to do.
type Error struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

// Error codes. The HTTP status that carries each is in docs/API.md.
const (
	CodeBadRequest       = "bad_request"
	CodeInvalidMessage   = "invalid_message"
	CodeForbidden        = "forbidden"
	CodeForbiddenOrigin  = "forbidden_origin"
	CodeUnknownBinding   = "unknown_binding"
	CodeUnknownRun       = "unknown_run"
	CodeNotFound         = "not_found"
	CodeMethodNotAllowed = "method_not_allowed"
	CodeRunInUse         = "run_in_use"
	CodePayloadTooLarge  = "payload_too_large"
	CodeCancelled        = "cancelled"
	CodeAgentStartFailed = "agent_start_failed"
	CodeAgentCrashed     = "agent_crashed"
	CodeAgentFailed      = "agent_failed"
	CodeAgentBackoff     = "agent_backoff"
	CodeQueueFull        = "queue_full"
	CodeQueueTimeout     = "queue_timeout"
	CodeShuttingDown     = "shutting_down"
	CodeTimeout          = "timeout"
	CodeInternal         = "internal"

	// Agent tool endpoints.
	CodeToolsDisabled     = "tools_disabled"
	CodeMissingCapability = "missing_capability"
	CodeBadCapability     = "bad_capability"
	CodeOutOfScope        = "out_of_scope"
	CodeBadCursor         = "bad_cursor"
)
