// Package agent owns the built-in deterministic ACP agent (`residentd agent`)
// that tests, the default config and the demo talk to, including its fault modes.
package agent

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"os"
	"os/exec"
	"os/signal"
	"regexp"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	acp "github.com/coder/acp-go-sdk"
)

// Fault modes. Modes that act before a prompt exists only work as --fault.
const (
	FaultExitInitialize       = "exit-initialize"
	FaultExitNew              = "exit-new"
	FaultFailNew              = "fail-new" // write the cause to stderr, answer session/new with an error, and live on
	FaultExitTurn             = "exit-turn"
	FaultHangTurn             = "hang-turn"
	FaultHangIgnoreCancel     = "hang-ignore-cancel"
	FaultGarbageStdout        = "garbage-stdout"
	FaultPartialJSON          = "partial-json"
	FaultFloodStderr          = "flood-stderr"
	FaultUnknownSessionUpdate = "unknown-session-update"
	FaultIgnoreSigterm        = "ignore-sigterm"
	FaultGrandchild           = "grandchild"
	FaultSlowStart            = "slow-start"
	FaultFailTurn             = "fail-turn"
	FaultRefusal              = "refusal"
	FaultLoadFail             = "load-fail"
	FaultStallStdin           = "stall-stdin"  // stop reading stdin and never answer: the client's writes fill the pipe
	FaultEarlyUpdate          = "early-update" // send a session/update for a new session before the session/new reply
	FaultResumeFail           = "resume-fail"
	FaultRestoreFail          = "restore-fail" // both session/resume and session/load fail
	FaultExitRestore          = "exit-restore" // exit during session/resume or session/load
	FaultResumeHang           = "resume-hang"  // never answer session/resume
	FaultBurst                = "burst"        // stream --burst tiny chunks (100,000) before the reply
	FaultLongReplay           = "long-replay"  // session/load replays --replay messages (5,000) before the kept turns
	// FaultCancelOnReject: a turn in which a permission was rejected ends
	// with stop reason cancelled, as codex-acp ends one, though nobody
	// cancelled it.
	FaultCancelOnReject = "cancel-on-reject"
	FaultLateReplay     = "late-replay"  // session/load answers first, then replays the kept turns (gemini-cli 0.61)
	FaultResumeSlow     = "resume-slow"  // session/resume reports --steps progress updates, --step apart, before it answers
	FaultLoadSlow       = "load-slow"    // session/load replays --steps messages, --step apart, before the kept turns
	FaultRestoreHang    = "restore-hang" // never answer session/resume or session/load
)

var knownFaults = map[string]bool{
	FaultExitInitialize: true, FaultExitNew: true, FaultExitTurn: true, FaultHangTurn: true,
	FaultHangIgnoreCancel: true, FaultGarbageStdout: true, FaultPartialJSON: true,
	FaultFloodStderr: true, FaultUnknownSessionUpdate: true, FaultIgnoreSigterm: true,
	FaultGrandchild: true, FaultSlowStart: true, FaultFailNew: true, FaultFailTurn: true, FaultRefusal: true,
	FaultLoadFail: true, FaultStallStdin: true, FaultEarlyUpdate: true,
	FaultResumeFail: true, FaultRestoreFail: true, FaultExitRestore: true,
	FaultBurst: true, FaultLongReplay: true, FaultResumeHang: true, FaultCancelOnReject: true, FaultLateReplay: true,
	FaultResumeSlow: true, FaultLoadSlow: true, FaultRestoreHang: true,
}

// exitFaultCode is the exit status of every fault that makes the agent quit.
const exitFaultCode = 3

// The directives compile on the first prompt, not at package init: init
// runs in every process of the binary, and the agent's start is on the
// daemon's spawn path.
var (
	faultDirective = lazyRegexp(`\[\[fault:([a-z-]+)\]\]`)
	// Test directives make the agent exercise the client's methods; the
	// outcome is reported as an agent_thought_chunk so the reply stays stable.
	readDirective  = lazyRegexp(`\[\[read:([^\]]+)\]\]`)
	writeDirective = lazyRegexp(`\[\[write:([^\]]+)\]\]`)
	permDirective  = lazyRegexp(`\[\[permission:([a-z_]+)\]\]`)
	// floodDirective makes the agent ask N permissions at once, without
	// waiting for any answer first; the thought counts the outcomes.
	floodDirective = lazyRegexp(`\[\[permission-flood:([0-9]+)\]\]`)
	// toolDirective makes the agent run a tool of its own, unasked or not
	// as its session mode says (see modes.go).
	toolDirective = lazyRegexp(`\[\[tool:([a-z_]+)(?::([^\]]+))?\]\]`)
	// switchModeDirective makes the agent move its session to another mode
	// by itself, as claude-agent-acp does on leaving plan mode.
	switchModeDirective = lazyRegexp(`\[\[switch-mode:([a-z]+)\]\]`)
	// compactDirective makes the turn compact the session's context: its
	// usage_update reports less in use than before.
	compactDirective = lazyRegexp(`\[\[compact\]\]`)
	// contextDirective adds N tokens to the session's context in use, as
	// files an agent reads fill its context: a large context without a
	// prompt of that size (the daemon's idle compaction wants 200,000).
	contextDirective = lazyRegexp(`\[\[context:([0-9]+)\]\]`)
	// slashCompact is a prompt of "/compact" alone, as claude-agent-acp
	// takes its slash command: the session compacts and says so with
	// compaction_update.
	slashCompact = lazyRegexp(`^\s*/compact\s*$`)
	// holdDirective makes the turn wait, after a first reply chunk, until
	// the file it names exists: a turn a test can stop mid-prompt and
	// that passes on its next attempt.
	holdDirective = lazyRegexp(`\[\[hold:([^\]]+)\]\]`)
	// noticeDirective sends a notice of the given severity.
	noticeDirective = lazyRegexp(`\[\[notice:([a-z]+)\]\]`)
	// compactionDirective reports a compaction with compaction_update (in
	// progress, then completed with a summary, the completion sent twice as
	// agents repeat it) while the context in use keeps growing.
	compactionDirective = lazyRegexp(`\[\[compaction-update\]\]`)
	// laterDirective sends more output that long after the prompt
	// returned, as an agent that goes on by itself.
	laterDirective = lazyRegexp(`\[\[later:([0-9a-z.]+)\]\]`)
	// backgroundDirective reports background work (a subagent session,
	// running) that ends that long after the prompt returned: the
	// subagent's output, its end, and the agent's own follow-up.
	backgroundDirective = lazyRegexp(`\[\[background:([0-9a-z.]+)\]\]`)
	// stateDirective reports a cycle of the agent's own after the turn:
	// state_update running after the prompt returned, idle D later.
	stateDirective = lazyRegexp(`\[\[state:([0-9a-z.]+)\]\]`)
	// bgDirective (ACP v2) reports background work the turn leaves
	// running, listed on its idle and every state after until it ends D
	// later or is cancelled: a terminal or a tool call (each cancellable
	// on its own) or a subagent session.
	bgDirective = lazyRegexp(`\[\[bg:(terminal|tool_call|subagent):([0-9a-z.]+)\]\]`)
	// callsDirective makes the turn N model calls, each reported on its own.
	callsDirective = lazyRegexp(`\[\[calls:([0-9]+)\]\]`)
	// writeCwdDirective makes the agent write a file into its session's
	// cwd with a tool of its own (not through the client), as coding
	// agents edit the working tree they were given.
	writeCwdDirective = lazyRegexp(`\[\[write-cwd:([^\]]+)\]\]`)
)

func lazyRegexp(expr string) func() *regexp.Regexp {
	return sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(expr) })
}

type options struct {
	state        string
	history      int
	record       string
	noLoad       bool
	noClose      bool
	noResume     bool
	fork         bool // advertise session/fork
	systemPrompt bool // advertise sessionCapabilities.systemPrompt (sysprompt.go)
	noOptions    bool
	image        bool // advertise promptCapabilities.image
	embedded     bool // advertise promptCapabilities.embeddedContext
	noModes      bool
	askMode      string // the id of the mode that asks before each tool call ("" for manual)
	denyTools    string // comma-separated tool kinds its own rules take away ([[tool:KIND]] fails unasked)
	// agentInfo is the name@version the agent gives at initialize: its
	// own, another agent's (--agent-info), or none ("-").
	agentInfo string
	usage     string  // turn (per-turn tokens), total (running totals), detail (with cache and thought tokens), meta (in _meta.quota) or none
	cost      float64 // per turn; reported as the session's running cost
	fault     string
	burst     int           // chunks of the burst fault
	replay    int           // messages of the long-replay fault
	steps     int           // progress updates of resume-slow, replayed messages of load-slow
	step      time.Duration // the time between two of them
	slow      time.Duration
	framing   string
	hold      bool
	holdMiB   int      // memory the --fault grandchild child touches and keeps
	stderr    []string // lines written to stderr at start (--stderr)
	exe       string   // re-exec target for the grandchild fault
	stdoutRaw io.Writer
	protocol  string // auto, 1 or 2: the ACP versions served (v2.go)
}

// Main runs the built-in agent over stdin/stdout until stdin closes and
// returns the process exit code. args may start with the word "agent".
func Main(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	if len(args) > 0 && args[0] == "agent" {
		args = args[1:]
	}
	fs := flag.NewFlagSet("agent", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var o options
	fs.StringVar(&o.state, "state", "", "directory that persists session history so session/load works in a new process")
	fs.IntVar(&o.history, "history", DefaultHistory, "turns a session keeps in memory and in --state, and replays on session/load")
	fs.StringVar(&o.record, "record", "", "file that gets one JSON line per prompt, session/new and session/load")
	fs.BoolVar(&o.noLoad, "no-load", false, "do not advertise the loadSession capability")
	fs.BoolVar(&o.noClose, "no-close", false, "do not advertise session/close")
	fs.BoolVar(&o.noResume, "no-resume", false, "do not advertise session/resume")
	fs.BoolVar(&o.systemPrompt, "system-prompt", false, "advertise sessionCapabilities.systemPrompt (unstable in ACP): take the system prompt a session request carries; the reply adds system=yes when it starts as --expect-framing says")
	fs.BoolVar(&o.fork, "fork", false, "advertise session/fork (unstable in ACP): a new session starts with a copy of another's history")
	fs.BoolVar(&o.noOptions, "no-options", false, "list no session config options (model, mode, verbose)")
	fs.BoolVar(&o.image, "image", false, "advertise promptCapabilities.image: take image blocks in a prompt")
	fs.BoolVar(&o.embedded, "embedded-context", false, "advertise promptCapabilities.embeddedContext: take embedded resource blocks in a prompt")
	fs.BoolVar(&o.noModes, "no-modes", false, "list no session modes (auto, manual)")
	fs.StringVar(&o.denyTools, "deny-tool", "", "comma-separated tool kinds the agent's own rules take away: a [[tool:KIND]] of one fails unasked, \"No such tool available\"")
	fs.StringVar(&o.askMode, "ask-mode", modeManual, "the id of the session mode in which the agent asks before each tool call")
	fs.StringVar(&o.agentInfo, "agent-info", "residentd-builtin@1", "the agentInfo the agent gives at initialize, NAME@VERSION (the last @ splits them); - for none")
	fs.StringVar(&o.usage, "usage", "turn", "token usage in prompt responses: turn (each turn's), total (running totals per process), detail (each turn's with cache and thought tokens), meta (in _meta.quota.token_count, not usage) or none")
	fs.Float64Var(&o.cost, "cost", 0, "cost of each turn; the usage_update reports the process's running total in USD (0: no cost)")
	fs.StringVar(&o.fault, "fault", "", "fault mode for every turn (see package agent)")
	fs.IntVar(&o.burst, "burst", 100000, "chunks the burst fault streams")
	fs.IntVar(&o.replay, "replay", 5000, "messages the long-replay fault replays on session/load")
	fs.IntVar(&o.steps, "steps", 10, "progress updates of --fault resume-slow, replayed messages of --fault load-slow")
	fs.DurationVar(&o.step, "step", 100*time.Millisecond, "the time before each of the --steps of resume-slow and load-slow")
	fs.DurationVar(&o.slow, "slow", time.Second, "startup delay for --fault slow-start")
	fs.StringVar(&o.framing, "expect-framing", "You are ", "prefix that marks a prompt as framed (system prompt first)")
	fs.BoolVar(&o.hold, "hold", false, "block forever (the grandchild of --fault grandchild)")
	fs.Func("stderr", "a line to write to stderr as the agent starts (repeatable), as an agent logs what it starts with", func(s string) error {
		o.stderr = append(o.stderr, s)
		return nil
	})
	fs.StringVar(&o.protocol, "protocol", protocolAuto, "ACP versions served: auto (the version the client asks for at initialize, 1 or 2), 1 or 2 (v2 only: a v1 client's initialize is refused)")
	fs.IntVar(&o.holdMiB, "grandchild-mib", 0, "MiB of memory the child of --fault grandchild touches and keeps while it holds")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0 // the flag set printed the help
		}
		return 2
	}
	if o.hold {
		held := make([]byte, max(o.holdMiB, 0)<<20)
		for i := 0; i < len(held); i += 4096 {
			held[i] = 1 // resident, not only reserved
		}
		blockForever()
		runtime.KeepAlive(held)
	}
	if o.history < 1 {
		fmt.Fprintf(stderr, "builtin: --history %d: keep at least 1 turn\n", o.history)
		return 2
	}
	if !slices.Contains([]string{"turn", "total", "detail", "meta", "none"}, o.usage) {
		fmt.Fprintf(stderr, "builtin: --usage %q: use turn, total, detail, meta or none\n", o.usage)
		return 2
	}
	if o.askMode == "" || o.askMode == modeAuto {
		fmt.Fprintf(stderr, "builtin: --ask-mode %q: name a mode other than %s\n", o.askMode, modeAuto)
		return 2
	}
	if o.protocol != protocolAuto && o.protocol != protocolV1 && o.protocol != protocolV2 {
		fmt.Fprintf(stderr, "builtin: --protocol %q: use auto, 1 or 2\n", o.protocol)
		return 2
	}
	if o.fault != "" && !knownFaults[o.fault] {
		fmt.Fprintf(stderr, "builtin: unknown --fault %q\n", o.fault)
		return 2
	}
	if o.state != "" {
		if err := os.MkdirAll(o.state, 0o700); err != nil {
			fmt.Fprintf(stderr, "builtin: state dir %q: %v\n", o.state, err)
			return 1
		}
	}

	for _, l := range o.stderr {
		fmt.Fprintln(stderr, l)
	}
	switch o.fault {
	case FaultIgnoreSigterm:
		signal.Ignore(syscall.SIGTERM, syscall.SIGHUP)
	case FaultGrandchild:
		if err := spawnGrandchild(stdout, stderr, o.holdMiB); err != nil {
			fmt.Fprintf(stderr, "builtin: spawn grandchild: %v\n", err)
			return 1
		}
	case FaultSlowStart:
		time.Sleep(o.slow)
	}

	out := &lockedWriter{w: stdout, systemPrompt: o.systemPrompt}
	b := &builtin{
		opts:     o,
		out:      out,
		stderr:   stderr,
		sessions: make(map[string]*session),
		exit:     make(chan int, 1),
	}
	b.shim = &v2shim{b: b, mode: o.protocol, out: stdout, prompts: map[string]v2pending{}, asks: map[string]string{}}
	out.w = b.shim
	stdin = b.shim.reader(stdin)
	// The connection reads stdin from the moment it exists; hold the first
	// read until b.conn is set, or a request that arrives at once (the
	// client writes initialize as soon as the process starts) would be
	// handled by a builtin with no connection to answer on.
	if o.systemPrompt {
		stdin = b.sys.readSystemPrompts(stdin)
	}
	in := &gatedReader{r: stdin, open: make(chan struct{}), stall: make(chan struct{}), onData: b.flushLate}
	b.stall = sync.OnceFunc(func() { close(in.stall) })
	conn := acp.NewAgentSideConnection(b, out, in)
	conn.SetLogger(slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn})))
	b.conn = conn
	close(in.open)

	select {
	case <-conn.Done():
		if o.fault == FaultIgnoreSigterm {
			// Models an agent that outlives its client: only SIGKILL ends it.
			blockForever()
		}
		return 0
	case code := <-b.exit:
		return code
	}
}

// spawnGrandchild starts a process that inherits stdout and never exits, the
// way a tool subprocess of a real agent can keep the pipe open, holding mib
// MiB of memory.
func spawnGrandchild(stdout, stderr io.Writer, mib int) error {
	exe, err := os.Executable()
	if err != nil {
		exe = os.Args[0]
	}
	cmd := exec.Command(exe, "agent", "--hold", "--grandchild-mib", strconv.Itoa(mib))
	cmd.Env = os.Environ()
	cmd.Stdout = stdout
	cmd.Stderr = stderr
	if err := cmd.Start(); err != nil {
		return err
	}
	go func() { _ = cmd.Wait() }() // reaps it if it ever ends; lives as long as this process
	return nil
}

func blockForever() {
	for {
		time.Sleep(time.Hour)
	}
}

// lockedWriter serialises the SDK's writes with the raw writes of faults.
// lockedWriter is the agent's stdout: one writer at a time, and a count
// of the prompt answers written, so that what the agent says "after the
// prompt returned" comes after its answer on the wire.
type lockedWriter struct {
	mu        sync.Mutex
	w         io.Writer
	answers   int           // prompt answers written so far
	answered  chan struct{} // closed and replaced when one is written
	elicitFor string        // the session of the next elicitation request (elicit.go)
	// systemPrompt: advertise sessionCapabilities.systemPrompt in the
	// initialize answer (sysprompt.go).
	systemPrompt bool
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if q := l.scoped(l.advertised(p)); len(q) != len(p) {
		if _, err := l.w.Write(q); err != nil {
			return 0, err
		}
		return len(p), nil
	}
	n, err := l.w.Write(p)
	if err == nil && isPromptAnswer(p) {
		l.answers++
		if l.answered != nil {
			close(l.answered)
			l.answered = nil
		}
	}
	return n, err
}

// isPromptAnswer reports whether line is the answer to a session/prompt:
// a JSON-RPC result with a stop reason.
func isPromptAnswer(line []byte) bool {
	if !bytes.Contains(line, []byte(`"stopReason"`)) {
		return false
	}
	var msg struct {
		ID     json.RawMessage `json:"id"`
		Method string          `json:"method"`
		Result *struct {
			StopReason string `json:"stopReason"`
		} `json:"result"`
	}
	return json.Unmarshal(line, &msg) == nil && msg.ID != nil && msg.Method == "" && msg.Result != nil && msg.Result.StopReason != ""
}

// answerCount is how many prompt answers have been written.
func (l *lockedWriter) answerCount() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.answers
}

// waitAnswers returns once n prompt answers have been written, or after
// limit.
func (l *lockedWriter) waitAnswers(n int, limit time.Duration) {
	t := time.NewTimer(limit)
	defer t.Stop()
	for {
		l.mu.Lock()
		if l.answers >= n {
			l.mu.Unlock()
			return
		}
		if l.answered == nil {
			l.answered = make(chan struct{})
		}
		ch := l.answered
		l.mu.Unlock()
		select {
		case <-ch:
		case <-t.C:
			return
		}
	}
}

type turn struct {
	N     int    `json:"n"` // 1 for a session's first turn; numbering outlives the cap
	User  string `json:"user"`
	Reply string `json:"reply"`
}

// session is guarded by builtin.mu, except logged, which io guards with
// the state file it counts.
type session struct {
	ID         string
	Cwd        string
	MCPServers json.RawMessage
	turns      []turn            // the newest --history turns, oldest first
	count      int               // turns taken, kept or not
	options    map[string]string // config option id -> current value; each process starts at the defaults
	mode       string            // session mode (modes.go); each process starts at modeAuto
	used       int               // context tokens in use, as usage_update reports them; [[compact]] drops it

	io     sync.Mutex
	logged int  // turn records in the state file
	broken bool // an append failed and its partial line could not be cut off
}

type builtin struct {
	opts options
	// steering: session -> the mentions steered into its running turn;
	// a session is in it while a turn runs. Guarded by mu.
	steering map[string][]string
	conn     *acp.AgentSideConnection
	sys      systemPrompt // the sessions' system prompt (--system-prompt)
	out      *lockedWriter
	stderr   io.Writer
	exit     chan int
	stall    func() // stops reading stdin for good (stall-stdin)

	mu          sync.Mutex
	compactions int // compaction_updates sent: each compaction's id is cmp-<n>
	sessions    map[string]*session
	// background: session -> its background work still running ([[background:D]],
	// [[state:D]]), each ended early by session/cancel.
	background map[string][]*bgWork
	spent      [2]int  // tokens in, out reported so far by this process (--usage total)
	cost       float64 // cost so far by this process (--cost)
	// late is the replay --fault late-replay writes when the next request
	// arrives after a session/load's answer.
	late [][]byte

	shim     *v2shim              // serves ACP v2 (v2.go)
	cycles   map[string]*bgWork   // session -> its own cycle running ([[state:D]])
	items    map[string][]*bgItem // session -> its listed background items (v2)
	messages map[string]string    // session -> the messageId of its reply chunks (v2)
}

var (
	_ acp.Agent       = (*builtin)(nil)
	_ acp.AgentLoader = (*builtin)(nil)
)

// quit makes Main return code and parks the calling handler so it never answers.
func (b *builtin) quit(reason string) {
	fmt.Fprintf(b.stderr, "builtin: %s, exiting %d\n", reason, exitFaultCode)
	select {
	case b.exit <- exitFaultCode:
	default:
	}
	blockForever()
}

func (b *builtin) Initialize(ctx context.Context, p acp.InitializeRequest) (acp.InitializeResponse, error) {
	if b.opts.fault == FaultExitInitialize {
		b.quit("fault exit-initialize")
	}
	return acp.InitializeResponse{
		ProtocolVersion:   acp.ProtocolVersionNumber,
		AgentCapabilities: b.capabilities(),
		AgentInfo:         b.agentInfo(),
		AuthMethods:       []acp.AuthMethod{},
		// As claude-agent-acp: text sent with _session/steering joins the
		// running turn.
		Meta: map[string]any{"steering": map[string]any{"supported": true}},
	}, nil
}

// agentInfo is who the agent says it is at initialize (--agent-info),
// nil for "-".
func (b *builtin) agentInfo() *acp.Implementation {
	if b.opts.agentInfo == "-" {
		return nil
	}
	name, version := b.opts.agentInfo, ""
	if i := strings.LastIndexByte(name, '@'); i > 0 {
		name, version = name[:i], name[i+1:]
	}
	return &acp.Implementation{Name: name, Version: version}
}

func (b *builtin) Authenticate(ctx context.Context, p acp.AuthenticateRequest) (acp.AuthenticateResponse, error) {
	return acp.AuthenticateResponse{}, nil
}

// Logout is a no-op: the built-in agent has no credentials to drop.
func (b *builtin) Logout(ctx context.Context, p acp.LogoutRequest) (acp.LogoutResponse, error) {
	return acp.LogoutResponse{}, nil
}

func (b *builtin) NewSession(ctx context.Context, p acp.NewSessionRequest) (acp.NewSessionResponse, error) {
	if b.opts.fault == FaultExitNew {
		b.quit("fault exit-new")
	}
	if b.opts.fault == FaultFailNew {
		// The cause on stderr, and as the answer an error that does not
		// say it (claude-agent-acp's "Claude Code process exited with
		// code 1").
		fmt.Fprintln(b.stderr, "builtin: fault fail-new: the session cannot start here (the cause, on stderr only)")
		return acp.NewSessionResponse{}, &acp.RequestError{Code: -32603, Message: "builtin: induced session/new failure: process exited with code 1"}
	}
	var raw [8]byte
	if _, err := rand.Read(raw[:]); err != nil {
		return acp.NewSessionResponse{}, fmt.Errorf("builtin: session id: %w", err)
	}
	mcp, _ := json.Marshal(p.McpServers)
	s := &session{ID: "nat-" + hex.EncodeToString(raw[:]), Cwd: p.Cwd, MCPServers: mcp, options: defaultOptions(), mode: modeAuto}
	b.record(map[string]any{"method": acp.AgentMethodSessionNew, "session": s.ID, "cwd": p.Cwd, "mcp_servers": json.RawMessage(mcp)})
	if err := b.create(s); err != nil {
		return acp.NewSessionResponse{}, err
	}
	b.mu.Lock()
	b.sessions[s.ID] = s
	b.mu.Unlock()
	b.markOpen(s.ID)
	if b.opts.fault == FaultEarlyUpdate {
		// As agents announce their commands: before the client knows the id.
		_ = b.send(ctx, s.ID, acp.SessionUpdate{AvailableCommandsUpdate: &acp.SessionAvailableCommandsUpdate{
			SessionUpdate: "available_commands_update", AvailableCommands: []acp.AvailableCommand{{Name: "review", Description: "review the change"}}}})
	}
	return acp.NewSessionResponse{SessionId: acp.SessionId(s.ID), ConfigOptions: b.configOptions(s), Modes: b.modes(s)}, nil
}

func (b *builtin) LoadSession(ctx context.Context, p acp.LoadSessionRequest) (acp.LoadSessionResponse, error) {
	if b.opts.fault == FaultRestoreHang {
		b.record(map[string]any{"method": acp.AgentMethodSessionLoad, "session": string(p.SessionId), "hang": true})
		blockForever() // other requests (a session/close) are still served
	}
	s, err := b.reopen(acp.AgentMethodSessionLoad, string(p.SessionId), p.Cwd, p.McpServers, b.opts.noLoad, FaultLoadFail)
	if err != nil {
		return acp.LoadSessionResponse{}, err
	}
	b.mu.Lock()
	turns := append([]turn(nil), s.turns...)
	b.mu.Unlock()
	if b.opts.fault == FaultLongReplay {
		// A long history, as a real agent replays one: user and agent
		// messages in turn, before the kept turns.
		for i := range b.opts.replay {
			u := acp.UpdateUserMessageText(fmt.Sprintf("replayed message %d", i))
			if i%2 == 1 {
				u = acp.UpdateAgentMessageText(fmt.Sprintf("replayed message %d", i))
			}
			if err := b.send(ctx, s.ID, u); err != nil {
				return acp.LoadSessionResponse{}, err
			}
		}
	}
	if b.opts.fault == FaultLateReplay {
		// Replayed after the answer: when the next request arrives, before
		// it is handled.
		var lines [][]byte
		for _, t := range turns {
			for _, u := range []acp.SessionUpdate{acp.UpdateUserMessageText(t.User), acp.UpdateAgentMessageText(t.Reply)} {
				line, err := json.Marshal(map[string]any{"jsonrpc": "2.0", "method": acp.ClientMethodSessionUpdate,
					"params": acp.SessionNotification{SessionId: acp.SessionId(s.ID), Update: u}})
				if err != nil {
					return acp.LoadSessionResponse{}, err
				}
				lines = append(lines, append(line, '\n'))
			}
		}
		b.mu.Lock()
		b.late = lines
		b.mu.Unlock()
		turns = nil
	}
	if b.opts.fault == FaultLoadSlow {
		// A history replayed slowly, as an agent on a loaded machine does.
		for i := range b.opts.steps {
			time.Sleep(b.opts.step)
			if err := b.send(ctx, s.ID, acp.UpdateUserMessageText(fmt.Sprintf("slowly replayed message %d", i))); err != nil {
				return acp.LoadSessionResponse{}, err
			}
		}
	}
	for _, t := range turns {
		if err := b.send(ctx, s.ID, acp.UpdateUserMessageText(t.User)); err != nil {
			return acp.LoadSessionResponse{}, err
		}
		if err := b.send(ctx, s.ID, acp.UpdateAgentMessageText(t.Reply)); err != nil {
			return acp.LoadSessionResponse{}, err
		}
	}
	return acp.LoadSessionResponse{ConfigOptions: b.configOptions(s), Modes: b.modes(s)}, nil
}

// Cancel records the session/cancel and ends the session's background
// work at once, reporting it ended (state idle, stop reason cancelled);
// the SDK cancels a running prompt's context itself.
func (b *builtin) Cancel(ctx context.Context, p acp.CancelNotification) error {
	id := string(p.SessionId)
	b.mu.Lock()
	work := b.background[id]
	delete(b.background, id)
	b.mu.Unlock()
	b.record(map[string]any{"method": acp.AgentMethodSessionCancel, "session": id, "background": len(work)})
	for _, w := range work {
		w.end(true)
	}
	return nil
}

// bgWork is one piece of background work: its timer, and what reports it
// ended (once: on time, or cancelled).
type bgWork struct {
	once  sync.Once
	timer *time.Timer
	done  func(cancelled bool)
}

func (w *bgWork) end(cancelled bool) {
	w.once.Do(func() {
		if w.timer != nil {
			w.timer.Stop()
		}
		w.done(cancelled)
	})
}

// startWork runs done(false) d from now unless session/cancel for id ends
// the work first (done(true)).
func (b *builtin) startWork(id string, d time.Duration, done func(cancelled bool)) *bgWork {
	w := &bgWork{done: done}
	b.mu.Lock()
	if b.background == nil {
		b.background = make(map[string][]*bgWork)
	}
	b.background[id] = append(b.background[id], w)
	// Set under b.mu, which a cancel takes before it reads w.timer; the
	// timer's own func waits for b.mu too.
	w.timer = time.AfterFunc(d, func() {
		b.mu.Lock()
		b.background[id] = without(b.background[id], w)
		b.mu.Unlock()
		w.end(false)
	})
	b.mu.Unlock()
	return w
}

func (b *builtin) Prompt(ctx context.Context, p acp.PromptRequest) (acp.PromptResponse, error) {
	id := string(p.SessionId)
	b.mu.Lock()
	s, ok := b.sessions[id]
	b.mu.Unlock()
	if !ok {
		return acp.PromptResponse{}, &acp.RequestError{Code: -32602, Message: fmt.Sprintf("builtin: unknown session %q: call session/new or session/load first", id)}
	}
	var parts []string
	for _, c := range p.Prompt {
		if c.Text != nil {
			parts = append(parts, c.Text.Text)
		}
	}
	text := strings.Join(parts, "\n")
	blocks, err := b.blocks(p.Prompt)
	if err != nil {
		return acp.PromptResponse{}, err
	}
	b.mu.Lock()
	n, cwd, mcp, opts := s.count+1, s.Cwd, s.MCPServers, maps.Clone(s.options)
	b.mu.Unlock()
	line := map[string]any{"method": acp.AgentMethodSessionPrompt, "session": id, "turn": n, "prompt": text, "cwd": cwd, "mcp_servers": mcp, "options": opts}
	if len(blocks) > 0 {
		line["blocks"] = blocks
	}
	// The client's trace context for this prompt (W3C, in _meta).
	for _, k := range []string{"traceparent", "tracestate"} {
		if v, ok := p.Meta[k].(string); ok {
			line[k] = v
		}
	}
	b.record(line)

	fault := b.opts.fault
	if m := faultDirective().FindAllStringSubmatch(text, -1); len(m) > 0 {
		fault = m[len(m)-1][1]
	}
	reply := Summary(text, b.opts.framing, n)
	if b.opts.systemPrompt {
		reply += b.systemSummary()
	}
	b.mu.Lock()
	if b.steering == nil {
		b.steering = map[string][]string{}
	}
	b.steering[id] = nil
	b.mu.Unlock()
	// steered ends the turn's steering and adds what joined it to the reply.
	steered := func() {
		b.mu.Lock()
		joined, ok := b.steering[id]
		delete(b.steering, id)
		b.mu.Unlock()
		if ok && len(joined) > 0 {
			reply += fmt.Sprintf(" steered=%d", len(joined))
		}
	}
	defer steered() // on every early return

	switch fault {
	case FaultExitTurn:
		_ = b.send(ctx, id, acp.UpdateAgentMessageText(chunks(reply)[0]))
		b.quit("fault exit-turn")
	case FaultHangTurn:
		<-ctx.Done()
		return acp.PromptResponse{StopReason: acp.StopReasonCancelled}, nil
	case FaultHangIgnoreCancel:
		blockForever()
	case FaultStallStdin:
		_ = b.send(ctx, id, acp.UpdateAgentThoughtText("stalling stdin"))
		b.stall()
		blockForever()
	case FaultGarbageStdout:
		_, _ = b.out.Write([]byte("this is not json-rpc {\n"))
	case FaultPartialJSON:
		_, _ = b.out.Write([]byte(`{"jsonrpc":"2.0","id":`))
		b.quit("fault partial-json")
	case FaultFloodStderr:
		line := []byte(strings.Repeat("x", 1023) + "\n")
		for range 4096 {
			_, _ = b.stderr.Write(line)
		}
	case FaultUnknownSessionUpdate:
		_ = b.send(ctx, "nat-unknown", acp.UpdateAgentMessageText("for nobody"))
	case FaultBurst:
		// A long reply streamed finely: each chunk a few bytes, as fast as
		// the pipe takes them. Part of the reply, not of what is kept.
		for i := range b.opts.burst {
			if err := b.send(ctx, id, acp.UpdateAgentMessageText(BurstChunk(i))); err != nil {
				return acp.PromptResponse{}, err
			}
		}
	case FaultFailTurn:
		// As a model call that was paid for before the agent failed: the
		// usage update (with its cost) goes out, then the error.
		b.account(ctx, s, text, "")
		return acp.PromptResponse{}, &acp.RequestError{Code: -32603, Message: "builtin: induced failure"}
	}

	if refused := b.directives(ctx, id, text); refused > 0 && fault == FaultCancelOnReject {
		// As codex-acp: a rejected permission ends the turn, cancelled.
		return acp.PromptResponse{StopReason: acp.StopReasonCancelled}, nil
	}
	if m := holdDirective().FindStringSubmatch(text); m != nil {
		if err := b.send(ctx, id, acp.UpdateAgentThoughtText("holding until "+m[1]+" exists")); err != nil {
			return acp.PromptResponse{}, err
		}
		if !waitFile(ctx, m[1]) {
			return acp.PromptResponse{StopReason: acp.StopReasonCancelled}, nil
		}
	}
	steered()
	if strings.Contains(text, truncationMarker) {
		if h := b.fetchHistory(ctx, id, text, mcp); h != "" {
			reply += " " + h
		}
	}

	for _, c := range chunks(reply) {
		if err := b.send(ctx, id, acp.UpdateAgentMessageText(c)); err != nil {
			return acp.PromptResponse{}, err
		}
	}
	in, out, spentIn, spentOut := b.account(ctx, s, text, reply)

	if err := b.commit(s, turn{N: n, User: text, Reply: reply}); err != nil {
		return acp.PromptResponse{}, err
	}
	b.afterwards(id, text)
	stop := acp.StopReasonEndTurn
	if fault == FaultRefusal {
		stop = acp.StopReasonRefusal
	}
	resp := acp.PromptResponse{StopReason: stop}
	switch b.opts.usage {
	case "turn":
		resp.Usage = &acp.Usage{InputTokens: in, OutputTokens: out, TotalTokens: in + out}
	case "total":
		resp.Usage = &acp.Usage{InputTokens: spentIn, OutputTokens: spentOut, TotalTokens: spentIn + spentOut}
	case "detail":
		resp.Usage = detailUsage(in, out)
	case "meta":
		// codex-acp's shape: no usage, the turn's tokens in
		// _meta.quota.token_count.
		read, thought := 2*in, out/2
		resp.Meta = map[string]any{"quota": map[string]any{"token_count": map[string]any{
			"inputTokens": in, "cachedInputTokens": read, "outputTokens": out, "reasoningOutputTokens": thought,
			"totalTokens": in + read + out,
		}}}
	}
	return resp, nil
}

// detailUsage is a turn's usage with every count ACP's Usage has, as
// codex-acp 2.6 reports them: cache reads twice the input, cache writes
// half of it, and half the output reasoning (thought) tokens.
func detailUsage(in, out int) *acp.Usage {
	read, write, thought := 2*in, in/2, out/2
	return &acp.Usage{InputTokens: in, OutputTokens: out, CachedReadTokens: &read, CachedWriteTokens: &write, ThoughtTokens: &thought,
		TotalTokens: in + read + write + out}
}

// afterwards starts what the prompt's [[later:D]] and [[background:D]]
// directives ask for once the prompt has returned. It runs before the
// prompt's handler returns; later output waits for the answer to be
// written first (the SDK writes it after the handler returns), then D.
func (b *builtin) afterwards(id, text string) {
	ctx := context.Background()
	if m := laterDirective().FindStringSubmatch(text); m != nil {
		if d, err := time.ParseDuration(m[1]); err == nil {
			answer := b.out.answerCount() + 1
			go func() {
				b.out.waitAnswers(answer, time.Minute)
				time.Sleep(d)
				_ = b.send(ctx, id, acp.UpdateAgentMessageText("later output, "))
				_ = b.send(ctx, id, acp.UpdateAgentMessageText("after the prompt returned"))
			}()
		}
	}
	if m := backgroundDirective().FindStringSubmatch(text); m != nil {
		if d, err := time.ParseDuration(m[1]); err == nil {
			sub := id + "-bg"
			_ = b.sendRaw(ctx, id, map[string]any{"sessionUpdate": "subagent_update", "sessionId": sub, "title": "builtin background work", "state": map[string]any{"state": "running"}})
			b.startWork(id, d, b.afterAnswer(func(cancelled bool) {
				if cancelled {
					_ = b.sendRaw(ctx, id, map[string]any{"sessionUpdate": "subagent_update", "sessionId": sub, "state": map[string]any{"state": "idle", "stopReason": "cancelled"}})
					return
				}
				_ = b.send(ctx, sub, acp.UpdateAgentMessageText("background work output"))
				_ = b.sendRaw(ctx, id, map[string]any{"sessionUpdate": "subagent_update", "sessionId": sub, "state": map[string]any{"state": "idle", "stopReason": "end_turn"}})
				_ = b.send(ctx, id, acp.UpdateAgentMessageText("background work done"))
			}))
		}
	}
	b.startItems(id, text)
	if m := stateDirective().FindStringSubmatch(text); m != nil {
		if d, err := time.ParseDuration(m[1]); err == nil {
			// A cycle of the agent's own after the turn: running from
			// its answer on until it ends, as v2's state_update says it
			// (the top-level string).
			b.ownCycle(id, d)
		}
	}
}

// afterAnswer is done, when the work ends by itself, only once the
// running prompt's answer is written: work that ends sooner than the
// answer goes out still ends after it.
func (b *builtin) afterAnswer(done func(cancelled bool)) func(cancelled bool) {
	answer := b.out.answerCount() + 1
	return func(cancelled bool) {
		if !cancelled {
			b.out.waitAnswers(answer, time.Minute)
		}
		done(cancelled)
	}
}

// BurstChunk is the i-th chunk the burst fault streams.
func BurstChunk(i int) string { return fmt.Sprintf("<%d>", i) }

// account counts a turn's tokens (a quarter of its bytes) and cost and
// sends the usage_update: context in use (every turn so far, until a
// [[compact]] directive summarises it down to this turn's reply, as agents
// compact) and, with --cost, the process's running cost. It returns the
// turn's tokens and the process's totals. A turn with [[calls:N]] makes N
// model calls of that size: one usage_update each, with the call's tokens
// in _meta.usage, and it returns the last call's tokens only (as an agent
// that reports the last call in its prompt response).
func (b *builtin) account(ctx context.Context, s *session, text, reply string) (in, out, spentIn, spentOut int) {
	calls, perCall := 1, false
	if m := callsDirective().FindStringSubmatch(text); m != nil {
		if n, err := strconv.Atoi(m[1]); err == nil && n >= 1 {
			calls, perCall = n, true
		}
	}
	in, out = len(text)/4, len(reply)/4
	for range calls {
		b.mu.Lock()
		b.spent[0] += in
		b.spent[1] += out
		b.cost += b.opts.cost
		spentIn, spentOut = b.spent[0], b.spent[1]
		cost := b.cost
		if compactDirective().MatchString(text) || slashCompact().MatchString(text) {
			s.used = out
		} else {
			s.used += in + out + contextTokens(text)
		}
		used := s.used
		b.mu.Unlock()
		meta := map[string]any{"inputTokens": in, "outputTokens": out}
		if perCall {
			call := &acp.Usage{InputTokens: in, OutputTokens: out, TotalTokens: in + out}
			if b.opts.usage == "detail" {
				call = detailUsage(in, out)
			}
			meta = map[string]any{"usage": call}
		}
		uu := &acp.SessionUsageUpdate{Used: used, Size: 200000, Meta: meta}
		if b.opts.cost > 0 {
			uu.Cost = &acp.Cost{Amount: cost, Currency: "USD"}
		}
		_ = b.send(ctx, string(s.ID), acp.SessionUpdate{UsageUpdate: uu})
	}
	return in, out, spentIn, spentOut
}

// contextTokens is what a [[context:N]] directive in text adds to the
// context in use, 0 without one.
func contextTokens(text string) int {
	if m := contextDirective().FindStringSubmatch(text); m != nil {
		if n, err := strconv.Atoi(m[1]); err == nil {
			return n
		}
	}
	return 0
}

// SteeringMethod is the extension request that adds text to a session's
// running turn.
const SteeringMethod = "_session/steering"

// steeringParams is what SteeringMethod carries, as claude-agent-acp takes
// it: session/prompt's sessionId and prompt, and _meta.steering.idleBehavior.
type steeringParams struct {
	SessionID string             `json:"sessionId"`
	Prompt    []acp.ContentBlock `json:"prompt"`
	Meta      struct {
		Steering struct {
			IdleBehavior string `json:"idleBehavior"`
		} `json:"steering"`
	} `json:"_meta"`
}

// HandleExtensionMethod answers _session/steering as claude-agent-acp
// does: the text joins the session's running turn (its reply says
// steered=N) and the answer is {"outcome":"injected"}; when no turn runs
// and the client opted in (idleBehavior promptRequired) the answer is
// {"outcome":"promptRequired","reason":"noRunningTurn"}, so the client
// sends it as a turn of its own; without the opt-in, an error.
func (b *builtin) HandleExtensionMethod(ctx context.Context, method string, params json.RawMessage) (any, error) {
	if method != SteeringMethod {
		return nil, acp.NewMethodNotFound(method)
	}
	var p steeringParams
	if err := json.Unmarshal(params, &p); err != nil {
		return nil, &acp.RequestError{Code: -32602, Message: "builtin: steering params: " + err.Error()}
	}
	if p.SessionID == "" || len(p.Prompt) == 0 {
		return nil, &acp.RequestError{Code: -32602, Message: "builtin: steering params require a sessionId and a non-empty prompt"}
	}
	if ib := p.Meta.Steering.IdleBehavior; ib != "" && ib != "promptRequired" {
		return nil, &acp.RequestError{Code: -32602, Message: fmt.Sprintf("builtin: unsupported steering idleBehavior %q", ib)}
	}
	var parts []string
	for _, c := range p.Prompt {
		if c.Text != nil {
			parts = append(parts, c.Text.Text)
		}
	}
	text := strings.Join(parts, "\n")
	b.mu.Lock()
	joined, running := b.steering[p.SessionID]
	if running {
		b.steering[p.SessionID] = append(joined, text)
	}
	b.mu.Unlock()
	if !running {
		if p.Meta.Steering.IdleBehavior == "promptRequired" {
			return map[string]any{"outcome": "promptRequired", "reason": "noRunningTurn"}, nil
		}
		return nil, &acp.RequestError{Code: -32002, Message: fmt.Sprintf("builtin: no turn is running in session %q", p.SessionID)}
	}
	b.record(map[string]any{"method": SteeringMethod, "session": p.SessionID, "prompt": text})
	return map[string]any{"outcome": "injected"}, nil
}

// waitFile waits until path exists (true) or ctx ends (false).
func waitFile(ctx context.Context, path string) bool {
	t := time.NewTicker(10 * time.Millisecond)
	defer t.Stop()
	for {
		if _, err := os.Stat(path); err == nil {
			return true
		}
		select {
		case <-ctx.Done():
			return false
		case <-t.C:
		}
	}
}

// directives runs the test-only client calls found in the prompt and
// returns how many of its permission requests were not allowed.
func (b *builtin) directives(ctx context.Context, id, text string) (refused int) {
	for _, m := range readDirective().FindAllStringSubmatch(text, -1) {
		resp, err := b.conn.ReadTextFile(ctx, acp.ReadTextFileRequest{SessionId: acp.SessionId(id), Path: m[1]})
		b.thought(ctx, id, "read "+m[1], resp.Content, err)
	}
	for _, m := range writeDirective().FindAllStringSubmatch(text, -1) {
		_, err := b.conn.WriteTextFile(ctx, acp.WriteTextFileRequest{SessionId: acp.SessionId(id), Path: m[1], Content: "written by builtin\n"})
		b.thought(ctx, id, "write "+m[1], "", err)
	}
	for _, m := range writeCwdDirective().FindAllStringSubmatch(text, -1) {
		path, err := b.writeCwd(id, m[1])
		b.thought(ctx, id, "write-cwd "+m[1], path, err)
	}
	for _, m := range noticeDirective().FindAllStringSubmatch(text, -1) {
		_ = b.sendRaw(ctx, id, map[string]any{"sessionUpdate": "notice", "severity": m[1], "title": "builtin " + m[1] + " notice", "description": "asked for by a directive"})
	}
	if compactionDirective().MatchString(text) || slashCompact().MatchString(text) {
		b.mu.Lock()
		b.compactions++
		cid := fmt.Sprintf("cmp-%d", b.compactions)
		b.mu.Unlock()
		_ = b.sendRaw(ctx, id, map[string]any{"sessionUpdate": "compaction_update", "compactionId": cid, "status": "in_progress"})
		done := map[string]any{"sessionUpdate": "compaction_update", "compactionId": cid, "status": "completed",
			"summary": []map[string]string{{"type": "text", "text": "builtin summary of the session so far"}}}
		_ = b.sendRaw(ctx, id, done)
		_ = b.sendRaw(ctx, id, done)
	}
	for _, m := range permDirective().FindAllStringSubmatch(text, -1) {
		resp, err := b.askPermission(ctx, id, "call-1", "builtin "+m[1]+" tool", acp.ToolKind(m[1]))
		outcome := "cancelled"
		if resp.Outcome.Selected != nil {
			outcome = "selected " + string(resp.Outcome.Selected.OptionId)
		}
		if !strings.HasPrefix(outcome, "selected allow") {
			refused++
		}
		b.thought(ctx, id, "permission "+m[1], outcome, err)
	}
	for _, m := range floodDirective().FindAllStringSubmatch(text, -1) {
		n, _ := strconv.Atoi(m[1])
		n = min(n, maxFlood)
		var (
			mu     sync.Mutex
			counts = map[string]int{}
			wg     sync.WaitGroup
		)
		for i := range n {
			wg.Go(func() {
				call := "flood-" + strconv.Itoa(i+1)
				resp, err := b.askPermission(ctx, id, call, "builtin flood tool "+strconv.Itoa(i+1), acp.ToolKindExecute)
				outcome := "cancelled"
				switch {
				case err != nil:
					outcome = "error"
				case resp.Outcome.Selected != nil:
					outcome = string(resp.Outcome.Selected.OptionId)
				}
				mu.Lock()
				counts[outcome]++
				mu.Unlock()
			})
		}
		wg.Wait()
		outcomes := make([]string, 0, len(counts))
		for o, c := range counts {
			outcomes = append(outcomes, o+"="+strconv.Itoa(c))
		}
		sort.Strings(outcomes)
		b.thought(ctx, id, "permission-flood "+strconv.Itoa(n), strings.Join(outcomes, " "), nil)
	}
	for i, m := range toolDirective().FindAllStringSubmatch(text, -1) {
		if !b.runTool(ctx, id, i+1, m[1], m[2]) {
			refused++
		}
	}
	for _, m := range switchModeDirective().FindAllStringSubmatch(text, -1) {
		b.switchMode(ctx, id, m[1])
	}
	b.elicit(ctx, id, text)
	return refused
}

// maxFlood bounds [[permission-flood:N]].
const maxFlood = 10000

// askPermission sends session/request_permission for one tool call with
// the four options every test directive offers.
func (b *builtin) askPermission(ctx context.Context, sid, call, title string, kind acp.ToolKind) (acp.RequestPermissionResponse, error) {
	return b.conn.RequestPermission(ctx, acp.RequestPermissionRequest{
		SessionId: acp.SessionId(sid),
		ToolCall:  acp.ToolCallUpdate{ToolCallId: acp.ToolCallId(call), Title: &title, Kind: &kind},
		Options: []acp.PermissionOption{
			{OptionId: "allow", Name: "Allow", Kind: acp.PermissionOptionKindAllowOnce},
			{OptionId: "allow-always", Name: "Always allow", Kind: acp.PermissionOptionKindAllowAlways},
			{OptionId: "reject", Name: "Reject", Kind: acp.PermissionOptionKindRejectOnce},
			{OptionId: "reject-always", Name: "Never allow", Kind: acp.PermissionOptionKindRejectAlways},
		},
	})
}

func (b *builtin) thought(ctx context.Context, id, what, result string, err error) {
	msg := what + " ok: " + result
	if err != nil {
		msg = what + " error: " + err.Error()
	}
	_ = b.send(ctx, id, acp.UpdateAgentThoughtText(msg))
}

// gatedReader blocks reads until open is closed, and for good once stall is
// (the stall-stdin fault).
type gatedReader struct {
	r           io.Reader
	open, stall chan struct{}
	// onData runs when a read got data, before the SDK sees it.
	onData func()
}

func (g *gatedReader) Read(p []byte) (int, error) {
	<-g.open
	select {
	case <-g.stall:
		blockForever()
	default:
	}
	n, err := g.r.Read(p)
	if n > 0 && g.onData != nil {
		g.onData()
	}
	return n, err
}

// flushLate writes the replay --fault late-replay held back from a
// session/load's answer: the next request has arrived and is not handled
// yet, as gemini-cli 0.61 writes its replay before it reads on.
func (b *builtin) flushLate() {
	b.mu.Lock()
	lines := b.late
	b.late = nil
	b.mu.Unlock()
	for _, line := range lines {
		if _, err := b.out.Write(line); err != nil {
			return
		}
	}
}

// sendRaw sends an update the SDK has no type for, as its JSON.
func (b *builtin) sendRaw(ctx context.Context, id string, update map[string]any) error {
	line, err := json.Marshal(map[string]any{"jsonrpc": "2.0", "method": acp.ClientMethodSessionUpdate,
		"params": map[string]any{"sessionId": id, "update": update}})
	if err != nil {
		return err
	}
	_, err = b.out.Write(append(line, '\n'))
	return err
}

func (b *builtin) send(ctx context.Context, id string, u acp.SessionUpdate) error {
	return b.conn.SessionUpdate(ctx, acp.SessionNotification{SessionId: acp.SessionId(id), Update: u})
}

func (b *builtin) ListSessions(ctx context.Context, p acp.ListSessionsRequest) (acp.ListSessionsResponse, error) {
	return acp.ListSessionsResponse{}, acp.NewMethodNotFound(acp.AgentMethodSessionList)
}

// ResumeSession reopens a saved session as LoadSession does, without
// replaying its history to the client.
func (b *builtin) ResumeSession(ctx context.Context, p acp.ResumeSessionRequest) (acp.ResumeSessionResponse, error) {
	if b.opts.fault == FaultResumeHang || b.opts.fault == FaultRestoreHang {
		b.record(map[string]any{"method": acp.AgentMethodSessionResume, "session": string(p.SessionId), "hang": true})
		blockForever() // other requests (a session/load, a session/close) are still served
	}
	s, err := b.reopen(acp.AgentMethodSessionResume, string(p.SessionId), p.Cwd, p.McpServers, b.opts.noResume, FaultResumeFail)
	if err != nil {
		return acp.ResumeSessionResponse{}, err
	}
	if b.opts.fault == FaultResumeSlow {
		// A slow resume that says how it gets on, as a thought.
		for i := range b.opts.steps {
			time.Sleep(b.opts.step)
			if err := b.send(ctx, s.ID, acp.UpdateAgentThoughtText(fmt.Sprintf("reopening: step %d of %d", i+1, b.opts.steps))); err != nil {
				return acp.ResumeSessionResponse{}, err
			}
		}
	}
	b.resumeSnapshot(s.ID)
	return acp.ResumeSessionResponse{ConfigOptions: b.configOptions(s), Modes: b.modes(s)}, nil
}

// reopen is session/load and session/resume up to the replay: the record,
// the capability (off), the faults (its own fail, restore-fail, exit-restore),
// then the saved session with the client's cwd and MCP servers.
func (b *builtin) reopen(method, id, cwd string, servers []acp.McpServer, off bool, fail string) (*session, error) {
	mcp, _ := json.Marshal(servers)
	b.record(map[string]any{"method": method, "session": id, "cwd": cwd, "mcp_servers": json.RawMessage(mcp)})
	if off {
		return nil, acp.NewMethodNotFound(method)
	}
	switch b.opts.fault {
	case FaultExitRestore:
		b.quit("fault exit-restore")
	case fail, FaultRestoreFail:
		return nil, &acp.RequestError{Code: -32603, Message: "builtin: induced " + strings.TrimPrefix(method, "session/") + " failure"}
	}
	s, err := b.lookup(id)
	if err != nil {
		return nil, err
	}
	b.markOpen(id)
	b.mu.Lock()
	s.Cwd, s.MCPServers = cwd, mcp
	if s.options == nil {
		s.options = defaultOptions()
	}
	if s.mode == "" {
		s.mode = modeAuto
	}
	b.mu.Unlock()
	return s, nil
}

// capabilities is what the agent advertises at initialize.
func (b *builtin) capabilities() acp.AgentCapabilities {
	c := acp.AgentCapabilities{LoadSession: !b.opts.noLoad, PromptCapabilities: acp.PromptCapabilities{Image: b.opts.image, EmbeddedContext: b.opts.embedded}}
	if !b.opts.noClose {
		c.SessionCapabilities.Close = &acp.SessionCloseCapabilities{}
	}
	if !b.opts.noResume {
		c.SessionCapabilities.Resume = &acp.SessionResumeCapabilities{}
	}
	if b.opts.fork {
		c.SessionCapabilities.Fork = &acp.SessionForkCapabilities{}
	}
	return c
}

// UnstableForkSession (session/fork, with --fork) starts a new session
// with a copy of the source session's history, found as session/load finds
// it (in memory, or in --state), and its turn count: the fork's first reply
// says turn=<source's turns + 1>. The source goes on unchanged. --record
// gets a session/fork line with the source and the turns copied.
func (b *builtin) UnstableForkSession(ctx context.Context, p acp.UnstableForkSessionRequest) (acp.UnstableForkSessionResponse, error) {
	mcp, _ := json.Marshal(p.McpServers)
	rec := map[string]any{"method": acp.AgentMethodSessionFork, "source": string(p.SessionId), "cwd": p.Cwd, "mcp_servers": json.RawMessage(mcp)}
	if !b.opts.fork {
		b.record(rec)
		return acp.UnstableForkSessionResponse{}, acp.NewMethodNotFound(acp.AgentMethodSessionFork)
	}
	src, err := b.lookup(string(p.SessionId))
	if err != nil {
		b.record(rec)
		return acp.UnstableForkSessionResponse{}, err
	}
	var raw [8]byte
	if _, err := rand.Read(raw[:]); err != nil {
		return acp.UnstableForkSessionResponse{}, fmt.Errorf("builtin: session id: %w", err)
	}
	s := &session{ID: "nat-" + hex.EncodeToString(raw[:]), Cwd: p.Cwd, MCPServers: mcp, options: defaultOptions(), mode: modeAuto}
	b.mu.Lock()
	s.turns = append([]turn(nil), src.turns...)
	s.count = src.count
	b.mu.Unlock()
	rec["session"], rec["turns"] = s.ID, s.count
	b.record(rec)
	if b.opts.state != "" {
		if err := b.compact(s); err != nil {
			return acp.UnstableForkSessionResponse{}, err
		}
	}
	b.mu.Lock()
	b.sessions[s.ID] = s
	b.mu.Unlock()
	return acp.UnstableForkSessionResponse{SessionId: acp.SessionId(s.ID), ConfigOptions: unstableOptions(b.configOptions(s)), Modes: b.modes(s)}, nil
}

// unstableOptions is opts in the unstable answers' type, the same on the
// wire.
func unstableOptions(opts []acp.SessionConfigOption) []acp.UnstableSessionConfigOption {
	var out []acp.UnstableSessionConfigOption
	if raw, err := json.Marshal(opts); err == nil {
		_ = json.Unmarshal(raw, &out)
	}
	return out
}

func (b *builtin) CloseSession(ctx context.Context, p acp.CloseSessionRequest) (acp.CloseSessionResponse, error) {
	b.record(map[string]any{"method": acp.AgentMethodSessionClose, "session": string(p.SessionId)})
	if b.opts.noClose {
		return acp.CloseSessionResponse{}, acp.NewMethodNotFound(acp.AgentMethodSessionClose)
	}
	b.mu.Lock()
	delete(b.sessions, string(p.SessionId))
	b.mu.Unlock()
	b.unmarkOpen(string(p.SessionId))
	return acp.CloseSessionResponse{}, nil
}

// errUnknownSession is returned by session/load for an id this agent cannot restore.
var errUnknownSession = errors.New("unknown session")

// without is list less its first x, in a new array: a reader holding the
// old slice is undisturbed.
func without[T comparable](list []T, x T) []T {
	if i := slices.Index(list, x); i >= 0 {
		return append(list[:i:i], list[i+1:]...)
	}
	return list
}
