// Package acp owns the client side of the Agent Client Protocol: it runs
// initialize/new/load/prompt over the pipes of one agent process that
// internal/child spawns and supervises.
package acp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	sdk "github.com/coder/acp-go-sdk"
	"go.uber.org/zap"

	"github.com/residentd/residentd/apitype"
	"github.com/residentd/residentd/internal/child"
	"github.com/residentd/residentd/internal/permission"
)

// Sentinel error classes; match with errors.Is.
var (
	// ErrExited: the agent process is gone (the message carries its exit and stderr tail).
	ErrExited = errors.New("agent process exited")
	// ErrStart: the agent could not be spawned at all.
	ErrStart = errors.New("agent could not be started")
	// ErrProtocol: the agent answered a request with a JSON-RPC error.
	ErrProtocol = errors.New("agent returned an error")
)

// Spec describes how to run one agent process.
type Spec struct {
	Command string
	Args    []string
	Env     []string // extra KEY=VALUE appended to the daemon's environment

	Dir        string            // working dir of the child; client fs methods are confined to it
	Permission permission.Policy // how permission requests are answered; "" is permission.Deny
	// Ask answers the requests Permission puts to a person; without it they
	// are answered cancelled.
	Ask AskFunc
	// Elicit answers the agent's forms (elicitation/create); with it the
	// client advertises form elicitation at initialize. Without it no
	// form is advertised and any that comes is answered cancel.
	Elicit     ElicitFunc
	MCPServers []sdk.McpServer
	// SystemPrompt goes with every session request (new, load, resume,
	// fork) as the session's system prompt (append), when the agent
	// advertises that it takes one (SystemPromptTaken); "" sends none.
	SystemPrompt string
	// SessionMeta, called once initialize said who the agent is, returns
	// the _meta to send with every session/new, session/load and
	// session/resume: the agent's own session settings (a binding's
	// permission controls, see internal/policy). nil sends none.
	SessionMeta func(Info) map[string]any

	// Protocol is the ACP version to speak: ProtocolV1 ("" too),
	// ProtocolV2, or ProtocolAuto (offer v2, take what the agent answers).
	Protocol string

	Grace        time.Duration // SIGTERM -> SIGKILL on Close (default 5s)
	CancelGrace  time.Duration // session/cancel -> kill (default 5s)
	EarlyHold    time.Duration // how long updates for a session not yet known are held (default 5s)
	CloseTimeout time.Duration // session/close before the stop sequence, when advertised (default 2s)
	StartTimeout time.Duration // spawn + initialize (default 30s)
	StderrTail   int           // bytes of stderr kept (default 8 KiB)

	// Between gets, in order, the updates of a session with no prompt in
	// flight (an agent's own turn, background work ending, a late
	// message). It runs on the agent's reader: it must not block, nor
	// call back into the Agent. Without it they are dropped.
	Between func(native string, u Update)
	// Stray is told of updates for a session id this agent never opened,
	// once they are given up on.
	Stray func(native string, n int)

	// Cgroups, Limits and MarkPrefix: see child.Spec.
	Cgroups    *child.Cgroups
	Limits     child.Limits
	MarkPrefix string
}

// Update is one session/update seen during a prompt, typed as the local
// API reports it, or (Kind KindPermission) a permission request the
// binding's policy answered, with Decision saying how.
type Update struct {
	apitype.Update
	Decision *apitype.PermissionDecision `json:"decision,omitempty"`
}

// KindPermission marks an Update that reports a permission decision.
const KindPermission = "permission"

// AskFunc puts a permission request of session native to a person and
// returns the chosen option id ("" answers cancelled). It returns when ctx
// ends at the latest.
type AskFunc func(ctx context.Context, native string, tc apitype.ToolCall, options []apitype.PermissionOption) (optionID string)

// Usage is the token usage an agent reported for a turn.
type Usage struct {
	InputTokens      int64 `json:"input_tokens"`
	OutputTokens     int64 `json:"output_tokens"`
	CacheReadTokens  int64 `json:"cache_read_tokens"`
	CacheWriteTokens int64 `json:"cache_write_tokens"`
	// ThoughtTokens are the model's reasoning tokens, where the agent
	// counts them apart (ACP's thoughtTokens; codex's reasoning output
	// tokens, which its output tokens include).
	ThoughtTokens int64 `json:"thought_tokens"`
}

// Where a turn's tokens came from (Result.UsageFrom).
const (
	UsageFromResponse = "prompt_response"      // the prompt response's usage (ACP's Usage)
	UsageFromMeta     = "prompt_response_meta" // the prompt response's _meta.quota.token_count (codex-acp's and claude-agent-acp's shape)
	UsageFromUpdates  = "usage_update"         // each model call's tokens in a usage_update's _meta.usage, summed
	UsageFromNone     = "none"                 // the agent reported no tokens
)

// Cost is what an agent says its session has cost so far (ACP's
// usage_update cost is cumulative).
type Cost struct {
	Amount   float64
	Currency string
}

// Result is the outcome of one prompt turn.
type Result struct {
	StopReason string
	Text       string // concatenated agent_message_chunk text
	// Usage is the turn's tokens: what the prompt response reported, or,
	// when the agent reported each model call's tokens in its usage
	// updates (PerCall), their sum.
	Usage   *Usage
	PerCall bool
	// UsageFrom says where Usage came from (UsageFrom*): UsageFromNone
	// when the agent reported no tokens.
	UsageFrom string
	// Cost is what the turn cost: every increase of the session cost the
	// agent reported during it (ACP's usage_update cost is the session's
	// running total), summed, with what it reported between prompts.
	Cost *Cost
	// Compacted: the agent compacted (summarised and dropped) its history
	// since the last result: it said so with a completed compaction_update,
	// or, from an agent that sends none, the context in use it reported
	// fell below half of the report before.
	Compacted bool
	// ToolCalls are the tool calls the agent reported during the prompt, in
	// the order it first reported them.
	ToolCalls []ToolCallSeen
}

// ToolCallSeen is one tool call the agent reported (session/update
// tool_call), or asked about: whether it asked for it (a
// session/request_permission for its toolCallId came during the prompt),
// how that was answered, and the last status the agent reported.
type ToolCallSeen struct {
	ID    string
	Kind  string // its ACP kind; "other" when it named none
	Asked bool
	// Decision is how its permission request was answered during the
	// prompt: DecisionAllowed or DecisionRejected ("" when it asked
	// nothing, or the prompt ended before the answer), by DecidedBy:
	// apitype.DecidedByPolicy, or DecidedByAsk (put to Spec.Ask: a
	// person, the timeout, the pending limit or a cancel answered).
	Decision  string
	DecidedBy string
	// Status is the last status the agent reported for it (pending,
	// in_progress, completed, failed), "" when it reported none.
	Status string
	// Unavailable: it failed because the agent would not run the tool at
	// all (its own rules took it away: claude-agent-acp's "No such tool
	// available"), not because the tool ran and failed.
	Unavailable bool
}

// How a permission request of a tool call was answered (ToolCallSeen).
const (
	DecisionAllowed  = "allowed"
	DecisionRejected = "rejected"
	DecidedByAsk     = "ask" // Spec.Ask answered: a person, or what stood in for one
)

// What became of a tool call (ToolCallSeen.Outcome): the outcome label of
// residentd_agent_tool_calls_total.
const (
	ToolRan             = "ran"               // not asked about; the agent reported it completed
	ToolFailed          = "failed"            // not asked about; the agent reported it failed
	ToolRefusedByAgent  = "refused_by_agent"  // not asked about; the agent would not run it (the tool is not available to it: its own rules)
	ToolAllowedByPolicy = "allowed_by_policy" // asked; the binding's policy allowed it
	ToolRefusedByPolicy = "refused_by_policy" // asked; the binding's policy rejected it
	ToolAskedAllowed    = "asked_allowed"     // asked a person, who allowed it
	ToolAskedRejected   = "asked_rejected"    // asked a person; rejected by the person, the timeout, the pending limit or a cancel
	ToolUnfinished      = "unfinished"        // no final status and no answer by the prompt's end (a cancelled turn, an agent that reports none)
)

// ToolOutcomes are the outcomes a tool call can have, in the order above.
var ToolOutcomes = []string{ToolRan, ToolFailed, ToolRefusedByAgent, ToolAllowedByPolicy, ToolRefusedByPolicy, ToolAskedAllowed, ToolAskedRejected, ToolUnfinished}

// Outcome is what became of the call: the answer to its permission
// request when it asked (whatever it then reported), else the last status
// it reported.
func (c ToolCallSeen) Outcome() string {
	allowed := c.Decision == DecisionAllowed
	switch {
	case c.Decision != "" && c.DecidedBy == apitype.DecidedByPolicy:
		if allowed {
			return ToolAllowedByPolicy
		}
		return ToolRefusedByPolicy
	case c.Decision != "":
		if allowed {
			return ToolAskedAllowed
		}
		return ToolAskedRejected
	case c.Asked:
		return ToolUnfinished // the prompt ended while its request waited
	case c.Status == string(sdk.ToolCallStatusCompleted):
		return ToolRan
	case c.Status == string(sdk.ToolCallStatusFailed) && c.Unavailable:
		return ToolRefusedByAgent
	case c.Status == string(sdk.ToolCallStatusFailed):
		return ToolFailed
	}
	return ToolUnfinished
}

// Agent is one supervised agent process with an initialized ACP connection.
type Agent struct {
	spec Spec
	root string // Spec.Dir with symlinks resolved: the fs confinement root
	log  *zap.Logger

	lines apitype.LineDecoder // the pump's, for update lines
	env   envelope            // the pump's target for update lines (see dispatch)
	raw   rawUpdate           // the pump's target for an update's raw form
	reply promptReply         // the pump's target for a prompt's answer (see takeAnswer)

	// in is the agent's stdin as the SDK and this package write it.
	in *capsWriter
	// promptID numbers the prompts this package sends (prompt.go);
	// prompts holds the prompts waiting for their answers by id (under
	// mu), promptsN its length, for the pump to look for answers only
	// while one waits.
	promptID atomic.Uint64
	prompts  map[uint64]waiting
	promptsN atomic.Int32

	proc      *child.Process
	pid       int
	done      <-chan struct{} // proc.Done()
	conn      *sdk.ClientSideConnection
	canLoad   bool
	canResume bool
	canFork   bool // sessionCapabilities.fork (session/fork, unstable in ACP)
	caps      PromptCaps
	canSteer  bool // _meta.steering.supported in the initialize answer
	canClose  bool
	info      Info           // the agentInfo of initialize's answer
	meta      map[string]any // _meta of the session requests (Spec.SessionMeta)
	// servers are the MCP servers the session requests carry: Spec's,
	// until SetMCPServers names a key's (a spare learns its key late).
	servers atomic.Pointer[[]sdk.McpServer]
	// policy answers permission requests: Spec.Permission, until
	// SetPermission (a config reload) changes it.
	policy atomic.Value // permission.Policy
	// cwd is the working directory the session requests carry: Spec.Dir,
	// until SetCwd names a key's (a key's own worktree).
	cwd atomic.Pointer[workDir]

	// Lock order: mu, then a route's mu (releaseEarlyLocked and reopen
	// hand over from one to the other), then what a route's on and
	// Spec.Between take: a route's mu is held while they run, so they must
	// not call the Agent's methods that take mu.
	mu     sync.Mutex
	routes map[string]*route        // native session id -> its update route
	early  map[string]*earlyUpdates // updates for ids not routed yet
	// children maps a subagent's session id to its parent's, as the
	// parent's subagent_update announced it.
	children map[string]string
	working  map[string]bool // subagent sessions running, by id
	workedAt time.Time       // when working last changed
	workCh   chan struct{}   // closed and replaced when working changes
	closed   bool
	limit    error // the first output limit the agent hit (ErrLimit)

	elicit elicitState // forms in flight (elicit.go)
	// ACP v2 (v2.go): whether the agent answered v2, the version it
	// answered, whether the initialize answer is still awaited, what it
	// advertised; under mu: each session's work as it reports it, the
	// prompts awaiting their idle, the raw requests awaiting answers.
	v2         atomic.Bool
	protocol   atomic.Int32
	initWait   atomic.Bool
	v2caps     v2Caps
	v2sessions map[string]*v2Session
	v2turns    map[uint64]*v2Turn
	calls      map[uint64]chan rawAnswer
	callsN     atomic.Int32
}

// earlyUpdates are the updates of a session id the caller has not
// registered yet: an agent may send one (available commands, say) just
// before its session/new reply, and the SDK may hand it over before the
// reply reaches the caller. They wait for the route, up to Spec.EarlyHold.
type earlyUpdates struct {
	updates []*wireUpdate
	dropped int // past maxEarly
	timer   *time.Timer
}

// maxEarly bounds the updates held for one unknown session id.
const maxEarly = 64

// route carries a session's updates to the caller of the running Prompt.
// Its mutex is held while on runs, so detaching under it guarantees on is
// never called after Prompt returns.
type route struct {
	mu      sync.Mutex // taken after Agent.mu, never before it (see there)
	loading bool
	on      func(Update)
	// answered: the pump has read the agent's answer to the running
	// prompt, before the SDK hands it to Prompt; what the agent says after
	// it belongs to no turn (ACP sends a prompt's updates before its
	// answer), however soon it comes.
	answered bool
	text     strings.Builder
	cut      bool           // the reply text reached MaxReplyBytes
	line     []byte         // the running prompt's request line, kept for the next one's
	writing  sync.WaitGroup // the running prompt's write of line

	// What the prompt running, or the next one, has cost: cost (increases
	// of the session's running cost, summed), the calls' tokens.
	cost     *Cost
	costSeen float64        // the session cost the agent last reported
	calls    *Usage         // tokens of the model calls the agent reported one by one
	tools    []ToolCallSeen // the prompt's tool calls (see Result.ToolCalls)

	options []Option     // the session's config options as the agent last listed them
	modes   modes        // the session's modes as the agent last listed them
	listed  bool         // the agent listed config options for the session at all
	used    int          // context tokens in use at the last usage_update
	inUse   atomic.Int64 // used, read without mu (ContextUsed)
	// compacted: the agent compacted its history; the next prompt's result
	// reports it, once. announced: it sends compaction_update, so a drop
	// in use is no longer taken for one.
	compacted      bool
	announced      bool
	lastCompaction string // the id of the last compaction_update that completed

	// progress hears of each update while a reopen runs (WithProgress).
	progress func()

	// dir is the working directory the session was opened with: its
	// file requests are confined to it (nil: the agent's Spec.Dir).
	dir *workDir
}

// workDir is a session's working directory: as sent (cwd) and with its
// symlinks resolved (root, the file requests' confinement).
type workDir struct {
	cwd, root string
}

func (s *Spec) defaults() {
	if s.Permission == "" {
		s.Permission = permission.Deny
	}
	if s.Grace <= 0 {
		s.Grace = 5 * time.Second
	}
	if s.CloseTimeout <= 0 {
		s.CloseTimeout = 2 * time.Second
	}
	if s.EarlyHold <= 0 {
		s.EarlyHold = 5 * time.Second
	}
	if s.CancelGrace <= 0 {
		s.CancelGrace = 5 * time.Second
	}
	if s.StartTimeout <= 0 {
		s.StartTimeout = 30 * time.Second
	}
	if s.StderrTail <= 0 {
		s.StderrTail = 8 << 10
	}
	if s.MCPServers == nil {
		s.MCPServers = []sdk.McpServer{} // ACP requires an array; null is rejected
	}
}

// Start spawns the agent and runs initialize. On error nothing is left running.
func Start(ctx context.Context, spec Spec, log *zap.Logger) (*Agent, error) {
	spec.defaults()
	if log == nil {
		log = zap.NewNop()
	}
	if err := spec.Permission.Check(); err != nil {
		return nil, fmt.Errorf("acp: start %q: %v: %w", spec.Command, err, ErrStart)
	}
	dir := spec.Dir
	if dir == "" {
		dir = "."
	}
	dir, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("acp: start %q: working dir %q: %v: %w", spec.Command, spec.Dir, err, ErrStart)
	}
	root, err := filepath.EvalSymlinks(dir)
	if err != nil {
		return nil, fmt.Errorf("acp: start %q: working dir %q does not exist; create it or fix the binding's dir: %v: %w", spec.Command, dir, err, ErrStart)
	}
	spec.Dir = dir
	path, err := Resolve(spec.Command)
	if err != nil {
		return nil, fmt.Errorf("acp: start %q: %v; install the agent or set the binding's command to the absolute path of an executable: %w", spec.Command, err, ErrStart)
	}

	a := &Agent{
		spec:     spec,
		root:     root,
		log:      log.With(zap.String("command", spec.Command)),
		routes:   make(map[string]*route),
		early:    make(map[string]*earlyUpdates),
		children: make(map[string]string),
		working:  make(map[string]bool),
		workCh:   make(chan struct{}),
		prompts:  make(map[uint64]waiting),

		v2sessions: make(map[string]*v2Session),
		v2turns:    make(map[uint64]*v2Turn),
		calls:      make(map[uint64]chan rawAnswer),
	}
	a.promptID.Store(promptIDBase)
	a.servers.Store(&spec.MCPServers)
	a.policy.Store(spec.Permission)
	a.cwd.Store(&workDir{cwd: dir, root: root})
	if err := a.spawn(path); err != nil {
		return nil, err
	}

	ictx, cancel := context.WithTimeout(ctx, spec.StartTimeout)
	defer cancel()
	resp, err := a.conn.Initialize(ictx, sdk.InitializeRequest{
		ProtocolVersion: sdk.ProtocolVersionNumber,
		ClientCapabilities: sdk.ClientCapabilities{
			Fs:          sdk.FileSystemCapabilities{ReadTextFile: true, WriteTextFile: true},
			Terminal:    false,
			Elicitation: elicitationCapability(spec.Elicit),
		},
		ClientInfo: &sdk.Implementation{Name: "residentd", Version: "1"},
	})
	if err != nil {
		return nil, a.StartFailed(a.callErr(ictx, "initialize", err))
	}
	if !a.v2.Load() {
		a.protocol.Store(int32(resp.ProtocolVersion))
	}
	if spec.Protocol == ProtocolV2 && !a.v2.Load() {
		return nil, a.StartFailed(fmt.Errorf("acp: initialize: the binding's protocol is 2 and the agent answered ACP version %d: %w", resp.ProtocolVersion, ErrProtocol))
	}
	if a.v2.Load() {
		a.log.Info("agent speaks ACP v2", zap.Bool("session_status", a.v2caps.status))
	} else if resp.ProtocolVersion != sdk.ProtocolVersionNumber {
		a.log.Warn("agent speaks another ACP protocol version", zap.Int("agent_version", int(resp.ProtocolVersion)), zap.Int("client_version", sdk.ProtocolVersionNumber))
	}
	a.canLoad = resp.AgentCapabilities.LoadSession
	a.canClose = resp.AgentCapabilities.SessionCapabilities.Close != nil
	a.canResume = resp.AgentCapabilities.SessionCapabilities.Resume != nil
	a.canFork = resp.AgentCapabilities.SessionCapabilities.Fork != nil
	pc := resp.AgentCapabilities.PromptCapabilities
	a.caps = PromptCaps{Image: pc.Image, EmbeddedContext: pc.EmbeddedContext}
	a.canSteer = steeringSupported(resp.Meta) || steeringSupported(resp.AgentCapabilities.Meta)
	if ai := resp.AgentInfo; ai != nil {
		a.info = Info{Name: ai.Name, Version: ai.Version}
	}
	if spec.SessionMeta != nil {
		a.meta = spec.SessionMeta(a.info)
	}
	return a, nil
}

// spawn starts the process and the connection over its pipes.
func (a *Agent) spawn(path string) error {
	p, err := child.Start(child.Spec{
		Path:       path,
		Args:       a.spec.Args,
		Env:        a.spec.Env,
		Dir:        a.spec.Dir,
		Grace:      a.spec.Grace,
		StderrTail: a.spec.StderrTail,
		Log:        a.log,
		Cgroups:    a.spec.Cgroups,
		Limits:     a.spec.Limits,
		MarkPrefix: a.spec.MarkPrefix,
	})
	if err != nil {
		return fmt.Errorf("acp: %v: %w", err, ErrStart)
	}
	a.proc, a.pid, a.done = p, p.Pid(), p.Done()
	a.log = p.Log() // before anything reads it
	// The SDK reads only what the pump passes on, which starts once the
	// connection and the logger are set.
	pr, pw := io.Pipe()
	a.in = &capsWriter{w: p.Stdin()}
	a.in.sys.text = a.spec.SystemPrompt
	if a.spec.Protocol == ProtocolV2 || a.spec.Protocol == ProtocolAuto {
		a.in.offer, a.in.v2 = a.spec.Protocol, &a.v2
		a.initWait.Store(true)
	}
	a.conn = sdk.NewClientSideConnection(&client{a: a}, a.in, pr)
	a.conn.SetLogger(newSlog(a.log))
	// The pump ends when the agent's stdout does (the process exited or
	// was stopped), or when the SDK's connection ended and nothing reads
	// what it passes on.
	go a.pump(p.Stdout(), pw)
	go func() {
		<-a.conn.Done()
		_ = pr.CloseWithError(errors.New("acp: connection closed"))
	}()
	return nil
}

// Close stops the agent: close stdin, SIGTERM the group, wait Grace, SIGKILL
// the group, and wait for the reap. Idempotent and safe concurrently.
// Close stops the agent: session/close for each of its sessions when the
// agent advertises it (so it can finish writing what it keeps, within
// Spec.CloseTimeout for them all), then the stop sequence. Later calls
// return the first result.
func (a *Agent) Close() error {
	a.closeSessions()
	return a.stop()
}

// stop runs the stop sequence without asking the agent anything first.
func (a *Agent) stop() error {
	a.mu.Lock()
	a.closed = true
	for id, e := range a.early {
		e.timer.Stop()
		delete(a.early, id)
	}
	a.mu.Unlock()
	return a.proc.Close()
}

// Pid is the agent's process id (and its process group id).
func (a *Agent) Pid() int { return a.pid }

// Done is closed once the process has been reaped.
func (a *Agent) Done() <-chan struct{} { return a.done }

// OnExit has f run once the process has been reaped (child.Process.OnExit).
func (a *Agent) OnExit(f func()) { a.proc.OnExit(f) }

// ExitErr is why the process exited; valid after Done.
func (a *Agent) ExitErr() error { return a.proc.ExitErr() }

// ExitKind is child.ExitClean, ExitSignal or ExitError after Done, "" before.
func (a *Agent) ExitKind() string { return a.proc.ExitKind() }

// StderrTail is the last bytes the agent wrote to stderr.
func (a *Agent) StderrTail() string { return a.proc.StderrTail() }

// Mark is the value of child.MarkEnv the agent's whole tree carries.
func (a *Agent) Mark() string { return a.proc.Mark() }

// Cgroup is the agent's own cgroup directory, "" without one.
func (a *Agent) Cgroup() string { return a.proc.Cgroup() }

// CanResume reports the agent's session/resume capability.
func (a *Agent) CanResume() bool { return a.canResume }

// CanClose reports the agent's session/close capability.
func (a *Agent) CanClose() bool { return a.canClose }

// CloseSession runs session/close for native, a session nobody will
// prompt (a spare's session opened ahead that a restored turn did not
// take), and stops routing its updates. Use it when CanClose.
func (a *Agent) CloseSession(ctx context.Context, native string) error {
	if !a.canClose {
		return fmt.Errorf("close session %q: the agent does not advertise session/close", native)
	}
	if _, err := a.conn.CloseSession(ctx, sdk.CloseSessionRequest{SessionId: sdk.SessionId(native)}); err != nil {
		return a.callErr(ctx, "close session", err)
	}
	a.mu.Lock()
	delete(a.routes, native)
	a.mu.Unlock()
	return nil
}

// steeringSupported reads _meta.steering.supported.
func steeringSupported(meta map[string]any) bool {
	st, _ := meta["steering"].(map[string]any)
	ok, _ := st["supported"].(bool)
	return ok
}

// CanSteer reports whether the agent takes text into a running turn
// (_session/steering; claude-agent-acp advertises it in _meta).
func (a *Agent) CanSteer() bool { return a.canSteer }

// SteeringMethod is the extension request that adds text to a session's
// running turn.
const SteeringMethod = "_session/steering"

// ErrNotSteered: the agent did not put the text into a running turn (no
// turn runs); the text is the caller's to send as a prompt of its own.
var ErrNotSteered = errors.New("agent did not steer the text into a running turn")

// steeringParams is what SteeringMethod carries: claude-agent-acp takes
// sessionId and prompt as session/prompt has them, and, with idleBehavior
// promptRequired in _meta, answers promptRequired when no turn runs
// instead of starting a turn of its own the caller would know nothing of.
type steeringParams struct {
	SessionID string             `json:"sessionId"`
	Prompt    []sdk.ContentBlock `json:"prompt"`
	Meta      map[string]any     `json:"_meta"`
}

// steeringAnswer is SteeringMethod's result: outcome is injected (the text
// joined the running turn), promptRequired (no turn runs; reason
// noRunningTurn) or startedNewTurn (an agent that ignored idleBehavior ran
// it as a turn of its own).
type steeringAnswer struct {
	Outcome string `json:"outcome"`
	Reason  string `json:"reason"`
}

// Steer adds text to native's running turn. It returns nil only when the
// agent answers that the text joined the turn; ErrNotSteered when it
// answers otherwise (no turn runs), another error when it refuses.
func (a *Agent) Steer(ctx context.Context, native, text string) error {
	params := steeringParams{
		SessionID: native,
		Prompt:    []sdk.ContentBlock{sdk.TextBlock(text)},
		Meta:      map[string]any{"steering": map[string]any{"idleBehavior": "promptRequired"}},
	}
	raw, err := a.conn.CallExtension(ctx, SteeringMethod, params)
	if err != nil {
		return fmt.Errorf("steer session %q: %w", native, err)
	}
	var ans steeringAnswer
	if err := json.Unmarshal(raw, &ans); err != nil {
		return fmt.Errorf("steer session %q: %w: answer %.200s: %w", native, ErrProtocol, raw, err)
	}
	if ans.Outcome != "injected" {
		return fmt.Errorf("steer session %q: %w: outcome %q, reason %q", native, ErrNotSteered, ans.Outcome, ans.Reason)
	}
	return nil
}

// closeSessions sends session/close for every session of a live agent that
// advertises it, once, bounded by Spec.CloseTimeout for them all. A failure
// only logs: the stop sequence follows anyway.
func (a *Agent) closeSessions() {
	a.mu.Lock()
	if a.closed || !a.canClose || a.conn == nil {
		a.mu.Unlock()
		return
	}
	a.closed = true // no second round, no more held updates
	natives := make([]string, 0, len(a.routes))
	for id := range a.routes {
		natives = append(natives, id)
	}
	a.mu.Unlock()
	select {
	case <-a.done:
		return // nothing left to tell
	case <-a.conn.Done():
		return // its stdout is gone: nobody would answer
	default:
	}
	ctx, cancel := context.WithTimeout(context.Background(), a.spec.CloseTimeout)
	defer cancel()
	// A request can block in a write to an agent that stopped reading; the
	// goroutine ends when the stop sequence closes the pipe.
	done := make(chan struct{})
	go func() {
		defer close(done)
		for _, id := range natives {
			if _, err := a.conn.CloseSession(ctx, sdk.CloseSessionRequest{SessionId: sdk.SessionId(id)}); err != nil {
				a.log.Info("session/close failed; stopping the agent anyway", zap.String("session", id), zap.Error(a.callErr(ctx, "close session", err)))
				continue
			}
			a.log.Debug("session closed", zap.String("session", id))
		}
	}()
	select {
	case <-done:
	case <-a.done:
	case <-ctx.Done():
		a.log.Info("session/close did not answer in time; stopping the agent", zap.Duration("timeout", a.spec.CloseTimeout))
	}
}

// Permission is the policy that answers the agent's permission requests.
func (a *Agent) Permission() permission.Policy { return a.policy.Load().(permission.Policy) }

// SetPermission changes the policy that answers the agent's permission
// requests from the next one on (a config reload); a bad policy is
// refused.
func (a *Agent) SetPermission(p permission.Policy) error {
	if p == "" {
		p = permission.Deny
	}
	if err := p.Check(); err != nil {
		return fmt.Errorf("acp: set permission policy: %w", err)
	}
	a.policy.Store(p)
	return nil
}

// CanLoad reports the agent's loadSession capability.
func (a *Agent) CanLoad() bool { return a.canLoad }

// SetMCPServers sets the MCP servers the next session/new, session/load
// and session/resume carry: what a session needs of its key goes in its
// request, never in the process's environment, so a process spawned before
// its key was known fits any key.
func (a *Agent) SetMCPServers(servers []sdk.McpServer) {
	if servers == nil {
		servers = []sdk.McpServer{} // ACP requires an array; null is rejected
	}
	a.servers.Store(&servers)
}

func (a *Agent) mcpServers() []sdk.McpServer { return *a.servers.Load() }

// SetCwd sets the working directory the next session/new, session/load,
// session/resume and session/fork carry, and to which that session's file
// requests are confined: a key's own worktree, say, on a process started
// (as a spare is) in its binding's dir. The process's own working
// directory stays Spec.Dir. dir must exist.
func (a *Agent) SetCwd(dir string) error {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return fmt.Errorf("acp: session working dir %q: %w", dir, err)
	}
	root, err := filepath.EvalSymlinks(abs)
	if err != nil {
		return fmt.Errorf("acp: session working dir %q: %w", dir, err)
	}
	a.cwd.Store(&workDir{cwd: abs, root: root})
	return nil
}

// Cwd is the working directory the next session request carries.
func (a *Agent) Cwd() string { return a.cwd.Load().cwd }

// Dir is the process's own working directory (Spec.Dir, absolute).
func (a *Agent) Dir() string { return a.spec.Dir }

// SessionCwd is the working directory session native was opened with
// (Spec.Dir for a session this agent did not open).
func (a *Agent) SessionCwd(native string) string { return a.dirOf(native).cwd }

// dirOf is session native's working directory: the one it was opened
// with, else Spec.Dir.
func (a *Agent) dirOf(native string) *workDir {
	a.mu.Lock()
	r := a.routes[native]
	a.mu.Unlock()
	if r != nil {
		r.mu.Lock()
		d := r.dir
		r.mu.Unlock()
		if d != nil {
			return d
		}
	}
	return &workDir{cwd: a.spec.Dir, root: a.root}
}

// NewSession runs session/new with the cwd SetCwd set (Spec.Dir until
// then) and returns the native id.
func (a *Agent) NewSession(ctx context.Context) (string, error) {
	dir := a.cwd.Load()
	resp, err := a.conn.NewSession(ctx, sdk.NewSessionRequest{Meta: a.meta, Cwd: dir.cwd, McpServers: a.mcpServers()})
	if err != nil {
		return "", a.callErr(ctx, "new session", err)
	}
	native := string(resp.SessionId)
	a.opened(native, dir, resp.ConfigOptions, resp.Modes)
	return native, nil
}

// opened routes native, a session the agent just opened in dir, with the
// options and modes it listed, and hands it the updates that came before
// its id.
func (a *Agent) opened(native string, dir *workDir, listed []sdk.SessionConfigOption, modes *sdk.SessionModeState) {
	a.mu.Lock()
	r, ok := a.routes[native]
	if !ok {
		r = &route{}
		a.routes[native] = r
	}
	r.mu.Lock()
	r.dir = dir
	r.mu.Unlock()
	a.releaseEarlyLocked(native, r)
	r.setOptions(options(listed))
	r.setModes(modes)
}

// LoadSession runs session/load; the history the agent replays meanwhile is
// swallowed because the caller already has it.
func (a *Agent) LoadSession(ctx context.Context, native string) error {
	return a.reopen(ctx, native, "load", func(dir string) ([]sdk.SessionConfigOption, *sdk.SessionModeState, error) {
		resp, err := a.conn.LoadSession(ctx, sdk.LoadSessionRequest{Meta: a.meta, SessionId: sdk.SessionId(native), Cwd: dir, McpServers: a.mcpServers()})
		return resp.ConfigOptions, resp.Modes, err
	})
}

// ResumeSession runs session/resume for native: the agent reopens the
// session without replaying its history. Use it when CanResume.
func (a *Agent) ResumeSession(ctx context.Context, native string) error {
	return a.reopen(ctx, native, "resume", func(dir string) ([]sdk.SessionConfigOption, *sdk.SessionModeState, error) {
		resp, err := a.conn.ResumeSession(ctx, sdk.ResumeSessionRequest{Meta: a.meta, SessionId: sdk.SessionId(native), Cwd: dir, McpServers: a.mcpServers()})
		return resp.ConfigOptions, resp.Modes, err
	})
}

// CanFork reports the agent's session/fork capability.
func (a *Agent) CanFork() bool { return a.canFork }

// ForkSession runs session/fork of session source: the agent starts a new
// session with source's history (claude-agent-acp reads it from the
// source's transcript, so the source need not be open in this process)
// and returns its id, which this process alone then serves.
func (a *Agent) ForkSession(ctx context.Context, source string) (string, error) {
	var servers []sdk.UnstableMcpServer
	if raw, err := json.Marshal(a.mcpServers()); err != nil {
		return "", fmt.Errorf("acp: fork session %q: mcp servers: %w", source, err)
	} else if err := json.Unmarshal(raw, &servers); err != nil {
		return "", fmt.Errorf("acp: fork session %q: mcp servers: %w", source, err)
	}
	if servers == nil {
		servers = []sdk.UnstableMcpServer{}
	}
	dir := a.cwd.Load()
	resp, err := a.conn.UnstableForkSession(ctx, sdk.UnstableForkSessionRequest{Meta: a.meta, SessionId: sdk.SessionId(source), Cwd: dir.cwd, McpServers: servers})
	if err != nil {
		return "", a.callErr(ctx, fmt.Sprintf("fork session %q", source), err)
	}
	native := string(resp.SessionId)
	if native == "" {
		return "", fmt.Errorf("acp: fork session %q: the agent answered no session id", source)
	}
	// The unstable answer lists its options in a type of its own, the
	// same on the wire.
	var listed []sdk.SessionConfigOption
	if len(resp.ConfigOptions) > 0 {
		if raw, err := json.Marshal(resp.ConfigOptions); err == nil {
			_ = json.Unmarshal(raw, &listed)
		}
	}
	a.opened(native, dir, listed, resp.Modes)
	return native, nil
}

// reopen routes native while call (session/load or session/resume, with
// the cwd SetCwd set) runs, swallowing what the agent replays (each update
// is progress, see WithProgress), and unroutes it if the agent fails it;
// call returns the config options and modes the agent listed. A request
// the caller gave up on (ctx ended) leaves the session routed and
// swallowing: the agent may still be opening it, and Close then closes it
// before the stop.
func (a *Agent) reopen(ctx context.Context, native, how string, call func(cwd string) ([]sdk.SessionConfigOption, *sdk.SessionModeState, error)) error {
	dir := a.cwd.Load()
	r := &route{loading: true}
	progress := progressOf(ctx)
	a.mu.Lock()
	old, existed := a.routes[native]
	if existed {
		r = old
		r.mu.Lock()
		r.loading, r.progress = true, progress
		r.mu.Unlock()
		a.mu.Unlock()
	} else {
		r.progress = progress
		a.routes[native] = r
		a.releaseEarlyLocked(native, r)
	}
	listed, modes, err := call(dir.cwd)
	// The SDK returns only after the notifications sent before the response
	// were handled, so the whole replay has been swallowed by now, unless
	// the agent goes on replaying after its answer: see afterReplay.
	if err == nil && how == "load" {
		a.afterReplay(ctx)
	}
	gaveUp := err != nil && ctx.Err() != nil && !existed
	r.mu.Lock()
	r.loading, r.progress = gaveUp, nil
	if err == nil {
		r.dir = dir
	}
	r.mu.Unlock()
	if err == nil {
		r.setOptions(options(listed))
		r.setModes(modes)
	}
	if err != nil {
		// A failed reload leaves a session the agent already had usable.
		a.mu.Lock()
		if !existed && !gaveUp && a.routes[native] == r {
			delete(a.routes, native)
		}
		a.mu.Unlock()
		cerr := a.callErr(ctx, fmt.Sprintf("%s session %q", how, native), err)
		if errors.Is(cerr, ErrProtocol) && unknownSession(err, native) {
			cerr = fmt.Errorf("%w (%w)", cerr, ErrUnknownSession)
		}
		return cerr
	}
	return nil
}

// ReplayBarrier is the extension request afterReplay sends: no agent
// implements it, so the answer is an error (method not found).
const ReplayBarrier = "_residentd/replayed"

// replayBarrierWait bounds afterReplay for an agent that does not answer
// a request it does not know.
const replayBarrierWait = 5 * time.Second

// afterReplay returns once what the agent wrote before reading a request
// sent now has been handled: gemini-cli 0.61 answers session/load first
// and sends the replayed history after its answer, which would otherwise
// reach the key's next prompt (or open an agent run). It writes before it
// reads on, so its answer to a request it cannot know (ReplayBarrier)
// comes after the replay, which the route still swallows meanwhile.
func (a *Agent) afterReplay(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, replayBarrierWait)
	defer cancel()
	if _, err := a.conn.CallExtension(ctx, ReplayBarrier, map[string]any{}); err != nil && ctx.Err() != nil {
		a.log.Info("no answer to the request that ends a session/load replay; going on", zap.Error(err))
	}
}

// Prompt sends text as one turn of session native and streams its updates to
// on (sequentially, never after Prompt returns). A prompt that fails after
// it reached the agent returns, with its error, what the agent had reported
// (see partial).
func (a *Agent) Prompt(ctx context.Context, native, text string, on func(Update)) (Result, error) {
	return a.PromptWith(ctx, native, text, nil, on)
}

// PromptWith is Prompt with attachments, sent as Blocks makes them for
// this agent.
func (a *Agent) PromptWith(ctx context.Context, native, text string, atts []Attachment, on func(Update)) (Result, error) {
	return a.PromptMeta(ctx, native, text, atts, nil, on)
}

// PromptMeta is PromptWith with _meta for the session/prompt request (the
// turn's W3C trace context: traceparent, tracestate); nil sends none.
func (a *Agent) PromptMeta(ctx context.Context, native, text string, atts []Attachment, meta map[string]any, on func(Update)) (Result, error) {
	op := promptOp(native) // worded only for an error
	a.mu.Lock()
	r, ok := a.routes[native]
	a.mu.Unlock()
	if !ok {
		return Result{}, fmt.Errorf("acp: %s: session was not created or loaded on this agent (pid %d)", op, a.pid)
	}
	r.mu.Lock()
	if r.on != nil {
		r.mu.Unlock()
		return Result{}, fmt.Errorf("acp: %s: a prompt is already running on this session", op)
	}
	if on == nil {
		on = func(Update) {}
	}
	r.on, r.answered = on, false
	r.text.Reset()
	r.cut = false
	r.tools = nil
	r.mu.Unlock()
	defer func() {
		r.mu.Lock()
		r.on, r.answered = nil, false
		r.mu.Unlock()
	}()

	// The request is written here and its answer taken by the pump
	// (prompt.go), not the SDK's: the same line, the same answer.
	id := a.promptID.Add(1)
	line, err := promptLine(r.line[:0], id, native, Blocks(text, atts, a.caps), meta)
	if err != nil {
		return Result{}, fmt.Errorf("acp: %s: encode the request: %w", op, err)
	}
	r.line = line
	answered := make(chan promptAnswer, 1)
	a.awaitAnswer(id, waiting{ch: answered, r: r})
	if a.v2.Load() {
		a.v2Sent(id, native) // its end is an idle state_update (v2.go)
		defer a.v2Forget(id)
	}
	// The write goroutine ends when the line is written or cannot be (the
	// agent's stdin closed: Close, or its exit); Prompt waits for it
	// either way, since the line is the route's buffer.
	r.writing.Add(1)
	go func() {
		defer r.writing.Done()
		if err := a.in.writeLine(line); err != nil {
			a.forgetAnswer(id)
			select {
			case answered <- promptAnswer{err: sdk.NewInternalError(map[string]any{"error": err.Error()})}:
			default: // answered all the same (the pump delivered first)
			}
		}
	}()
	defer func() {
		a.forgetAnswer(id)
		r.writing.Wait()
	}()

	finish := func(ans promptAnswer) (Result, error) {
		if ans.err != nil {
			return a.partial(r), a.callErr(ctx, op.String(), ans.err)
		}
		res, err := a.result(r, ans.resp)
		if err != nil {
			err = fmt.Errorf("acp: %s: %w", op, err)
		}
		return res, err
	}

	select {
	case ans := <-answered:
		return finish(ans)
	case <-a.conn.Done():
		select {
		case ans := <-answered:
			return finish(ans) // read before the end
		default:
		}
		// The agent's stdout ended: no answer can come.
		return finish(promptAnswer{err: sdk.NewInternalError(map[string]any{"error": "peer disconnected before response"})})
	case <-a.done:
		return a.partial(r), fmt.Errorf("acp: %s: %w", op, a.exitedErr())
	case <-ctx.Done():
	}

	// The turn's deadline or the caller ended it: ask the agent to stop and
	// give it CancelGrace to answer before killing it.
	cause := ctx.Err()
	// The SDK writes without a deadline: an agent that stopped reading
	// stdin would block the cancel (behind the prompt's own write) and with
	// it the grace timer. The goroutine ends when the write does, at the
	// latest when Close below closes stdin.
	go func() {
		if err := a.conn.Cancel(context.Background(), sdk.CancelNotification{SessionId: sdk.SessionId(native)}); err != nil {
			a.log.Debug("send session/cancel", zap.String("session", native), zap.Error(err))
		}
	}()
	t := time.NewTimer(a.spec.CancelGrace)
	defer t.Stop()
	select {
	case ans := <-answered:
		if ans.err != nil {
			return a.partial(r), fmt.Errorf("acp: %s: %w", op, cause)
		}
		res, _ := a.result(r, ans.resp)
		return res, fmt.Errorf("acp: %s: cancelled, agent stopped with %q: %w", op, ans.resp.StopReason, cause)
	case <-a.conn.Done():
		select {
		case ans := <-answered:
			if ans.err == nil {
				res, _ := a.result(r, ans.resp)
				return res, fmt.Errorf("acp: %s: cancelled, agent stopped with %q: %w", op, ans.resp.StopReason, cause)
			}
		default:
		}
		return a.partial(r), fmt.Errorf("acp: %s: %w", op, cause)
	case <-a.done:
		return a.partial(r), fmt.Errorf("acp: %s: %w (and the agent exited: %v)", op, cause, a.exitedErr())
	case <-t.C:
		a.log.Warn("agent did not answer session/cancel; killing it", zap.String("session", native), zap.Duration("cancel_grace", a.spec.CancelGrace))
		_ = a.stop() // it does not answer: no session/close round first
		return a.partial(r), fmt.Errorf("acp: %s: agent did not answer session/cancel within %s and was killed: %w", op, a.spec.CancelGrace, cause)
	}
}

// partial is what a prompt that failed had reported by then: its text so
// far, what it cost (a failed turn was paid for too) and whether the agent
// compacted.
func (a *Agent) partial(r *route) Result {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.takeLocked(Result{Text: r.text.String(), ToolCalls: r.seenCalls()})
}

func (a *Agent) result(r *route, resp sdk.PromptResponse) (Result, error) {
	r.mu.Lock()
	res := Result{StopReason: string(resp.StopReason), Text: r.text.String(), ToolCalls: r.seenCalls()}
	if resp.Usage != nil {
		res.Usage, res.UsageFrom = fromSDKUsage(resp.Usage), UsageFromResponse
	} else if q := quotaUsage(resp.Meta); q != nil {
		res.Usage, res.UsageFrom = q, UsageFromMeta
	}
	res = r.takeLocked(res)
	cut := r.cut
	r.mu.Unlock()
	if cut {
		return res, fmt.Errorf("%w: the reply is longer than %d MiB (max reply); its text is cut there", ErrLimit, MaxReplyBytes>>20)
	}
	return res, nil
}

// takeLocked hands what the route gathered for a result (cost, the
// calls' tokens, a compaction) to res, once; r.mu is held.
func (r *route) takeLocked(res Result) Result {
	res.Cost, res.Compacted = r.cost, r.compacted
	if r.calls != nil {
		res.Usage, res.PerCall, res.UsageFrom = r.calls, true, UsageFromUpdates
	}
	if res.Usage == nil {
		res.UsageFrom = UsageFromNone
	}
	r.cost, r.calls, r.compacted = nil, nil, false
	return res
}

// callErr classifies an SDK call error: process gone, caller's context, or
// the agent's own JSON-RPC error. A request that could not be written
// because the agent's stdin is closed (it exited, or is exiting, before it
// read it) is the process gone too, once its exit is seen.
func (a *Agent) callErr(ctx context.Context, op string, err error) error {
	gone := a.conn.Done()
	if stdinClosed(err) {
		gone = nil // wait below for the exit the closed pipe announces
		t := time.NewTimer(a.spec.Grace)
		select {
		case <-a.conn.Done():
		case <-a.done:
		case <-t.C:
		}
		t.Stop()
		gone = a.conn.Done()
	}
	select {
	case <-gone:
		// stdout closed: the process is exiting, or is useless; make sure it is reaped.
		t := time.NewTimer(a.spec.Grace)
		if lerr := a.limitErr(); lerr != nil {
			_ = a.stop() // it broke a limit: no grace to finish
			return fmt.Errorf("acp: %s: %w (the agent was stopped)", op, lerr)
		}
		select {
		case <-a.done:
		case <-t.C:
			_ = a.stop()
		}
		t.Stop()
		return fmt.Errorf("acp: %s: %w", op, a.exitedErr())
	case <-a.done:
		return fmt.Errorf("acp: %s: %w", op, a.exitedErr())
	default:
	}
	if cerr := ctx.Err(); cerr != nil {
		return fmt.Errorf("acp: %s: %w", op, cerr)
	}
	var re *sdk.RequestError
	if errors.As(err, &re) {
		msg := re.Message
		if re.Data != nil {
			if b, jerr := json.Marshal(re.Data); jerr == nil {
				msg += " " + string(b)
			}
		}
		return fmt.Errorf("acp: %s: %w: code %d: %s", op, ErrProtocol, re.Code, msg)
	}
	return fmt.Errorf("acp: %s: %w", op, err)
}

// stdinClosed reports whether err says a write to the agent's stdin
// failed because the other end is closed; the SDK hands such an error back
// as an internal error with the write's message only.
func stdinClosed(err error) bool {
	if err == nil {
		return false
	}
	if errors.Is(err, syscall.EPIPE) || errors.Is(err, os.ErrClosed) {
		return true
	}
	var re *sdk.RequestError
	if !errors.As(err, &re) || re.Code != -32603 {
		return false // an agent's own error answer says nothing of its stdin
	}
	data, _ := re.Data.(map[string]any)
	msg, _ := data["error"].(string)
	return strings.Contains(msg, "broken pipe") || strings.Contains(msg, "file already closed")
}

// exitedErr describes a reaped process; call only after done is closed.
func (a *Agent) exitedErr() error {
	<-a.done
	why := "exit status 0"
	if err := a.proc.ExitErr(); err != nil {
		why = err.Error()
	}
	if a.proc.ExitKind() == child.ExitOOM {
		why = "oom: killed for exceeding its memory limit (limits.memory_max), " + why
	}
	if lerr := a.limitErr(); lerr != nil {
		return fmt.Errorf("%w, stopped for it (pid %d, %s)", lerr, a.pid, why)
	}
	return fmt.Errorf("%w (pid %d, %s); stderr tail: %q", ErrExited, a.pid, why, a.StderrLines())
}

// Resolve finds the executable a binding's command names, as Start would,
// without running it; the error says why it cannot be started: not on
// PATH, no such file, a directory, or no execute permission.
func Resolve(command string) (string, error) {
	if command == "" {
		return "", errors.New("no command")
	}
	path, err := exec.LookPath(command)
	if err == nil {
		return path, nil
	}
	if !strings.ContainsRune(command, filepath.Separator) {
		return "", fmt.Errorf("command %q not found on PATH", command)
	}
	fi, serr := os.Stat(command)
	switch {
	case errors.Is(serr, fs.ErrNotExist):
		return "", fmt.Errorf("%s does not exist", command)
	case serr != nil:
		return "", fmt.Errorf("%s cannot be read: %w", command, serr)
	case fi.IsDir():
		return "", fmt.Errorf("%s is a directory", command)
	case fi.Mode().Perm()&0o111 == 0:
		return "", fmt.Errorf("%s is not executable (mode %v)", command, fi.Mode().Perm())
	}
	return "", fmt.Errorf("%s is not executable: %w", command, err)
}

// promptOp names a prompt of a native session in an error.
type promptOp string

func (o promptOp) String() string { return fmt.Sprintf("prompt session %q", string(o)) }
