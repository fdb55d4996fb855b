package acp

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	sdk "github.com/coder/acp-go-sdk"
	"go.uber.org/zap"

	"github.com/residentd/residentd/apitype"
	"github.com/residentd/residentd/internal/permission"
	"github.com/residentd/residentd/internal/regfile"
)

// errNoTerminal answers every terminal method: residentd does not advertise
// the terminal capability, so an agent calling them is out of protocol.
var errNoTerminal = errors.New("terminal not supported by residentd (clientCapabilities.terminal is false); run commands through the agent's own tools")

// client is the sdk.Client half of one Agent: routing of session/update,
// the permission policy and the confined file system.
type client struct{ a *Agent }

var _ sdk.Client = (*client)(nil)

// SessionUpdate gets the updates the pump did not read itself (it reads
// every well-formed one).
func (c *client) SessionUpdate(ctx context.Context, n sdk.SessionNotification) error {
	u, err := fromSDK(n.Update)
	if err != nil {
		c.a.log.Warn("dropping a session/update that could not be typed", zap.String("session", string(n.SessionId)), zap.Error(err))
		return nil
	}
	c.a.route(string(n.SessionId), u)
	return nil
}

// deliverLocked hands one update to r's caller; r.mu is held. sub is the
// subagent session that sent it, "" for r's own: a subagent's usage,
// options and compactions are its own, not the session's.
func (a *Agent) deliverLocked(r *route, id string, su *wireUpdate, sub string) {
	kind := su.Kind
	if sub != "" {
		kind = ""
	}
	switch kind {
	case "config_option_update":
		// Options are the session's state, whenever the agent says they moved.
		if list := options(su.ConfigOptions); list != nil {
			r.options, r.listed = list, true
		}
	case "usage_update":
		r.usage(su)
	case "current_mode_update":
		r.modes.current = su.CurrentModeID
	case "compaction_update":
		// The agent says when it compacts: the drop in use is no longer
		// taken for one. Each compaction counts once, however often its
		// completion is repeated.
		r.announced = true
		if su.Status != nil && *su.Status == "completed" && (su.CompactionID == "" || su.CompactionID != r.lastCompaction) {
			r.compacted, r.lastCompaction = true, su.CompactionID
		}
	}
	if r.loading {
		if r.progress != nil {
			r.progress() // the agent works on the session it reopens
		}
		return // replayed history of session/load: the caller already has it
	}
	u := su.toUpdate()
	u.Subagent = sub
	inPrompt := r.on != nil && !r.answered
	if tc := u.ToolCall; tc != nil && inPrompt {
		c := r.noteCall(tc.ID, tc.Kind, false)
		if tc.Status != "" {
			c.Status = tc.Status
			c.Unavailable = tc.Status == string(sdk.ToolCallStatusFailed) && unavailable(su.raw)
		}
	}
	if !inPrompt {
		if a.spec.Between != nil {
			a.spec.Between(id, u)
			return
		}
		a.log.Debug("dropping session/update outside a prompt", zap.String("session", id), zap.String("kind", su.Kind))
		return
	}
	if u.Kind == apitype.UpdateMessage && sub == "" && !r.cut {
		if r.text.Len()+len(u.Text) > MaxReplyBytes {
			r.cut = true
		} else {
			r.text.WriteString(u.Text)
		}
	}
	r.on(u)
}

// usage keeps what a usage_update says the session has cost and used; r.mu
// is held.
func (r *route) usage(su *wireUpdate) {
	if c := su.Cost; c != nil {
		// ACP's cost is the session's running total: the turn's cost is
		// its increases. A total that went back is a new count (a new
		// process, or an agent that counts per query): all of it is new.
		d := c.Amount - r.costSeen
		if d < 0 {
			d = c.Amount
		}
		r.costSeen = c.Amount
		if r.cost == nil {
			r.cost = &Cost{Currency: c.Currency}
		}
		r.cost.Amount += d
		r.cost.Currency = c.Currency
	}
	if calls := callUsage(su.Meta); calls != nil {
		if r.calls == nil {
			r.calls = &Usage{}
		}
		r.calls.InputTokens += calls.InputTokens
		r.calls.OutputTokens += calls.OutputTokens
		r.calls.CacheReadTokens += calls.CacheReadTokens
		r.calls.CacheWriteTokens += calls.CacheWriteTokens
		r.calls.ThoughtTokens += calls.ThoughtTokens
	}
	// Without compaction_update, context in use shrinking by half or more
	// is how an agent shows it compacted its history (summarised and
	// dropped it). Smaller drops happen without one: a model may drop
	// earlier turns' thinking from its context. A compaction between
	// prompts is reported by the next one's result.
	if !r.announced && su.Used < r.used/2 {
		r.compacted = true
	}
	r.used = su.Used
	r.inUse.Store(int64(su.Used))
}

// callUsage reads one model call's tokens from a usage_update's _meta
// ({"usage": {"inputTokens": …, "outputTokens": …, "cachedReadTokens": …,
// "cachedWriteTokens": …}}, ACP's Usage), nil when it has none.
func callUsage(meta json.RawMessage) *Usage {
	if len(meta) == 0 || !bytes.Contains(meta, []byte(`"usage"`)) {
		return nil
	}
	var m struct {
		Usage *sdk.Usage `json:"usage"`
	}
	if json.Unmarshal(meta, &m) != nil || m.Usage == nil {
		return nil
	}
	return fromSDKUsage(m.Usage)
}

// fromSDKUsage is ACP's Usage as residentd counts it.
func fromSDKUsage(su *sdk.Usage) *Usage {
	u := &Usage{InputTokens: int64(su.InputTokens), OutputTokens: int64(su.OutputTokens)}
	if v := su.CachedReadTokens; v != nil {
		u.CacheReadTokens = int64(*v)
	}
	if v := su.CachedWriteTokens; v != nil {
		u.CacheWriteTokens = int64(*v)
	}
	if v := su.ThoughtTokens; v != nil {
		u.ThoughtTokens = int64(*v)
	}
	return u
}

// quotaUsage reads a prompt response's _meta.quota.token_count, the shape
// codex-acp reports a turn's tokens in (and claude-agent-acp 0.101 beside
// its usage): inputTokens (not cached), cachedInputTokens (cache reads),
// cachedWriteTokens, outputTokens (reasoning included) and
// reasoningOutputTokens, camelCase or snake_case. Nil when it has none.
func quotaUsage(meta map[string]any) *Usage {
	quota, _ := meta["quota"].(map[string]any)
	tc, _ := quota["token_count"].(map[string]any)
	if tc == nil {
		return nil
	}
	n := func(keys ...string) (int64, bool) {
		for _, k := range keys {
			if v, ok := tc[k].(float64); ok && v >= 0 {
				return int64(v), true
			}
		}
		return 0, false
	}
	u := &Usage{}
	var in, out bool
	u.InputTokens, in = n("inputTokens", "input_tokens")
	u.OutputTokens, out = n("outputTokens", "output_tokens")
	if !in && !out {
		return nil
	}
	u.CacheReadTokens, _ = n("cachedInputTokens", "cached_input_tokens", "cachedReadTokens")
	u.CacheWriteTokens, _ = n("cachedWriteTokens", "cached_write_tokens")
	u.ThoughtTokens, _ = n("reasoningOutputTokens", "reasoning_output_tokens", "thoughtTokens")
	return u
}

// holdEarlyLocked keeps an update for a session id nobody registered yet,
// until the id's session/new or session/load reply registers it or
// Spec.EarlyHold passes; a.mu is held.
func (a *Agent) holdEarlyLocked(id string, su *wireUpdate) {
	if a.closed {
		return
	}
	e := a.early[id]
	if e == nil {
		e = &earlyUpdates{}
		held := e
		e.timer = time.AfterFunc(a.spec.EarlyHold, func() { a.dropEarly(id, held) })
		a.early[id] = e
	}
	if len(e.updates) < maxEarly {
		held := *su // su is the pump's decoding target, decoded into again by the next line
		e.updates = append(e.updates, &held)
	} else {
		e.dropped++
	}
}

// dropEarly gives up on the held updates of id: no session of that id was
// created or loaded on this agent in time.
func (a *Agent) dropEarly(id string, e *earlyUpdates) {
	a.mu.Lock()
	mine := a.early[id] == e
	if mine {
		delete(a.early, id)
	}
	a.mu.Unlock()
	if mine {
		a.log.Warn("dropping session/update for a session this agent never opened", zap.String("session", id),
			zap.Int("updates", len(e.updates)+e.dropped), zap.Duration("held", a.spec.EarlyHold))
		if a.spec.Stray != nil {
			a.spec.Stray(id, len(e.updates)+e.dropped)
		}
	}
}

// releaseEarlyLocked delivers the updates held for native to its new
// route, in order and before any later one (r.mu is taken before a.mu is
// released), then unlocks a.mu.
func (a *Agent) releaseEarlyLocked(native string, r *route) {
	e := a.early[native]
	delete(a.early, native)
	if e == nil {
		a.mu.Unlock()
		return
	}
	e.timer.Stop()
	r.mu.Lock()
	a.mu.Unlock()
	defer r.mu.Unlock()
	for _, su := range e.updates {
		a.deliverLocked(r, native, su, "")
	}
	if e.dropped > 0 {
		a.log.Warn("dropped session/updates the agent sent before its session was known, past the hold bound", zap.String("session", native), zap.Int("dropped", e.dropped), zap.Int("bound", maxEarly))
	}
}

// toUpdate types an SDK session update as the local API reports it.
func toUpdate(su sdk.SessionUpdate) Update {
	u, err := fromSDK(su)
	if err != nil {
		return Update{Update: apitype.Update{Kind: apitype.UpdateOther, Text: "an update could not be typed: " + err.Error()}}
	}
	return u.toUpdate()
}

// toUpdate types an update as the local API reports it. Raw (the agent's
// own bytes) goes with every update but a plain text chunk: a text chunk
// is its text, and it is the hot path of a reply, which would otherwise be
// sent twice.
func (su *wireUpdate) toUpdate() Update {
	u := apitype.Update{Kind: apitype.UpdateOther, Raw: su.raw}
	switch su.Kind {
	case "agent_message_chunk", "agent_thought_chunk":
		u.Kind = su.Kind
		if su.Content.Text != nil {
			u.Text = *su.Content.Text
		}
	case "tool_call":
		u.Kind = apitype.UpdateToolCall
		u.ToolCall = toolCall(sdk.ToolCallId(su.ToolCallID), su.Title, (*sdk.ToolKind)(su.ToolKind), (*sdk.ToolCallStatus)(su.Status), su.Locations)
		u.Text = u.ToolCall.Title
	case "tool_call_update":
		u.Kind = apitype.UpdateToolUpdate
		u.ToolCall = toolCall(sdk.ToolCallId(su.ToolCallID), su.Title, (*sdk.ToolKind)(su.ToolKind), (*sdk.ToolCallStatus)(su.Status), su.Locations)
		u.Text = u.ToolCall.Title
		if u.Text == "" {
			u.Text = u.ToolCall.Status
		}
	case "plan":
		u.Kind = apitype.UpdatePlan
		p := &apitype.Plan{Entries: make([]apitype.PlanEntry, 0, len(su.Entries))}
		var b strings.Builder
		for i, e := range su.Entries {
			if i > 0 {
				b.WriteString("\n")
			}
			b.WriteString(e.Content)
			p.Entries = append(p.Entries, apitype.PlanEntry{Content: e.Content, Priority: string(e.Priority), Status: string(e.Status)})
		}
		u.Text, u.Plan = b.String(), p
	case "usage_update":
		u.Kind = apitype.UpdateUsage
		u.Text = fmt.Sprintf("used=%d size=%d", su.Used, su.Size)
		u.Context = &apitype.ContextUsage{Used: int64(su.Used), Size: int64(su.Size)}
	case "notice":
		u.Kind = apitype.UpdateNotice
		n := &apitype.Notice{Severity: su.Severity, Description: su.Description}
		if su.Title != nil {
			n.Title = *su.Title
		}
		u.Notice, u.Text = n, n.Title
	case "compaction_update":
		u.Kind = apitype.UpdateCompaction
		c := &apitype.Compaction{ID: su.CompactionID}
		if su.Status != nil {
			c.Status = *su.Status
		}
		var b strings.Builder
		for _, part := range su.Summary {
			if part.Text != nil {
				b.WriteString(*part.Text)
			}
		}
		c.Summary = b.String()
		u.Compaction, u.Text = c, c.Status
	}
	return Update{Update: u}
}

// toolCall types a tool call (or the changed part of one).
func toolCall(id sdk.ToolCallId, title *string, kind *sdk.ToolKind, status *sdk.ToolCallStatus, locs []sdk.ToolCallLocation) *apitype.ToolCall {
	tc := &apitype.ToolCall{ID: string(id), Locations: locations(locs)}
	if title != nil {
		tc.Title = *title
	}
	if kind != nil {
		tc.Kind = string(*kind)
	}
	if status != nil {
		tc.Status = string(*status)
	}
	return tc
}

func locations(ls []sdk.ToolCallLocation) []apitype.Location {
	if len(ls) == 0 {
		return nil
	}
	out := make([]apitype.Location, len(ls))
	for i, l := range ls {
		out[i] = apitype.Location{Path: l.Path, Line: l.Line}
	}
	return out
}

// RequestPermission answers by the Spec's policy: allow, reject, or ask a
// person through Spec.Ask. The SDK serves each request on its own
// goroutine, so waiting for a person blocks nothing else.
func (c *client) RequestPermission(ctx context.Context, p sdk.RequestPermissionRequest) (sdk.RequestPermissionResponse, error) {
	a := c.a
	native := string(p.SessionId)
	tc := toolCall(p.ToolCall.ToolCallId, p.ToolCall.Title, p.ToolCall.Kind, p.ToolCall.Status, p.ToolCall.Locations)
	if tc.Title == "" {
		tc.Title = "(untitled tool)"
	}
	opts := make([]permission.Option, len(p.Options))
	offered := make([]apitype.PermissionOption, len(p.Options))
	for i, o := range p.Options {
		opts[i] = permission.Option{ID: string(o.OptionId), Name: o.Name, Kind: string(o.Kind)}
		offered[i] = apitype.PermissionOption{ID: string(o.OptionId), Name: o.Name, Kind: string(o.Kind)}
	}
	resp := sdk.RequestPermissionResponse{Outcome: sdk.NewRequestPermissionOutcomeCancelled()}
	inside := true
	for _, l := range tc.Locations {
		if _, err := a.confine(native, l.Path, true); err != nil {
			inside = false
		}
	}
	decision := a.Permission().DecideAt(tc.Kind, inside)
	if decision == permission.AskPerson {
		a.noteAsked(native, tc.ID, tc.Kind)
		chosen := ""
		if a.spec.Ask != nil {
			if id := a.spec.Ask(ctx, native, *tc, offered); id != "" {
				resp.Outcome = sdk.NewRequestPermissionOutcomeSelected(sdk.PermissionOptionId(id))
				for _, o := range opts {
					if o.ID == id {
						chosen = o.Kind
					}
				}
			}
		}
		a.noteDecision(native, tc.ID, allows(chosen), DecidedByAsk)
		a.log.Debug("permission asked", zap.String("session", native), zap.String("tool", tc.Title), zap.Bool("answered", resp.Outcome.Selected != nil))
		return resp, nil
	}
	d := &apitype.PermissionDecision{Tool: tc.Title, Kind: "cancelled", DecidedBy: apitype.DecidedByPolicy}
	if pick, ok := permission.Pick(opts, decision == permission.Grant); ok {
		resp.Outcome = sdk.NewRequestPermissionOutcomeSelected(sdk.PermissionOptionId(pick.ID))
		d.OptionID, d.Kind = pick.ID, pick.Kind
	}
	a.log.Debug("permission decided", zap.String("session", native), zap.String("policy", string(a.Permission())), zap.String("decision", d.Kind), zap.String("tool", tc.Title))

	a.noteAsked(native, tc.ID, tc.Kind)
	a.noteDecision(native, tc.ID, allows(d.Kind), apitype.DecidedByPolicy)
	a.mu.Lock()
	r := a.routes[native]
	a.mu.Unlock()
	if r != nil {
		raw, _ := json.Marshal(p)
		r.mu.Lock()
		if r.on != nil {
			r.on(Update{Update: apitype.Update{Kind: KindPermission, Text: d.Kind + " " + tc.Title, Raw: raw}, Decision: d})
		}
		r.mu.Unlock()
	}
	return resp, nil
}

func (c *client) ReadTextFile(ctx context.Context, p sdk.ReadTextFileRequest) (sdk.ReadTextFileResponse, error) {
	path, err := c.a.confine(string(p.SessionId), p.Path, false)
	if err != nil {
		return sdk.ReadTextFileResponse{}, fmt.Errorf("acp: read %q: %w", p.Path, err)
	}
	// Only a regular file: a FIFO would hold this request (and its thread)
	// until a writer came, a device might never end.
	data, err := regfile.Read(path, MaxReadBytes)
	if err != nil {
		return sdk.ReadTextFileResponse{}, fmt.Errorf("acp: read %q: %w", p.Path, err)
	}
	content := string(data)
	if p.Line != nil || p.Limit != nil {
		lines := strings.SplitAfter(content, "\n")
		start := 0
		if p.Line != nil && *p.Line > 1 {
			start = min(*p.Line-1, len(lines))
		}
		end := len(lines)
		if p.Limit != nil && *p.Limit >= 0 {
			end = min(start+*p.Limit, len(lines))
		}
		content = strings.Join(lines[start:end], "")
	}
	return sdk.ReadTextFileResponse{Content: content}, nil
}

func (c *client) WriteTextFile(ctx context.Context, p sdk.WriteTextFileRequest) (sdk.WriteTextFileResponse, error) {
	if pol := c.a.Permission(); !pol.AllowsFiles() {
		return sdk.WriteTextFileResponse{}, fmt.Errorf("acp: write %q: refused by permission policy %q; set permission \"allow\" on the binding to let agents write files", p.Path, pol)
	}
	path, err := c.a.confine(string(p.SessionId), p.Path, true)
	if err != nil {
		return sdk.WriteTextFileResponse{}, fmt.Errorf("acp: write %q: %w", p.Path, err)
	}
	if err := os.WriteFile(path, []byte(p.Content), 0o644); err != nil {
		return sdk.WriteTextFileResponse{}, fmt.Errorf("acp: write %q: %w", p.Path, err)
	}
	return sdk.WriteTextFileResponse{}, nil
}

// confine resolves path (relative ones against session native's working
// directory) through symlinks and refuses anything outside that
// directory: the one the session was opened with (SetCwd), else Spec.Dir.
// For a write the file may not exist yet, so its parent directory is
// resolved instead.
func (a *Agent) confine(native, path string, write bool) (string, error) {
	dir := a.dirOf(native)
	if !filepath.IsAbs(path) {
		path = filepath.Join(dir.cwd, path)
	}
	path = filepath.Clean(path)
	resolved, err := filepath.EvalSymlinks(path)
	// A file not written yet resolves through its parent; a dangling
	// symlink does not count as "not yet": writing it would follow it.
	if _, lerr := os.Lstat(path); write && errors.Is(err, fs.ErrNotExist) && errors.Is(lerr, fs.ErrNotExist) {
		var dir string
		dir, err = filepath.EvalSymlinks(filepath.Dir(path))
		resolved = filepath.Join(dir, filepath.Base(path))
	}
	if err != nil {
		return "", err
	}
	rel, err := filepath.Rel(dir.root, resolved)
	if err != nil || rel == ".." || strings.HasPrefix(rel, ".."+string(filepath.Separator)) {
		return "", fmt.Errorf("path resolves to %q, outside the agent's working directory %q; file access is confined to it", resolved, dir.root)
	}
	return resolved, nil
}

func (c *client) CreateTerminal(ctx context.Context, p sdk.CreateTerminalRequest) (sdk.CreateTerminalResponse, error) {
	return sdk.CreateTerminalResponse{}, errNoTerminal
}

func (c *client) KillTerminal(ctx context.Context, p sdk.KillTerminalRequest) (sdk.KillTerminalResponse, error) {
	return sdk.KillTerminalResponse{}, errNoTerminal
}

func (c *client) TerminalOutput(ctx context.Context, p sdk.TerminalOutputRequest) (sdk.TerminalOutputResponse, error) {
	return sdk.TerminalOutputResponse{}, errNoTerminal
}

func (c *client) ReleaseTerminal(ctx context.Context, p sdk.ReleaseTerminalRequest) (sdk.ReleaseTerminalResponse, error) {
	return sdk.ReleaseTerminalResponse{}, errNoTerminal
}

func (c *client) WaitForTerminalExit(ctx context.Context, p sdk.WaitForTerminalExitRequest) (sdk.WaitForTerminalExitResponse, error) {
	return sdk.WaitForTerminalExitResponse{}, errNoTerminal
}

// noteCall notes a tool call reported (or asked about, asked) during the
// running prompt and returns its record, valid until the next call; r.mu
// is held. A kind given later (a tool_call_update) fills one not given at
// first.
func (r *route) noteCall(id, kind string, asked bool) *ToolCallSeen {
	i := slices.IndexFunc(r.tools, func(c ToolCallSeen) bool { return c.ID == id })
	if i < 0 {
		r.tools = append(r.tools, ToolCallSeen{ID: id})
		i = len(r.tools) - 1
	}
	c := &r.tools[i]
	if c.Kind == "" || c.Kind == "other" {
		c.Kind = kind
	}
	c.Asked = c.Asked || asked
	return c
}

// allows reports whether a permission option kind (allow_once,
// allow_always, reject_once, …) allows the call; "" (the cancelled
// outcome) does not.
func allows(kind string) bool { return strings.HasPrefix(kind, "allow") }

// unavailableWords are what an agent's failed tool call says when the
// agent would not run the tool at all, its own rules having taken it away
// (claude-agent-acp's deny rules: the model is told the tool does not
// exist).
var unavailableWords = [][]byte{[]byte("No such tool available")}

// unavailable reports whether a failed tool call update says the tool was
// not available to the agent.
func unavailable(raw []byte) bool {
	for _, w := range unavailableWords {
		if bytes.Contains(raw, w) {
			return true
		}
	}
	return false
}

// noteDecision notes how the permission request for tool call id of
// session native was answered, while its prompt runs.
func (a *Agent) noteDecision(native, id string, allowed bool, by string) {
	a.mu.Lock()
	r := a.routes[native]
	a.mu.Unlock()
	if r == nil {
		return
	}
	r.mu.Lock()
	if r.on != nil {
		c := r.noteCall(id, "", true)
		c.Decision, c.DecidedBy = DecisionRejected, by
		if allowed {
			c.Decision = DecisionAllowed
		}
	}
	r.mu.Unlock()
}

// noteAsked notes a permission request for tool call id (of ACP kind
// kind) of session native.
func (a *Agent) noteAsked(native, id, kind string) {
	a.mu.Lock()
	r := a.routes[native]
	a.mu.Unlock()
	if r == nil {
		return
	}
	r.mu.Lock()
	if r.on != nil {
		r.noteCall(id, kind, true)
	}
	r.mu.Unlock()
}

// seenCalls is the prompt's tool calls, kinds defaulted; r.mu is held.
func (r *route) seenCalls() []ToolCallSeen {
	out := slices.Clone(r.tools)
	for i := range out {
		if out[i].Kind == "" {
			out[i].Kind = "other"
		}
	}
	return out
}
