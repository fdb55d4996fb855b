// Package apitype holds every request, response, error and stream event of
// residentd's local API (HTTP/1.1 + JSON under /v1 on a Unix socket). It
// imports nothing but the standard library, so a desktop app or another Go
// module can speak the API without linking the daemon.
package apitype

import (
	"encoding/json"
	"sync"
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
	// Author is the chat's user id of the person who wrote the mention
	// (optional): a binding whose approvers are "author" lets only that
	// person answer the run's permission and elicitation requests.
	Author string `json:"author,omitempty"`
	// *TraceContext is the client's W3C trace context, its fields inline
	// (the HTTP headers of the same names win); nil when it sent none. A
	// pointer keeps the request small enough for the daemon's closures
	// to copy (no allocation per turn).
	*TraceContext
}

// TraceContext is a W3C trace context: the run's trace continues the
// client's.
type TraceContext struct {
	Traceparent string `json:"traceparent,omitempty"`
	Tracestate  string `json:"tracestate,omitempty"`
}

// Trace is the request's trace context ("" for none).
func (r TurnRequest) Trace() (traceparent, tracestate string) {
	if r.TraceContext == nil {
		return "", ""
	}
	return r.Traceparent, r.Tracestate
}

// Agent is one agent present in the channel, as the mention payload lists it.
type Agent struct {
	Handle    string `json:"handle"`
	Reachable bool   `json:"reachable"`
}

// Event kinds of a run's NDJSON stream, in the order they can arrive.
const (
	EventQueued             = "queued"              // the run waits: Reason and Position; sent again as it moves up
	EventRestoring          = "restoring"           // the run's new process is reopening the key's saved session: Method (resume, load) on Native and Pid, Result once a way did not reopen it; "new" after the ways failed or timed out, SetAside the session kept
	EventStarted            = "started"             // the run has its process: Shape, Native, Pid
	EventUpdate             = "update"              // one update from the agent: Update
	EventPermissionRequest  = "permission_request"  // the agent asks a person: Permission; answer it with POST /v1/runs/{id}/permissions/{request}
	EventPermissionDecision = "permission_decision" // a permission request was answered: Decision
	EventElicitationRequest = "elicitation_request" // the agent asks a person to fill in a form: Elicitation; answer it with POST /v1/runs/{id}/elicitations/{request}
	EventElicitationAnswer  = "elicitation_answer"  // an elicitation request was answered (accepted, declined or cancelled): Elicited
	EventBudget             = "budget"              // the turn's cost took a daily budget to its warning share or past it: Budget
	// EventInterrupted: the daemon stopped (clean or killed) while attempt
	// Attempt was in flight; the run goes on as attempt Attempt+1 (queued,
	// started, ...) when its binding retries interrupted runs, else it
	// ends with error code interrupted.
	EventInterrupted = "interrupted"
	EventDone        = "done"  // the run succeeded; always the last event
	EventError       = "error" // the run failed; always the last event
	// EventKeepalive is a stream line, not an event of the run: it carries
	// no Seq and is never replayed. It goes out while a run waits or its
	// agent is quiet, so a client can tell a live stream from a dead one.
	EventKeepalive = "keepalive"
)

// Why a queued run waits.
const (
	QueueKeyBusy = "key_busy" // another run holds the (channel, binding) session; runs on one key go in order
	QueueNoSlot  = "no_slot"  // every agent slot is taken by a running turn
)

// Answered is one mention a turn answered.
type Answered struct {
	RunID     string `json:"run_id"`
	MessageID string `json:"message_id,omitempty"`
}

// Event is one line of a run's stream. Seq numbers a run's events from 1,
// so a client that lost its connection re-attaches with
// GET /v1/runs/{id}/events?after=SEQ.
type Event struct {
	Event string    `json:"event"`
	RunID string    `json:"run_id,omitempty"`
	Seq   int64     `json:"seq,omitempty"`
	At    time.Time `json:"at,omitzero"`

	// queued
	Reason   string `json:"reason,omitempty"`
	Position int    `json:"position,omitempty"` // 1 is next in line

	// started (the attempt it begins, from 1), interrupted (the attempt
	// that was in flight)
	Attempt int `json:"attempt,omitempty"`
	// restoring
	Method string `json:"method,omitempty"`
	// Result (restoring): how the way Method ended when it did not reopen
	// the session (see the Restore* constants); Message says why.
	Result string `json:"result,omitempty"`
	// SetAside (restoring new): the key's saved session, kept for its next
	// restore though this turn goes on a new session.
	SetAside string `json:"set_aside,omitempty"`

	// started, done
	Shape  string `json:"shape,omitempty"`
	Native string `json:"native_session,omitempty"`
	Pid    int    `json:"pid,omitempty"`

	Update     *Update             `json:"update,omitempty"`
	Permission *PermissionRequest  `json:"permission,omitempty"`
	Decision   *PermissionDecision `json:"decision,omitempty"`
	// Elicitation (elicitation_request) and Elicited (elicitation_answer).
	Elicitation *ElicitationRequest `json:"elicitation,omitempty"`
	Elicited    *ElicitationAnswer  `json:"elicited,omitempty"`
	Budget      *Budget             `json:"budget,omitempty"`

	// done
	StopReason string         `json:"stop_reason,omitempty"`
	Text       string         `json:"text,omitempty"`
	Watermark  string         `json:"watermark,omitempty"` // see the Watermark* constants
	Context    *ContextReport `json:"context,omitempty"`
	Usage      *Usage         `json:"usage,omitempty"`
	// UsageSource says where the turn's tokens came from (UsageSource*):
	// UsageSourceNone when the agent reported none (usage is "unknown",
	// or carries a cost alone).
	UsageSource string `json:"usage_source,omitempty"`
	// IdleGapS is the time since the key's previous turn ended, in seconds;
	// absent for the key's first turn in this daemon's run.
	IdleGapS *float64 `json:"idle_gap_seconds,omitempty"`
	// Answers lists every mention a coalesced turn answered (its own
	// first), so the app can thread the reply to each.
	Answers []Answered `json:"answers,omitempty"`
	// AnsweredBy, in the done or error of a mention that was coalesced
	// into another run's turn: that run, whose done has the reply.
	AnsweredBy string `json:"answered_by,omitempty"`

	// error
	Code    string `json:"code,omitempty"`
	Message string `json:"message,omitempty"`
}

// What a done event says of the turn's watermark.
const (
	WatermarkCommitted = "committed" // what the turn showed is remembered
	WatermarkNone      = "none"      // nothing to remember, or a binding that keeps no session
	WatermarkFailed    = "failed"    // the run succeeded but the commit did not; the next turn shows those lines again
)

// Update is one session/update the agent sent during the turn. Kind says
// which of the typed fields is set; Raw is the agent's update as it sent it.
type Update struct {
	Kind     string        `json:"kind"`
	Text     string        `json:"text,omitempty"` // message and thought chunks; a tool call's title
	ToolCall *ToolCall     `json:"tool_call,omitempty"`
	Plan     *Plan         `json:"plan,omitempty"`
	Context  *ContextUsage `json:"context_usage,omitempty"`
	// Notice: what the agent wants a person to see apart from its reply.
	Notice *Notice `json:"notice,omitempty"`
	// Compaction: the agent compacting its history, and its summary.
	Compaction *Compaction `json:"compaction,omitempty"`
	// Subagent is the session id of the agent's subagent that sent this
	// update (the run is its parent's); empty for the session's own.
	Subagent string          `json:"subagent_session,omitempty"`
	Raw      json.RawMessage `json:"raw,omitempty"`
}

// Notice is an agent's notice: a warning, an error or news a person should
// see apart from the reply (a rate limit, a hook that blocked a tool).
type Notice struct {
	Severity    string `json:"severity"` // info, warning, error (as the agent says)
	Title       string `json:"title"`
	Description string `json:"description,omitempty"`
}

// Compaction is one step of the agent compacting its history.
type Compaction struct {
	ID      string `json:"id,omitempty"`
	Status  string `json:"status"`            // in_progress, completed, failed, cancelled
	Summary string `json:"summary,omitempty"` // what the compacted history was, as the agent summarised it
}

// Update kinds.
const (
	UpdateMessage    = "agent_message_chunk"
	UpdateThought    = "agent_thought_chunk"
	UpdateToolCall   = "tool_call"         // ToolCall: a new tool call
	UpdateToolUpdate = "tool_call_update"  // ToolCall: the fields that changed
	UpdatePlan       = "plan"              // Plan: the agent's whole current plan
	UpdateUsage      = "usage_update"      // Context: the session's context window use
	UpdateNotice     = "notice"            // Notice: severity, title, description
	UpdateCompaction = "compaction_update" // Compaction: the agent compacting its history, with its summary
	UpdateOther      = "other"             // anything else; see Raw
)

// ToolCall is a tool call the agent made, or the part of it that changed.
type ToolCall struct {
	ID        string     `json:"id"`
	Title     string     `json:"title,omitempty"`
	Kind      string     `json:"kind,omitempty"`   // read, edit, delete, move, search, execute, think, fetch, other
	Status    string     `json:"status,omitempty"` // pending, in_progress, completed, failed
	Locations []Location `json:"locations,omitempty"`
}

// Location is a file a tool call touches.
type Location struct {
	Path string `json:"path"`
	Line *int   `json:"line,omitempty"`
}

// Plan is the agent's plan for the turn.
type Plan struct {
	Entries []PlanEntry `json:"entries"`
}

// PlanEntry is one step of a plan.
type PlanEntry struct {
	Content  string `json:"content"`
	Priority string `json:"priority,omitempty"` // high, medium, low
	Status   string `json:"status,omitempty"`   // pending, in_progress, completed
}

// ContextUsage is how much of its context window the session uses.
type ContextUsage struct {
	Used int64 `json:"used"`
	Size int64 `json:"size"`
}

// PermissionRequest is the agent asking whether it may make a tool call.
type PermissionRequest struct {
	ID        string             `json:"id"`
	ToolCall  ToolCall           `json:"tool_call"`
	Options   []PermissionOption `json:"options"`
	ExpiresAt time.Time          `json:"expires_at"` // rejected automatically when nobody answers by then
}

// PermissionOption is one of the agent's own answers to a request.
type PermissionOption struct {
	ID   string `json:"id"`
	Name string `json:"name"`
	Kind string `json:"kind"` // allow_once, allow_always, reject_once, reject_always
}

// Who decided a permission request.
const (
	DecidedByPolicy  = "policy"  // the binding's permission policy answered without asking
	DecidedByPerson  = "person"  // a client answered the permission_request
	DecidedByTimeout = "timeout" // nobody answered within the binding's permission_timeout: rejected
	DecidedByCancel  = "cancel"  // the run was cancelled while the request waited
	DecidedByLimit   = "limit"   // the run already had runs.pending_permissions requests waiting: rejected at once, never put to a person
	// DecidedByUnsupported: an elicitation whose form is outside the
	// schema subset residentd checks, cancelled at once.
	DecidedByUnsupported = "unsupported"
)

// PermissionDecision says how a permission request was answered.
type PermissionDecision struct {
	RequestID string `json:"request_id,omitempty"` // set for requests that were asked
	Tool      string `json:"tool"`                 // the tool call's title
	OptionID  string `json:"option_id,omitempty"`  // the option chosen; empty when cancelled
	Kind      string `json:"kind"`                 // the chosen option's kind, or "cancelled"
	DecidedBy string `json:"decided_by"`
	// AnsweredBy is the chat's user id of the person who answered
	// (decided_by person), when the answer named one.
	AnsweredBy string `json:"answered_by,omitempty"`
}

// PermissionAnswer is POST /v1/runs/{id}/permissions/{request}.
type PermissionAnswer struct {
	OptionID string `json:"option_id"`
	// AnsweredBy is the chat's user id of the person answering; a binding
	// whose approvers are not "any" requires it.
	AnsweredBy string `json:"answered_by,omitempty"`
}

// PermissionAnswered acknowledges an answer.
type PermissionAnswered struct {
	RunID      string `json:"run_id"`
	RequestID  string `json:"request_id"`
	OptionID   string `json:"option_id"`
	AnsweredBy string `json:"answered_by,omitempty"`
}

// ElicitationRequest is the agent asking a person to fill in a form
// (ACP's elicitation/create, form mode): Schema is the form as the agent
// sent it, a flat JSON Schema object (string, number, integer, boolean,
// enum and multi-select properties; required).
type ElicitationRequest struct {
	ID         string          `json:"id"`
	Message    string          `json:"message"`
	Schema     json.RawMessage `json:"requested_schema"`
	ToolCallID string          `json:"tool_call_id,omitempty"` // the tool call the form belongs to, when the agent named one
	ExpiresAt  time.Time       `json:"expires_at"`             // cancelled automatically when nobody answers by then
}

// Elicitation answer actions, as ACP names them.
const (
	ElicitAccept  = "accept"  // the form filled in: Content
	ElicitDecline = "decline" // the person refused
	ElicitCancel  = "cancel"  // dismissed: nobody answered, the run ended, or the answer said so
)

// ElicitationAnswer is POST /v1/runs/{id}/elicitations/{request}, and how
// an elicitation request was answered (the elicitation_answer event).
type ElicitationAnswer struct {
	RequestID string `json:"request_id,omitempty"` // set in the event
	Action    string `json:"action"`               // accept, decline or cancel
	// Content is the filled-in form (accept only); it must fit the
	// request's requested_schema.
	Content    map[string]any `json:"content,omitempty"`
	DecidedBy  string         `json:"decided_by,omitempty"` // set in the event: person, timeout, cancel or limit
	AnsweredBy string         `json:"answered_by,omitempty"`
}

// ElicitationAnswered acknowledges an answer.
type ElicitationAnswered struct {
	RunID      string `json:"run_id"`
	RequestID  string `json:"request_id"`
	Action     string `json:"action"`
	AnsweredBy string `json:"answered_by,omitempty"`
}

// Run states.
const (
	RunQueued    = "queued"    // waiting for its session or a slot
	RunStarting  = "starting"  // waits in no queue and has not started: asking for its session, or its process is being readied (spawn, restore, options)
	RunRunning   = "running"   // its agent is working on it
	RunSucceeded = "succeeded" // ended with done
	RunFailed    = "failed"    // ended with error
	RunCancelled = "cancelled" // ended with error code cancelled or shutting_down
	// RunInterrupted: ended with error code interrupted, in flight when the
	// daemon stopped and not retried (the binding's retry_interrupted is off).
	RunInterrupted = "interrupted"
)

// Run is one run in GET /v1/runs and GET /v1/runs/{id}.
type Run struct {
	ID            string     `json:"run_id"`
	Kind          string     `json:"kind"` // see the RunKind* constants
	State         string     `json:"state"`
	Channel       string     `json:"channel_id"`
	Binding       string     `json:"binding_id"`
	MessageID     string     `json:"message_id,omitempty"`
	Shape         string     `json:"shape,omitempty"`
	QueueReason   string     `json:"queue_reason,omitempty"`
	QueuePosition int        `json:"queue_position,omitempty"`
	CreatedAt     time.Time  `json:"created_at"`
	StartedAt     *time.Time `json:"started_at,omitempty"`
	EndedAt       *time.Time `json:"ended_at,omitempty"`
	LastSeq       int64      `json:"last_seq"`
	// Attempt is the number of attempts started: 0 before the first
	// starts, 2 or more after an interrupted attempt was retried.
	Attempt int `json:"attempt,omitempty"`
	// Pending lists the permission requests waiting for an answer.
	Pending []PermissionRequest `json:"pending_permissions,omitempty"`
	// PendingElicitations lists the elicitation requests waiting for an
	// answer.
	PendingElicitations []ElicitationRequest `json:"pending_elicitations,omitempty"`
	// Author is the mention's author, as the turn request named it.
	Author string `json:"author,omitempty"`
	// Result is the run's final done or error event once it ended.
	Result *Event `json:"result,omitempty"`
	// TraceID and SpanID name the run's root span when the daemon traces
	// (OpenTelemetry, hex); an agent run's span is a child of the prompt
	// span of the turn before it.
	TraceID string `json:"trace_id,omitempty"`
	SpanID  string `json:"span_id,omitempty"`
}

// ShapeAgent is the shape of an agent run: output of the key's process
// that no prompt asked for.
const ShapeAgent = "agent"

// Run kinds.
const (
	RunKindTurn  = "turn"  // a mention's turn (POST /v1/turns)
	RunKindAgent = "agent" // what an agent said with no prompt in flight: background work ending, a turn it started itself
)

// FeedEvent is one line of GET /v1/events: a run started or ended. Seq
// numbers the daemon's announcements from 1 (in this daemon's run), so a
// client re-attaches with ?after=SEQ.
type FeedEvent struct {
	Event     string    `json:"event"` // run_started, run_ended, keepalive
	Seq       int64     `json:"seq,omitempty"`
	At        time.Time `json:"at,omitzero"`
	RunID     string    `json:"run_id,omitempty"`
	Kind      string    `json:"kind,omitempty"` // see the RunKind* constants
	Channel   string    `json:"channel_id,omitempty"`
	Binding   string    `json:"binding_id,omitempty"`
	MessageID string    `json:"message_id,omitempty"`
	State     string    `json:"state,omitempty"`    // the run's state: at its end succeeded, failed or cancelled
	TraceID   string    `json:"trace_id,omitempty"` // the run's trace, when the daemon traces
	SpanID    string    `json:"span_id,omitempty"`  // the run's root span
}

// Feed event kinds.
const (
	FeedRunStarted = "run_started"
	FeedRunEnded   = "run_ended"
)

// Runs is GET /v1/runs.
type Runs struct {
	Runs []Run `json:"runs"`
}

// EventsGone is the body of a 410 from GET /v1/runs/{id}/events when the
// events after the requested sequence number fell out of the run's buffer.
type EventsGone struct {
	Error Error `json:"error"`
	Run   Run   `json:"run"`
}

// Version is GET /v1/version.
type Version struct {
	Version      string   `json:"version"`     // the daemon's build
	API          string   `json:"api_version"` // "1": see docs/API.md for what /v1 promises
	Capabilities []string `json:"capabilities"`
}

// Capabilities a daemon may list in Version: each names a feature /v1
// gained after its first version, which a client may test for before it
// relies on it. docs/API.md ("Capabilities") says what each promises.
const (
	CapabilityRuns        = "runs"        // runs outlive connections; GET /v1/runs, re-attach with after=SEQ
	CapabilityPermissions = "permissions" // permission_request events and answers
	CapabilityElicitation = "elicitation" // elicitation_request events and answers
	// CapabilityApprovers: answers name who answered (answered_by), and a
	// binding's approvers decide who may (403 not_an_approver).
	CapabilityApprovers = "approvers"
	CapabilityKeepalive = "keepalive" // keepalive lines on idle streams
	// CapabilityLeanStream: ?lean=true on POST /v1/turns and
	// GET /v1/runs/{run}/events sends the reply once.
	CapabilityLeanStream = "lean_stream"
	// CapabilityDurableRuns: runs survive a daemon restart (interrupted
	// event and state, attempt), and a run_id sent again with its mention
	// is that run.
	CapabilityDurableRuns = "durable_runs"
	CapabilityEventFeed   = "event_feed"   // GET /v1/events: every run's start and end
	CapabilityAgentRuns   = "agent_runs"   // runs of kind agent: what an agent says with no prompt in flight
	CapabilityEventsUntil = "events_until" // ?until=KIND on GET /v1/runs/{run}/events
	CapabilityAttachments = "attachments"  // a pushed message's attachments
	// CapabilityMessageDelete: DELETE /v1/messages/{channel}/{id}.
	CapabilityMessageDelete = "message_delete"
	// CapabilityBurstsCoalesce: a binding's bursts mode coalesce; answers
	// and answered_by in done and error.
	CapabilityBurstsCoalesce = "bursts_coalesce"
	// CapabilityBurstsSteer: a binding's bursts mode steer; answers and
	// answered_by in done and error.
	CapabilityBurstsSteer = "bursts_steer"
	// CapabilityContextHeld: held in the done event's context report.
	CapabilityContextHeld = "context_held"
	// CapabilityThreadScope: a binding's scope thread (Binding.Scope,
	// Session.ThreadRoot, thread_root_id of a start fresh, restoring fork).
	CapabilityThreadScope    = "thread_scope"
	CapabilitySessionOptions = "session_options" // GET and PUT /v1/sessions/options
	CapabilityBudgets        = "budgets"         // GET /v1/budgets, budget events, budget_exceeded
	// CapabilityExactMoney: every amount of money is a decimal string
	// (Amount), not a JSON number as before.
	CapabilityExactMoney   = "exact_money"
	CapabilityConfigReload = "config_reload" // POST /v1/config/reload
	// CapabilityTraces: W3C trace context on POST /v1/turns (headers or
	// fields), trace_id and span_id on runs and the feed when tracing.
	CapabilityTraces = "traces"
	// CapabilityAgentTools: the pushes the agent tools read (roster,
	// project, activity) and the tool endpoints (docs/TOOLS.md).
	CapabilityAgentTools = "agent_tools"
	// CapabilityWorktrees: a binding's workspace may be worktree: each key
	// works in a git worktree of its own (worktree in the sessions listing,
	// worktrees, reset_worktree in start fresh, 409
	// worktree_has_changes, the roster tool's worktrees).
	CapabilityWorktrees = "worktrees"
	// CapabilityBackgroundWork: a binding's protocol may be 2 or auto (ACP
	// v2): agent_state and background in the sessions listing, POST
	// /v1/sessions/background/cancel, restoring status.
	CapabilityBackgroundWork = "background_work"
)

// Usage is the token usage the agent reported for a turn.
type Usage struct {
	// Unknown: the agent reported no usage. It is encoded as the string
	// "unknown", never as zeros.
	Unknown          bool  `json:"-"`
	InputTokens      int64 `json:"input_tokens"`
	OutputTokens     int64 `json:"output_tokens"`
	CacheReadTokens  int64 `json:"cache_read_tokens"`
	CacheWriteTokens int64 `json:"cache_write_tokens"`
	// ThoughtTokens are the model's reasoning tokens where the agent
	// counts them apart (codex's are part of its output tokens).
	ThoughtTokens int64 `json:"thought_tokens,omitempty"`
	// Cost in Currency: the agent's own (CostSource "agent", the change of
	// the session cost it reports), or from the binding's price table
	// ("prices"); absent when neither says.
	Cost       *Amount `json:"cost,omitempty"` // exact: a decimal string
	Currency   string  `json:"currency,omitempty"`
	CostSource string  `json:"cost_source,omitempty"`
}

// UsageUnknown is how an unknown Usage is encoded.
const UsageUnknown = "unknown"

// Where a done event's usage tokens came from (Event.UsageSource).
const (
	UsageSourceResponse = "prompt_response"      // the prompt response's usage
	UsageSourceMeta     = "prompt_response_meta" // the prompt response's _meta.quota.token_count
	UsageSourceUpdates  = "usage_update"         // each model call's tokens in the agent's usage_update, summed
	UsageSourceNone     = "none"                 // the agent reported no tokens
)

// MarshalJSON encodes an unknown usage as "unknown".
func (u Usage) MarshalJSON() ([]byte, error) {
	if u.Unknown {
		return []byte(`"` + UsageUnknown + `"`), nil
	}
	type plain Usage
	return json.Marshal(plain(u))
}

// UnmarshalJSON reads an object or "unknown".
func (u *Usage) UnmarshalJSON(b []byte) error {
	if string(b) == `"`+UsageUnknown+`"` {
		*u = Usage{Unknown: true}
		return nil
	}
	// Nested in an event's decoding: a pooled decoder spares it a
	// decoding state of its own, and its target an allocation.
	d := usageDecoders.Get().(*usageDecoder)
	d.p = plainUsage{}
	err := d.lines.Decode(b, &d.p)
	p := d.p
	d.p = plainUsage{} // the next decode must not write into this one's Cost
	usageDecoders.Put(d)
	if err != nil {
		return err
	}
	*u = Usage(p)
	return nil
}

// plainUsage is Usage without its JSON methods.
type plainUsage Usage

// usageDecoder is a pooled decoder for Usage, with its target.
type usageDecoder struct {
	lines LineDecoder
	p     plainUsage
}

var usageDecoders = sync.Pool{New: func() any { return new(usageDecoder) }}

// ContextReport says what channel context the turn carried.
type ContextReport struct {
	Header       string `json:"header"` // snapshot, new, none
	Lines        int    `json:"lines"`
	Chars        int    `json:"chars"`
	DroppedSeen  int    `json:"dropped_seen"`
	DroppedBound int    `json:"dropped_bound"`
	Truncated    int    `json:"truncated"`
	OwnOmitted   int    `json:"own_omitted"`
	Known        int    `json:"known"` // carried by the prompt another way: the mention, a replayed mention, a coalesced list
	// Held are mentions waiting on the key for a later turn, left out of
	// this block as the mention is: their own turn carries them.
	Held   int `json:"held"`
	Edited int `json:"edited"` // lines marked (edited): edits of messages the session saw
	// DroppedBoundEdits are the ones of DroppedBound that are edits of
	// messages the session saw; the pointer says how many.
	DroppedBoundEdits int `json:"dropped_bound_edits"`
	// Shown are the ids of the messages the block showed, in order: what
	// the agent has now seen (a desktop app may mark them).
	Shown       []string `json:"shown"`
	PromptBytes int      `json:"prompt_bytes"`
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
	// Listeners are the daemon's listeners: the API socket and, with
	// --metrics-addr, the metrics one; a listener that could not be opened
	// or failed carries its error while the daemon serves on.
	Listeners []Listener `json:"listeners,omitempty"`
	// RestoreStopped are the bindings whose session restores failed
	// restore_failures times in a row: the daemon no longer tries them.
	RestoreStopped []RestoreStop `json:"restore_stopped,omitempty"`
	// OptionErrors are the bindings whose session options their agent
	// does not list, found at startup or at the last session start.
	OptionErrors []OptionError `json:"option_errors,omitempty"`
	// PolicyAdvisories are the bindings whose agent cannot be told their
	// permission policy (or refused the control that tells it): the agent
	// runs some tools without asking, which the policy then does not cover.
	PolicyAdvisories []PolicyAdvisory `json:"policy_advisories,omitempty"`
	// BindingCommands says for every binding whether its command is found
	// and executable, checked on each request without starting anything.
	BindingCommands []BindingCommand `json:"binding_commands"`
	// BudgetsBlind are the bindings a configured budget counts whose
	// agent's last successful turn reported no cost a budget could count.
	BudgetsBlind []BudgetBlind `json:"budgets_blind,omitempty"`
	// StorageFull is set while the filesystem holding the state file
	// refuses its writes for lack of space or quota: from the first
	// refused write until a write is stored again.
	StorageFull *StorageFull `json:"storage_full,omitempty"`
}

// StorageFull is the state file's full disk, in Health.
type StorageFull struct {
	Path          string    `json:"path"`           // the state file
	Since         time.Time `json:"since"`          // the first refused write
	RefusedWrites int64     `json:"refused_writes"` // writes refused since then
	Error         string    `json:"error"`          // the last one's error: the filesystem and its free space
}

// PolicyAdvisory is a binding whose permission policy is advisory, in
// Health.
type PolicyAdvisory struct {
	Binding string `json:"binding_id"`
	// Agent is who the agent said it is at initialize: name and version.
	Agent  string `json:"agent"`
	Policy string `json:"policy"`
	// Advisory is "policy advisory for this agent: it runs some tools
	// without asking".
	Advisory string `json:"advisory"`
	// Unasked says what the agent runs without asking, where known, or
	// why the policy's control failed.
	Unasked string `json:"unasked,omitempty"`
}

// BudgetBlind is a binding whose budgets cannot see what its turns cost,
// in Health.
type BudgetBlind struct {
	Binding string `json:"binding_id"`
	Agent   string `json:"agent"` // who the agent said it is at initialize
	// UsageSource is where the last turn's tokens came from
	// (UsageSource*): none when the agent reported none.
	UsageSource string `json:"usage_source"`
	Reason      string `json:"reason"` // why no cost: no usage at all, or tokens and no prices
}

// BindingCommand is whether a binding's agent can be started, in Health.
type BindingCommand struct {
	Binding   string `json:"binding_id"`
	Command   string `json:"command"`
	Path      string `json:"path,omitempty"` // the executable it resolves to
	Startable bool   `json:"startable"`
	Problem   string `json:"problem,omitempty"` // why it cannot start
}

// OptionError is a binding whose session options failed, in Health.
type OptionError struct {
	Binding string `json:"binding_id"`
	Error   string `json:"error"`
}

// RestoreStop is a binding whose restores stopped, in Health.
type RestoreStop struct {
	Binding   string `json:"binding_id"`
	Failures  int    `json:"failures"`
	LastError string `json:"last_error"`
}

// Listener is one of the daemon's listeners in Health.
type Listener struct {
	Name  string `json:"name"` // api or metrics
	Addr  string `json:"addr"`
	Error string `json:"error,omitempty"` // why it does not serve; empty while it does
}

// Session is one live agent process in GET /v1/sessions.
type Session struct {
	Channel string `json:"channel_id"`
	Binding string `json:"binding_id"`
	// ThreadRoot is set on a thread's own session (a binding of scope
	// thread): the thread's root message id.
	ThreadRoot string         `json:"thread_root_id,omitempty"`
	Pid        int            `json:"pid"`
	Native     string         `json:"native_session"`
	State      string         `json:"state"` // idle, busy, stopping
	IdleS      float64        `json:"idle_seconds"`
	Started    time.Time      `json:"started_at"`
	Turns      map[string]int `json:"turns"` // by shape
	// RSSBytes is the agent's memory: its cgroup's (its whole tree) when
	// MemorySource is "cgroup", the process's resident set when "rss".
	RSSBytes     int64  `json:"rss_bytes,omitempty"`
	MemorySource string `json:"memory_source,omitempty"`
	// RestoredBy is how the process reopened the key's saved session:
	// "resume" or "load"; "fork" for a thread's session forked from its
	// channel's; empty for a new session.
	RestoredBy string `json:"restored_by,omitempty"`
	// Working is set while the agent works with no turn in flight
	// (background work it reported, output between prompts): the process
	// is then neither reaped idle nor evicted, up to background_limit.
	Working bool `json:"working,omitempty"`
	// AgentState is the session's work state as an ACP v2 agent last
	// reported it (running, idle, requires_action); empty when it
	// reported none.
	AgentState string `json:"agent_state,omitempty"`
	// Background is the work an ACP v2 agent lists as still running in
	// the session (terminals, tool calls, subagents); absent when it lists
	// none or never reported any.
	Background []BackgroundItem `json:"background,omitempty"`
	// RestoreStopped is set when the binding's restores stopped (see
	// Health.RestoreStopped): its next processes start cold.
	RestoreStopped bool `json:"restore_stopped,omitempty"`
	// Restore is how the process came to its session when its key had a
	// saved one: each way tried and how it ended, and what was kept.
	Restore *RestoreReport `json:"restore,omitempty"`
	// Usage is what the process's turns have used so far ("unknown" when
	// its agent reports nothing).
	Usage *Usage `json:"usage,omitempty"`
	// Options are the session's config options (model, mode, …) with their
	// current values, as the agent lists them.
	Options map[string]string `json:"options,omitempty"`
	// Residency is what the residency policy knows of the process and its
	// reason to keep it.
	Residency *SessionResidency `json:"residency,omitempty"`
	// Worktree is the key's own git worktree the session works in (a
	// binding with workspace worktree); absent when it works in the
	// binding's dir.
	Worktree *Worktree `json:"worktree,omitempty"`
}

// SessionResidency is what the daemon's residency policy knows of one
// live process: its provider prompt cache (the daemon's estimate), its
// context, and why the policy keeps it now.
type SessionResidency struct {
	Policy string `json:"policy"` // the daemon's residency setting: timer, cache, …
	// Keep is the policy's current reason to keep the process (or to let
	// it go at the reaper's next look): "in a turn" while busy.
	Keep string `json:"keep"`
	// CacheTTLS is the TTL the process's cache is taken to have (its
	// binding's cache_ttl when it started), in seconds.
	CacheTTLS float64 `json:"cache_ttl_seconds"`
	// LastRequest is when the agent last sent its provider a request as
	// far as the daemon sees (its last prompt's end, or its last output
	// between prompts); CacheExpires is LastRequest plus the TTL. Both are
	// absent before its first prompt.
	LastRequest  *time.Time `json:"last_request_at,omitempty"`
	CacheExpires *time.Time `json:"cache_expires,omitempty"`
	// ContextTokens is the session's context: what the agent's last
	// usage_update said (ContextSource "agent"), else a quarter of the
	// bytes its prompts and replies carried in this process ("estimate").
	ContextTokens int64  `json:"context_tokens"`
	ContextSource string `json:"context_source"`
}

// MaxWorktreeFiles bounds the changed files a Worktree lists.
const MaxWorktreeFiles = 50

// Worktree is one key's git worktree: in a session's row, in the sessions
// listing's worktrees and in the roster tool's answer.
type Worktree struct {
	Channel    string `json:"channel_id"`
	Binding    string `json:"binding_id"`
	ThreadRoot string `json:"thread_root_id,omitempty"`
	// Path is its folder, the cwd of the key's sessions; Branch the branch
	// checked out there; Repository the repository it is a worktree of
	// (the binding's dir); Base the commit it was made at.
	Path       string    `json:"path"`
	Branch     string    `json:"branch"`
	Repository string    `json:"repository"`
	Base       string    `json:"base"`
	Created    time.Time `json:"created_at"`
	// Changes counts the uncommitted changes git status lists (modified,
	// added, deleted, renamed and untracked files); Changed lists the first
	// MaxWorktreeFiles of them as git status --porcelain does ("XY path").
	Changes int      `json:"changes"`
	Changed []string `json:"changed,omitempty"`
	// StatusError says why git status did not answer (within its bound,
	// or the folder is gone): Changes is unknown then.
	StatusError string `json:"status_error,omitempty"`
	// BindingRemoved: its binding is no longer configured; it was left in
	// place because it has uncommitted changes (or its removal failed).
	BindingRemoved bool `json:"binding_removed,omitempty"`
}

// WorktreeReset is what start fresh with reset_worktree did to the key's
// worktree.
type WorktreeReset struct {
	Path   string `json:"path"`
	Branch string `json:"branch"`
	// Removed: the folder was removed (false when it was gone already).
	Removed bool `json:"removed"`
	// BranchKept names the branch that keeps the commits the worktree's
	// branch had that the repository's HEAD has not (<branch>.reset-<UTC
	// time>); absent when every commit was in HEAD and the branch was
	// deleted.
	BranchKept string `json:"branch_kept,omitempty"`
}

// SessionOptions is GET and PUT /v1/sessions/options: a key's own session
// options (set through the API) and those in effect for it (the binding's
// session_options with the key's on top).
type SessionOptions struct {
	Channel   string            `json:"channel_id"`
	Binding   string            `json:"binding_id"`
	Options   map[string]string `json:"options"`
	Effective map[string]string `json:"effective"`
}

// SessionOptionsRequest is PUT /v1/sessions/options: it replaces the
// key's own options ({} clears them); the key's next turn applies them.
type SessionOptionsRequest struct {
	Channel string            `json:"channel_id"`
	Binding string            `json:"binding_id"`
	Options map[string]string `json:"options"`
}

// Budget is one daily budget: in GET /v1/budgets, and in a budget event
// when a turn's cost took it to Level.
type Budget struct {
	Scope    string    `json:"scope"` // binding or channel
	ID       string    `json:"id"`
	Level    string    `json:"level"` // ok, warning (at warn_at of the limit), exceeded (new turns refused)
	Spent    Amount    `json:"spent"` // exact: a decimal string
	Limit    Amount    `json:"limit"`
	Currency string    `json:"currency"`
	ResetsAt time.Time `json:"resets_at"`
}

// Budgets is GET /v1/budgets: the budget day and every budget's spending.
type Budgets struct {
	Day      string    `json:"day"` // the budget day, YYYY-MM-DD in the budgets' time zone
	ResetsAt time.Time `json:"resets_at"`
	Currency string    `json:"currency"`
	Budgets  []Budget  `json:"budgets"`
}

// RestoreReport is how a process came to its session when its key had a
// saved one, in the sessions listing.
type RestoreReport struct {
	// Steps are the ways tried, in order ([] when none was: Message says
	// why).
	Steps []RestoreStep `json:"steps"`
	// SetAside is the key's saved session this process did not reopen
	// though the agent did not say it was gone: kept, and tried first by
	// the key's next restore.
	SetAside string `json:"set_aside,omitempty"`
	// Forgotten are the saved sessions the agent said it does not know.
	Forgotten []string `json:"forgotten,omitempty"`
	// CaughtUp is how many stored turns the session reopened had missed
	// (another session answered them while it was set aside): its first
	// turn carried them.
	CaughtUp int    `json:"caught_up,omitempty"`
	Message  string `json:"message,omitempty"`
}

// RestoreStep is one way of reopening a saved session, and how it ended.
type RestoreStep struct {
	Method  string  `json:"method"`         // resume, load, or status (session/status asked first)
	Native  string  `json:"native_session"` // the saved session
	Pid     int     `json:"pid"`            // the process it ran on
	Result  string  `json:"result"`         // see the Restore* constants
	Message string  `json:"message,omitempty"`
	Seconds float64 `json:"seconds"`
}

// How a way of reopening a saved session ended.
const (
	RestoreOK = "ok" // reopened
	// RestoreTimeout: the agent sent nothing of the session for
	// restore_timeout (or the way ran ten times that in all): given up,
	// and its process stopped.
	RestoreTimeout = "timeout"
	RestoreFailed  = "failed"  // the agent answered with an error
	RestoreUnknown = "unknown" // the agent answered that it does not know the session
	RestoreExited  = "exited"  // the agent exited
	// RestoreOpen: session/status said another process has the session
	// open (reported; the ladder goes on).
	RestoreOpen = "open"
)

// Spare is an agent process spawned and initialized ahead for a binding,
// with no key yet: a cold or restored turn of the binding takes it.
type Spare struct {
	Binding string    `json:"binding_id"`
	Pid     int       `json:"pid"`
	Started time.Time `json:"started_at"`
	// IdleS is the seconds since it started (a spare has had no turn).
	IdleS float64 `json:"idle_seconds"`
	// RSSBytes and MemorySource: as in Session.
	RSSBytes     int64  `json:"rss_bytes,omitempty"`
	MemorySource string `json:"memory_source,omitempty"`
}

// Sessions is GET /v1/sessions.
type Sessions struct {
	Sessions []Session `json:"sessions"`
	// Spares are the bindings' spare processes, by binding then age.
	Spares []Spare `json:"spares"`
	// Worktrees are every key's git worktree (bindings with workspace
	// worktree), live or not, by key.
	Worktrees []Worktree `json:"worktrees"`
}

// FreshRequest is POST /v1/sessions/fresh.
type FreshRequest struct {
	Channel string `json:"channel_id"`
	Binding string `json:"binding_id"`
	// ThreadRoot names a thread's own session (a binding of scope
	// thread); absent or null: the channel's.
	ThreadRoot *string `json:"thread_root_id,omitempty"`
	// ResetWorktree also resets the key's git worktree: removed (refused,
	// 409 worktree_has_changes, when it has uncommitted changes), so the
	// next session gets a new one from the repository's HEAD. Without it
	// start fresh keeps the worktree as it is.
	ResetWorktree bool `json:"reset_worktree,omitempty"`
}

// BackgroundItem is one piece of work an ACP v2 agent lists as still
// running in a session after its turn.
type BackgroundItem struct {
	Type string `json:"type"`    // terminal, tool_call, subagent (or a newer version's)
	ID   string `json:"item_id"` // its terminalId, toolCallId or subagent sessionId
	// Cancelable: the agent lets it be cancelled on its own
	// (POST /v1/sessions/background/cancel).
	Cancelable bool `json:"cancelable"`
}

// BackgroundCancelRequest asks the agent of a key's live process to cancel
// one item of its background work (terminal/cancel, tool_call/cancel).
type BackgroundCancelRequest struct {
	Channel    string  `json:"channel_id"`
	Binding    string  `json:"binding_id"`
	ThreadRoot *string `json:"thread_root_id,omitempty"`
	Type       string  `json:"type"`    // terminal or tool_call
	Item       string  `json:"item_id"` // as the session's background list names it
}

// BackgroundCancelResponse says the agent accepted the cancel; the
// session's background list leaves the item out once the agent reports it
// ended.
type BackgroundCancelResponse struct {
	Native string `json:"native_session"`
	Type   string `json:"type"`
	Item   string `json:"item_id"`
}

// FreshResponse says whether a process was (or, behind a running turn,
// will be) stopped.
type FreshResponse struct {
	StoppedProcess bool `json:"stopped_process"`
	// Worktree is what reset_worktree did; absent without it, or when the
	// key had no worktree.
	Worktree *WorktreeReset `json:"worktree,omitempty"`
}

// ConfigReload is the answer of POST /v1/config/reload: what the reloaded
// config file changed and how each change took effect.
type ConfigReload struct {
	File     string          `json:"file"`     // the config file read again
	Bindings []BindingReload `json:"bindings"` // every binding of the old or the new config, by id
	// Settings are the daemon settings that changed, each with its class:
	// at_once, new_processes, or restart (not applied; see Restart).
	Settings []ReloadChange `json:"settings"`
	// Restart lists the changed settings that take effect only when the
	// daemon restarts; the running values stay.
	Restart []string `json:"restart"`
}

// Reload actions of a binding.
const (
	ReloadUnchanged      = "unchanged"         // no setting differs; its processes are untouched
	ReloadAppliedNext    = "applied_next_turn" // every change is taken by the key's live process at its next turn
	ReloadReplaceProcess = "replace_process"   // the keys' live processes are replaced at their next turn
	ReloadNewSession     = "new_session"       // sessions that open from now on get the change; live and saved ones keep theirs
	ReloadRemoved        = "removed"           // its processes stop after their turn; new turns are refused with unknown_binding
	ReloadAdded          = "added"             // new: its first turn starts its first process
)

// BindingReload is what a reload did to one binding.
type BindingReload struct {
	Binding string `json:"binding_id"`
	// Action is the strongest of its changes: replace_process, then
	// new_session, then applied_next_turn.
	Action  string         `json:"action"`
	Changes []ReloadChange `json:"changes"` // the binding's fields that differ, with how each takes effect
	// Processes counts the binding's live processes when the reload was
	// applied (of a removed binding, those stopped or to stop after their
	// turn).
	Processes int `json:"processes"`
}

// ReloadChange is one changed setting and how it takes effect:
// next_turn, replace_process or new_session for a binding's field; at_once,
// new_processes or restart for a daemon setting.
type ReloadChange struct {
	Setting string `json:"setting"`
	Class   string `json:"class"`
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
	// RestoreMethod: auto (resume, else load), resume or load.
	RestoreMethod string `json:"restore_method"`
	// BriefPlacement: framing (with the system framing, a one-line
	// reminder on warm turns) or turn (in every user turn).
	BriefPlacement string            `json:"brief_placement"`
	SessionOptions map[string]string `json:"session_options,omitempty"`
	// Scope: channel (one session per channel) or thread (a thread's
	// mentions have a session of their own).
	Scope string `json:"scope"`
	// Workspace: shared (every key in the binding's dir) or worktree
	// (each key in a git worktree of its own).
	Workspace string `json:"workspace"`
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
	ID         string `json:"id"`
	Channel    string `json:"channel_id"`
	ThreadRoot string `json:"thread_root_id,omitempty"`
	Author     string `json:"author"`
	AuthorKind string `json:"author_kind"` // AuthorUser or AuthorAgent
	// BindingID marks an agent's own post with the binding that wrote it;
	// optional (see the README on own posts).
	BindingID string    `json:"binding_id,omitempty"`
	CreatedAt time.Time `json:"created_at"`
	Body      string    `json:"body"`
	// Attachments are files the message carries (see Attachment).
	Attachments []Attachment `json:"attachments,omitempty"`
}

// Attachment is one file a pushed message carries: by Path, a file inside
// the daemon's attachments folder (config attachments.dir; relative to it
// or absolute), or inline as Data (standard base64), never both. Type is
// its media type (image/png, text/plain, application/pdf, …), checked
// against its content; Name defaults to the path's last element.
type Attachment struct {
	Name string `json:"name,omitempty"`
	Type string `json:"type"`
	Path string `json:"path,omitempty"`
	Data string `json:"data,omitempty"`
}

// MessagesRequest is POST /v1/messages: one message, a batch or a backfill.
type MessagesRequest struct {
	Messages []Message `json:"messages"`
}

// MessagesResponse counts what a push did.
type MessagesResponse struct {
	Added      int `json:"added"`
	Edited     int `json:"edited"`     // known ids pushed with a new body; a second body of an id in the same batch too
	Duplicates int `json:"duplicates"` // known ids with the same body, deleted ids, and messages retention already dropped
}

// MessageDeleted is DELETE /v1/messages/{channel}/{id}.
type MessageDeleted struct {
	Channel string `json:"channel_id"`
	Deleted string `json:"deleted"` // the message id
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

// MaxIDBytes is the longest id the API takes, in bytes of UTF-8: channel,
// binding, message, thread root, run, permission and elicitation request,
// option, project and user (author, answered_by) ids. An id is valid UTF-8 without control characters; anything
// else is refused with CodeInvalidID naming the field.
const MaxIDBytes = 256

// Error codes. The HTTP status that carries each is in docs/API.md.
const (
	CodeBadRequest        = "bad_request"
	CodeInvalidMessage    = "invalid_message"
	CodeInvalidAttachment = "invalid_attachment" // an attachment refused at push; nothing of the batch was written
	CodeForbidden         = "forbidden"
	CodeForbiddenOrigin   = "forbidden_origin"
	CodeUnknownBinding    = "unknown_binding"
	CodeUnknownRun        = "unknown_run"
	CodeUnknownThread     = "unknown_thread" // thread_root_id names no message or thread of the channel
	CodeNotFound          = "not_found"
	CodeMethodNotAllowed  = "method_not_allowed"
	CodeRunInUse          = "run_in_use"
	CodePayloadTooLarge   = "payload_too_large"
	CodeCancelled         = "cancelled"
	CodeAgentStartFailed  = "agent_start_failed"
	CodeAgentCrashed      = "agent_crashed"
	CodeAgentFailed       = "agent_failed"
	CodeAgentBackoff      = "agent_backoff"
	CodeQueueFull         = "queue_full"
	CodeQueueTimeout      = "queue_timeout"
	CodeShuttingDown      = "shutting_down"
	CodeTimeout           = "timeout"
	CodeInternal          = "internal"
	CodeRunEnded          = "run_ended"        // the run already ended; nothing to cancel
	CodeEventsGone        = "events_gone"      // the events asked for fell out of the run's buffer
	CodeUnknownRequest    = "unknown_request"  // no such permission or elicitation request on the run
	CodeBadOption         = "bad_option"       // the option id is not one the agent offered
	CodeAlreadyAnswered   = "already_answered" // the permission or elicitation request was answered already
	CodeNotAnApprover     = "not_an_approver"  // the binding's approvers do not include who answered (answered_by)
	CodeInvalidContent    = "invalid_content"  // an elicitation answer's content does not fit the requested schema
	CodeBudgetExceeded    = "budget_exceeded"  // a daily budget of the binding or channel is spent until it resets
	CodeInvalidOption     = "invalid_option"   // a session option id or value the binding's agent does not list
	CodeStoreDamaged      = "store_damaged"    // the state file has a page the store cannot read; residentd repair fixes it
	CodeStorageFull       = "storage_full"     // the filesystem holding the state file is full (or over quota): nothing of the request was stored; free space there
	CodeNestingTooDeep    = "nesting_too_deep" // the request body nests objects and arrays deeper than 64 levels
	CodeInvalidID         = "invalid_id"       // an id is longer than MaxIDBytes or holds a control character; the message names the field
	CodeInterrupted       = "interrupted"      // the daemon stopped while the run was in flight, and it was not retried
	CodeInvalidConfig     = "invalid_config"   // the reloaded config file does not load or validate; the config in force stays
	CodeNoConfigFile      = "no_config_file"   // the daemon runs on the built-in default config: there is no file to reload
	CodePolicyRefused     = "policy_refused"   // the agent ended the turn itself (stop reason cancelled, nobody cancelled it) after a permission request was refused
	// CodeWorktreeHasChanges: a reset of a key's worktree refused, as it
	// has uncommitted changes (the message lists them); nothing was done.
	CodeWorktreeHasChanges = "worktree_has_changes"
	// CodeWorktreeFailed: a key's worktree could not be made or found (git
	// failed: the message says why), so its session could not open.
	CodeWorktreeFailed = "worktree_failed"

	// Agent tool endpoints.
	CodeToolsDisabled     = "tools_disabled"
	CodeMissingCapability = "missing_capability"
	CodeBadCapability     = "bad_capability"
	CodeOutOfScope        = "out_of_scope"
	CodeBadCursor         = "bad_cursor"
	CodeAgentForbidden    = "agent_forbidden" // the caller is an agent (or its descendant): only the tool endpoints are open to it
)
