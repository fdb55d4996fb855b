// Package config owns residentd's settings: the daemon's limits and the
// bindings that say how to start each agent, read from one JSON file or the
// built-in default.
package config

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/residentd/residentd/apitype"
	"github.com/residentd/residentd/internal/channel"
	"github.com/residentd/residentd/internal/delivery"
	"github.com/residentd/residentd/internal/permission"
	"github.com/residentd/residentd/internal/regfile"
	"github.com/residentd/residentd/internal/run"
	"github.com/residentd/residentd/internal/workspace"
)

// Duration is a time.Duration written as "30m" in JSON.
type Duration time.Duration

func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(time.Duration(d).String()) }

func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("duration must be a string such as \"30m\": %w", err)
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return err
	}
	*d = Duration(v)
	return nil
}

// Binding says how to start one agent and how to talk to it.
type Binding struct {
	ID      string            `json:"id"`
	Comment string            `json:"comment,omitempty"` // for the people who read the file (JSON has no comments); ignored
	Handle  string            `json:"handle"`            // the agent's chat handle, e.g. "@claude"
	Runtime string            `json:"runtime"`           // reported in the mention payload
	Command string            `json:"command"`
	Args    []string          `json:"args,omitempty"`
	Env     map[string]string `json:"env,omitempty"`
	Dir     string            `json:"dir,omitempty"` // working directory; default the daemon's state dir/work/<binding>

	System     string `json:"system,omitempty"`      // system framing text
	SystemFile string `json:"system_file,omitempty"` // or a file holding it
	Brief      string `json:"brief,omitempty"`       // overrides the default brief
	// BriefPlacement is "framing" (the default for a resident binding) or
	// "turn" (the default for the others, and the source's).
	BriefPlacement delivery.Placement `json:"brief_placement,omitempty"`
	// BriefEvery re-sends the full brief every N warm turns when it lives in
	// the framing, so a session that compacted its history gets it back.
	BriefEvery int `json:"brief_every,omitempty"`
	// SystemPlacement says where the framing goes: "system_prompt" (the
	// default: the session's system prompt, on session/new, load, resume
	// and fork, where the agent advertises it takes one; the first turn
	// otherwise) or "turn" (always the first turn of a cold or restored
	// process).
	SystemPlacement string `json:"system_placement,omitempty"`

	// Supervised and Resident go into every mention payload. Resident keeps
	// the key's process between turns, and with it a watermark (see
	// KeepsSession).
	Supervised bool `json:"supervised"`
	Resident   bool `json:"resident"`
	// SavedSession is an exact native session id to load for every process.
	SavedSession string `json:"saved_session,omitempty"`
	// Restore reopens a key's last native session when a new process
	// starts; on by default.
	Restore *bool `json:"restore,omitempty"`
	// RestoreMethod picks how: "auto" (default: session/resume when the
	// agent offers it, else session/load), "resume" or "load" only.
	RestoreMethod string `json:"restore_method,omitempty"`
	// SessionOptions are the agent's session config options (model, mode,
	// reasoning effort, …) by id and value, set with
	// session/set_config_option when a session is created, loaded or
	// resumed; a boolean option takes "true" or "false".
	SessionOptions map[string]string `json:"session_options,omitempty"`
	// Permission answers the agent's permission requests: deny (default),
	// read-only or allow.
	Permission permission.Policy `json:"permission,omitempty"`
	// Tools passes the channel tools (MCP) to the agent; on by default.
	Tools *bool `json:"tools,omitempty"`
	// OmitOwnPosts leaves the agent's own channel posts out of its context
	// block; on by default.
	OmitOwnPosts *bool `json:"omit_own_posts,omitempty"`

	TurnTimeout Duration `json:"turn_timeout,omitempty"` // default 10m
	// StartTimeout bounds the start of one of the binding's agent
	// processes: its spawn and ACP initialize. A start that runs past it
	// is tried once more with twice the limit before it counts as a
	// failure; default DefaultStartTimeout.
	StartTimeout Duration `json:"start_timeout,omitempty"`
	// PermissionTimeout is how long a permission request put to a person
	// (policy ask or read-only+ask) waits before it is rejected; default 5m.
	PermissionTimeout Duration `json:"permission_timeout,omitempty"`
	// Approvers decides who may answer the agent's permission and
	// elicitation requests: "any" (default), "author" (the mention's
	// author) or a list of the chat's user ids.
	Approvers Approvers `json:"approvers,omitzero"`
	// Elicitation tells the agent at initialize that a person may be asked
	// to fill in a form (ACP elicitation); on by default. Off, no form is
	// advertised, and claude-agent-acp keeps its AskUserQuestion tool off.
	Elicitation *bool `json:"elicitation,omitempty"`

	// Limits bound the agent's whole process tree.
	Limits Limits `json:"limits,omitempty"`

	// UsageTotals says the agent's prompt responses report running token
	// totals for its process rather than each turn's: residentd then takes
	// per-turn deltas (the baseline starts at 0 for every new process).
	UsageTotals bool `json:"usage_totals,omitempty"`
	// Prices price a turn the agent reports tokens for but no cost.
	Prices *Prices `json:"prices,omitempty"`

	// RetryInterrupted runs a turn that was in flight when the daemon
	// stopped (clean or killed) again, as a new attempt of the same run,
	// when the daemon next starts; on by default.
	RetryInterrupted *bool `json:"retry_interrupted,omitempty"`

	// Bursts says what mentions that arrive while the key's turn runs do:
	// "queue" (the default: each runs as its own turn, in order) or
	// "coalesce" (those waiting when the key frees run as one turn that
	// lists each of them) or "steer" (each joins the running turn, where
	// the agent takes steering; otherwise it queues).
	Bursts string `json:"bursts,omitempty"`

	// Scope says what a session is kept for: "channel" (the default: one
	// session per channel, whatever thread a mention is in) or "thread" (a
	// mention inside a thread has a session of its own, forked from the
	// channel's where the agent offers session/fork).
	Scope string `json:"scope,omitempty"`

	// Spare is how many of the binding's agent processes are kept spawned
	// and initialized ahead, with no key yet, so a cold or restored turn
	// takes one instead of waiting for a spawn: 0 to 2; default 1
	// (DefaultSpare), 0 for the built-in agent, which starts in
	// milliseconds.
	Spare *int `json:"spare,omitempty"`
	// SpareAtStart starts the binding's spares when the daemon starts;
	// without it (the default) they start only after the binding's first
	// turn since the daemon started.
	SpareAtStart bool `json:"spare_at_start,omitempty"`
	// Residency settings (residency.go): the provider cache's TTL, whether a
	// restore keeps it, who times the agent's idle compaction, and cache
	// keep-alives.
	CacheTTL          string `json:"cache_ttl,omitempty"`
	RestoreKeepsCache *bool  `json:"restore_keeps_cache,omitempty"`
	IdleCompaction    string `json:"idle_compaction,omitempty"`
	KeepAlive         bool   `json:"keep_alive,omitempty"`

	// SpareSession has each spare open a session ahead (session/new, the
	// channel tools' capability bound to no channel until a turn takes
	// it), so a cold turn that takes the spare starts on it: default true.
	// False keeps spares at initialize, for less memory (claude-agent-acp
	// starts the Claude Code CLI for a session).
	SpareSession *bool `json:"spare_session,omitempty"`

	// Workspace is where the binding's sessions work: "shared" (the
	// default: every key in dir) or "worktree" (each key in a git worktree
	// of its own of dir, which must then be a repository's top folder with
	// a commit; see internal/workspace).
	Workspace string `json:"workspace,omitempty"`

	// Protocol is the ACP version spoken with the binding's agent: "1"
	// (the default), "2", or "auto" (v2 offered at initialize, the
	// version the agent answers taken).
	Protocol string `json:"protocol,omitempty"`
	// BackgroundLimit, when set, is the binding's own background_limit:
	// how long one of its processes with work listed or reported running
	// and no turn in flight is kept from the idle reaper and eviction.
	BackgroundLimit Duration `json:"background_limit,omitempty"`
}

// BackgroundLimitOr is the binding's background_limit, or def (the
// daemon's) when it sets none.
func (b Binding) BackgroundLimitOr(def Duration) Duration {
	if b.BackgroundLimit > 0 {
		return b.BackgroundLimit
	}
	return def
}

// WorktreeOn reports whether each key of the binding works in a git
// worktree of its own.
func (b Binding) WorktreeOn() bool { return b.Workspace == workspace.Worktree }

// SpareSessionOn reports whether the binding's spares open a session
// ahead.
func (b Binding) SpareSessionOn() bool { return b.SpareSession == nil || *b.SpareSession }

// DefaultStartTimeout is a binding's start_timeout when it sets none: three
// times the slowest gemini-cli 0.61 initialize measured on a busy machine
// (31 s at load 50; docs/CONFIGURATION.md, Slow starts), so a slow agent on
// a busy machine starts within it, and a hung one is given up on (after
// the second try, at twice the limit) within 4.5 min, inside the default
// turn_timeout.
const DefaultStartTimeout = 90 * time.Second

// DefaultSpare is a binding's spare processes when it sets none (see
// docs/CONFIGURATION.md for the measurement behind it).
const DefaultSpare = 1

// MaxSpare bounds a binding's spare setting.
const MaxSpare = 2

// Spares is the binding's spare processes.
func (b Binding) Spares() int {
	if b.Spare == nil {
		return DefaultSpare
	}
	return *b.Spare
}

// Session scopes of a binding.
const (
	ScopeChannel = "channel"
	ScopeThread  = "thread"
)

// Burst modes of a binding.
const (
	BurstsQueue    = "queue"
	BurstsCoalesce = "coalesce"
	BurstsSteer    = "steer"
)

// Prices are per million tokens, in Currency (default USD). CacheWrite
// is a cache write with the 5-minute TTL; CacheWrite1h one with the
// 1-hour TTL (0: 1.6 times CacheWrite, Anthropic's ratio).
type Prices struct {
	Input        float64 `json:"input"`
	Output       float64 `json:"output"`
	CacheRead    float64 `json:"cache_read"`
	CacheWrite   float64 `json:"cache_write"`
	CacheWrite1h float64 `json:"cache_write_1h,omitempty"`
	Currency     string  `json:"currency,omitempty"`
}

// Cost prices tokens.
func (p Prices) Cost(in, out, cacheRead, cacheWrite int64) apitype.Amount {
	// Prices are per million tokens, so tokens times price is in
	// micro-units: one rounding per turn, to the micro-unit.
	return apitype.Amount(math.Round(float64(in)*p.Input + float64(out)*p.Output + float64(cacheRead)*p.CacheRead + float64(cacheWrite)*p.CacheWrite))
}

// Restore methods of a binding.
const (
	RestoreAuto   = "auto"   // session/resume when the agent offers it, else session/load
	RestoreResume = "resume" // session/resume only
	RestoreLoad   = "load"   // session/load only
)

// RestoreOn reports whether restore is enabled.
func (b Binding) RestoreOn() bool { return b.Restore == nil || *b.Restore }

// RetryOn reports whether an interrupted run is retried after a restart.
func (b Binding) RetryOn() bool { return b.RetryInterrupted == nil || *b.RetryInterrupted }

// ToolsOn reports whether channel tools are passed to the agent.
func (b Binding) ToolsOn() bool { return b.Tools == nil || *b.Tools }

// OmitOwn reports whether the agent's own posts are left out of its block.
func (b Binding) OmitOwn() bool { return b.OmitOwnPosts == nil || *b.OmitOwnPosts }

// KeepsSession reports whether the binding's sessions remember earlier turns,
// the only ones that get a watermark: resident, or an exact saved session.
// A resident binding keeps its process and the daemon sends that process
// warm turns (the newest user turn only), relying on its memory of the
// earlier ones; its memory of the channel lines it was shown is the same
// memory, so it gets a watermark, supervised or not. Without one each turn
// would show it again the lines it already has. (The source gives
// watermarks to supervised + resident bindings; an unsupervised resident
// process is still resident.)
func (b Binding) KeepsSession() bool { return b.Resident || b.SavedSession != "" }

// Framing returns the system framing text, reading SystemFile if set.
func (b Binding) Framing() (string, error) {
	if b.SystemFile == "" {
		return b.System, nil
	}
	data, err := regfile.Read(b.SystemFile, MaxFileBytes)
	if err != nil {
		return "", fmt.Errorf("config: binding %q: read system_file: %w", b.ID, err)
	}
	return string(data), nil
}

// MaxFileBytes bounds the config file and a binding's system_file: both
// are read whole, a framing goes into every cold turn, and a larger one is
// a wrong path rather than a config.
const MaxFileBytes = 1 << 20

// Config is the daemon's whole configuration.
type Config struct {
	Socket       string    `json:"socket,omitempty"`
	StateDir     string    `json:"state_dir,omitempty"`
	MaxLive      int       `json:"max_live,omitempty"`
	IdleTimeout  Duration  `json:"idle_timeout,omitempty"`
	QueueLen     int       `json:"queue_len,omitempty"`
	QueueTimeout Duration  `json:"queue_timeout,omitempty"`
	AgentGrace   Duration  `json:"agent_grace,omitempty"`
	Context      Context   `json:"context,omitempty"`
	Bindings     []Binding `json:"bindings"`

	// YieldAfter is how many turns in a row a key's live process may serve
	// while turns of other keys wait for a slot; its next turn then gives
	// the slot up to the longest waiter (eviction reason "yield") and queues
	// behind them, so every key gets a share of the slots; default 4.
	YieldAfter int `json:"yield_after,omitempty"`

	// RestoreFailures is how many restores in a row (every way the agent
	// offers failed: resume, then load) a binding may fail before the daemon
	// stops trying to restore its sessions for the rest of its run; its new
	// processes then start cold at once; default 3.
	RestoreFailures int `json:"restore_failures,omitempty"`
	// RestoreTimeout bounds each way of a restore (session/resume, then
	// session/load): past it the next way is tried, then a new session;
	// default 60s.
	RestoreTimeout Duration `json:"restore_timeout,omitempty"`
	// BackgroundLimit bounds how long an agent process working with no
	// turn in flight (background work it reported, output between prompts)
	// is kept from the idle reaper and from capacity eviction; default 2h.
	BackgroundLimit Duration `json:"background_limit,omitempty"`

	// AgentCancelGrace is how long an agent has to answer session/cancel
	// before it is killed; default 5s.
	AgentCancelGrace Duration `json:"agent_cancel_grace,omitempty"`

	// MaxProcesses caps every agent process at once: the max_live
	// key-bound ones and the bindings' spares together; a spare is started
	// only below it. Default (0) max_live + 2; less than max_live is an
	// error.
	MaxProcesses int `json:"max_processes,omitempty"`

	Runs Runs `json:"runs,omitempty"`

	// Cgroups puts each agent in a cgroup of its own (cgroup v2, where the
	// daemon may create one) so stopping it ends everything it started and
	// limits bound the tree; on by default.
	Cgroups *bool `json:"cgroups,omitempty"`

	// Budgets are daily spending limits per binding and per channel.
	Budgets Budgets `json:"budgets,omitempty"`

	// Attachments are the files a pushed message may carry.
	Attachments Attachments `json:"attachments,omitempty"`

	// Residency names the policy that decides which agent processes stay
	// warm (residency.ByName): "timer" (the default: idle_timeout, least
	// recently used first) or "cache".
	Residency string `json:"residency,omitempty"`
	// MaxMemory caps the memory of every agent process tree together,
	// spares included (0: none); MemoryPressure is the share of time, in
	// percent over 10 s, the kernel's memory pressure (PSI "some") may
	// reach (0: not watched). Past either, spares stop first, then idle
	// processes, the residency policy's victims first.
	MaxMemory      Bytes   `json:"max_memory,omitempty"`
	MemoryPressure float64 `json:"memory_pressure,omitempty"`
	// WorkspaceRoot is the folder the keys' git worktrees are made in (a
	// binding with workspace "worktree"); default <state_dir>/worktrees.
	WorkspaceRoot string `json:"workspace_root,omitempty"`
}

// WorktreeRoot is the folder the keys' worktrees are made in.
func (c *Config) WorktreeRoot() string {
	if c.WorkspaceRoot != "" {
		return c.WorkspaceRoot
	}
	return filepath.Join(c.StateDir, "worktrees")
}

// DefaultAttachmentMaxBytes bounds one attachment when attachments.max_bytes
// is not set: 5 MiB, the largest image the agents in use take.
const DefaultAttachmentMaxBytes = 5 << 20

// The attachments a push may carry when attachments.max_per_message and
// .max_per_push are not set: a message of a chat app carries a few files
// (16 is more than a screenshot series), and a batch is a backfill of such
// messages. Each is read, sniffed and hashed before the push answers, so
// the bound keeps one push from holding the inbox (20,000 tiny ones took
// 82 s while other channels' pushes waited).
const (
	DefaultAttachmentsPerMessage = 16
	DefaultAttachmentsPerPush    = 64
)

// Attachments says where a pushed message's attachments may come from.
type Attachments struct {
	// Dir is the folder a push may name files in (attachments[].path,
	// relative to it or absolute inside it); "" refuses every path.
	Dir string `json:"dir,omitempty"`
	// MaxBytes bounds one attachment's content, by path or inline.
	MaxBytes int64 `json:"max_bytes,omitempty"`
	// MaxPerMessage and MaxPerPush bound how many attachments one message
	// and one push (every message of the batch) carry.
	MaxPerMessage int `json:"max_per_message,omitempty"`
	MaxPerPush    int `json:"max_per_push,omitempty"`
}

// Budgets are optional daily spending limits. A day starts at Reset in
// Timezone; the totals count the cost of every turn that ran while a
// limit applied to its binding or channel.
type Budgets struct {
	Currency string  `json:"currency,omitempty"` // default "USD"; costs in another currency are not counted
	Timezone string  `json:"timezone,omitempty"` // IANA name, "UTC" or "Local" (default)
	Reset    string  `json:"reset,omitempty"`    // time of day the totals start again, "HH:MM"; default "00:00"
	WarnAt   float64 `json:"warn_at,omitempty"`  // share of a limit that raises a warning; default 0.8
	// Bindings and Channels are limits by id; ChannelDefault is the limit of
	// every channel not in Channels (0: none).
	Bindings       map[string]float64 `json:"bindings,omitempty"`
	Channels       map[string]float64 `json:"channels,omitempty"`
	ChannelDefault float64            `json:"channel_default,omitempty"`
}

// Location is the budget day's time zone.
func (b Budgets) Location() (*time.Location, error) {
	switch b.Timezone {
	case "", "Local":
		return time.Local, nil
	}
	return time.LoadLocation(b.Timezone)
}

// ResetOffset is how far into the calendar day a budget day starts.
func (b Budgets) ResetOffset() (time.Duration, error) {
	if b.Reset == "" {
		return 0, nil
	}
	t, err := time.Parse("15:04", b.Reset)
	if err != nil {
		return 0, fmt.Errorf("reset %q must be a time of day such as \"00:00\" or \"06:30\"", b.Reset)
	}
	return time.Duration(t.Hour())*time.Hour + time.Duration(t.Minute())*time.Minute, nil
}

// CgroupsOn reports whether agents get cgroups of their own.
func (c *Config) CgroupsOn() bool { return c.Cgroups == nil || *c.Cgroups }

// Limits bound one agent's process tree; zero is unlimited. Memory, tasks
// and CPU weight need the cgroup controllers; nofile is an rlimit.
type Limits struct {
	MemoryMax Bytes  `json:"memory_max,omitempty"` // e.g. "2G" or 2147483648 (memory.max)
	PidsMax   int64  `json:"pids_max,omitempty"`   // tasks (pids.max)
	CPUWeight int    `json:"cpu_weight,omitempty"` // 1..10000, default 100 (cpu.weight)
	NoFile    uint64 `json:"nofile,omitempty"`     // open files (RLIMIT_NOFILE)
}

// Bytes is a size written as a number of bytes or a string with a K, M or
// G suffix (powers of 1024).
type Bytes int64

func (b *Bytes) UnmarshalJSON(data []byte) error {
	var n int64
	if err := json.Unmarshal(data, &n); err == nil {
		*b = Bytes(n)
		return nil
	}
	var s string
	if err := json.Unmarshal(data, &s); err != nil {
		return fmt.Errorf("size must be a number of bytes or a string such as \"2G\"")
	}
	v, err := ParseBytes(s)
	if err != nil {
		return err
	}
	*b = Bytes(v)
	return nil
}

// ParseBytes reads "512", "64K", "512M" or "2G" (powers of 1024).
func ParseBytes(s string) (int64, error) {
	t := strings.ToUpper(strings.TrimSpace(s))
	t = strings.TrimSuffix(t, "B")
	mult := int64(1)
	if t != "" {
		switch t[len(t)-1] {
		case 'K':
			mult, t = 1<<10, t[:len(t)-1]
		case 'M':
			mult, t = 1<<20, t[:len(t)-1]
		case 'G':
			mult, t = 1<<30, t[:len(t)-1]
		}
	}
	var n int64
	if _, err := fmt.Sscanf(t, "%d", &n); err != nil || n < 0 || fmt.Sprint(n) != t {
		return 0, fmt.Errorf("size %q must be a whole number of bytes with an optional K, M or G suffix", s)
	}
	return n * mult, nil
}

// Runs bounds what the daemon keeps of each run for clients to re-attach.
type Runs struct {
	Events    int      `json:"events,omitempty"`    // events kept per run; default 4096
	Bytes     int      `json:"bytes,omitempty"`     // bytes of events kept per run; default 1 MiB
	Retention Duration `json:"retention,omitempty"` // how long an ended run stays readable; default 15m
	Ended     int      `json:"ended,omitempty"`     // ended runs kept at most; default 256
	Keepalive Duration `json:"keepalive,omitempty"` // keepalive line interval on a quiet stream; default 15s
	// PendingPermissions bounds the permission requests one run keeps
	// waiting for a person; the agent's requests beyond it are rejected at
	// once. Default 16.
	PendingPermissions int `json:"pending_permissions,omitempty"`
}

// Context holds the channel-context numbers of the spec.
type Context struct {
	// Fetch is accepted and ignored: the block reads every message the
	// session has not seen (on index keys), so its pointer is exact.
	Fetch    int `json:"fetch,omitempty"`
	Limit    int `json:"limit,omitempty"`     // rows shown; default 12
	MaxChars int `json:"max_chars,omitempty"` // characters per body; default 600
	MaxIDs   int `json:"max_ids,omitempty"`   // marks per watermark (mentions pushed late, thread roots); default 200
}

// ErrInvalid classifies configuration errors.
var ErrInvalid = errors.New("invalid configuration")

// idRE is compiled on first use: the bounded repeat expands to 64 states,
// work every process of this binary (the built-in agent too) would
// otherwise pay at start.
var idRE = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$`) })

// Load reads a JSON config file: one object, nothing after it, no unknown
// field and no key twice in an object. Only a regular file of at most
// MaxFileBytes is read (a FIFO would block the read, and every reload
// after it).
func Load(path string) (*Config, error) {
	data, err := regfile.Read(path, MaxFileBytes)
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	var c Config
	if err := decodeStrict(data, &c); err != nil {
		return nil, fmt.Errorf("config: parse %s: %w", path, err)
	}
	return &c, nil
}

// decodeStrict decodes data, which must hold exactly one JSON object, into
// c. encoding/json alone takes the first of two concatenated objects, the
// last of a key given twice, and null as an empty config.
func decodeStrict(data []byte, c *Config) error {
	const space = " \t\r\n"
	if body := bytes.TrimLeft(data, space); len(body) == 0 || body[0] != '{' {
		return fmt.Errorf("the file must hold one JSON object {…}; it starts with %.20q", body)
	}
	if err := duplicateKey(json.NewDecoder(bytes.NewReader(data)), "", 0); err != nil {
		return err
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(c); err != nil {
		return err
	}
	off := dec.InputOffset()
	if rest := bytes.TrimLeft(data[off:], space); len(rest) > 0 {
		return fmt.Errorf("data after the config object, at byte %d (%.20q): the file must hold one JSON object", len(data)-len(rest), rest)
	}
	return nil
}

// duplicateKey reports the first key given twice in one object of the
// value dec reads next, with its path ("bindings[1].env.PATH"). A syntax
// error, or nesting past depth 64, ends the walk: the decoder reports the
// one, and no setting takes a value nested that deep.
func duplicateKey(dec *json.Decoder, path string, depth int) error {
	tok, err := dec.Token()
	if err != nil || depth > 64 {
		return nil
	}
	switch tok {
	case json.Delim('{'):
		seen := map[string]bool{}
		for dec.More() {
			k, err := dec.Token()
			if err != nil {
				return nil
			}
			key, _ := k.(string)
			at := key
			if path != "" {
				at = path + "." + key
			}
			if seen[key] {
				return fmt.Errorf("key %q is given twice (at %s); keep one", key, at)
			}
			seen[key] = true
			if err := duplicateKey(dec, at, depth+1); err != nil {
				return err
			}
		}
	case json.Delim('['):
		for i := 0; dec.More(); i++ {
			if err := duplicateKey(dec, fmt.Sprintf("%s[%d]", path, i), depth+1); err != nil {
				return err
			}
		}
	default:
		return nil
	}
	_, _ = dec.Token() // the closing delimiter
	return nil
}

// ProcessCap is max_processes in force: max_live + 2 when it is not set.
func (c *Config) ProcessCap() int {
	if c.MaxProcesses > 0 {
		return c.MaxProcesses
	}
	return c.MaxLive + 2
}

// SetDefaults fills every zero value with the spec's numbers. A negative
// one stays for Validate to refuse.
func (c *Config) SetDefaults() {
	if c.MaxLive == 0 {
		c.MaxLive = 4
	}
	if c.IdleTimeout == 0 {
		c.IdleTimeout = Duration(30 * time.Minute)
	}
	if c.QueueLen == 0 {
		c.QueueLen = 64
	}
	if c.QueueTimeout == 0 {
		c.QueueTimeout = Duration(2 * time.Minute)
	}
	for i := range c.Bindings {
		if p := c.Bindings[i].Prices; p != nil && p.Currency == "" {
			p.Currency = "USD"
		}
	}
	if c.BackgroundLimit == 0 {
		c.BackgroundLimit = Duration(2 * time.Hour)
	}
	if c.RestoreTimeout == 0 {
		c.RestoreTimeout = Duration(60 * time.Second)
	}
	if c.RestoreFailures == 0 {
		c.RestoreFailures = 3
	}
	if c.Budgets.Currency == "" {
		c.Budgets.Currency = "USD"
	}
	if c.Budgets.WarnAt == 0 {
		c.Budgets.WarnAt = 0.8
	}
	if c.YieldAfter == 0 {
		c.YieldAfter = 4
	}
	if c.Residency == "" {
		c.Residency = DefaultResidency
	}
	if c.Attachments.MaxBytes == 0 {
		c.Attachments.MaxBytes = DefaultAttachmentMaxBytes
	}
	if c.Attachments.MaxPerMessage == 0 {
		c.Attachments.MaxPerMessage = DefaultAttachmentsPerMessage
	}
	if c.Attachments.MaxPerPush == 0 {
		c.Attachments.MaxPerPush = DefaultAttachmentsPerPush
	}
	if c.AgentGrace == 0 {
		c.AgentGrace = Duration(5 * time.Second)
	}
	if c.AgentCancelGrace == 0 {
		c.AgentCancelGrace = Duration(5 * time.Second)
	}
	if c.Context.Limit == 0 {
		c.Context.Limit = delivery.DefaultLimit
	}
	if c.Context.MaxChars == 0 {
		c.Context.MaxChars = delivery.DefaultMaxChars
	}
	if c.Context.MaxIDs == 0 {
		c.Context.MaxIDs = channel.MaxWatermarkIDs
	}
	if c.Runs.Events == 0 {
		c.Runs.Events = run.DefaultEvents
	}
	if c.Runs.Bytes == 0 {
		c.Runs.Bytes = run.DefaultBytes
	}
	if c.Runs.Retention == 0 {
		c.Runs.Retention = Duration(run.DefaultRetention)
	}
	if c.Runs.Ended == 0 {
		c.Runs.Ended = run.DefaultEnded
	}
	if c.Runs.Keepalive == 0 {
		c.Runs.Keepalive = Duration(15 * time.Second)
	}
	if c.Runs.PendingPermissions == 0 {
		c.Runs.PendingPermissions = run.DefaultPending
	}
	for i := range c.Bindings {
		b := &c.Bindings[i]
		if b.PermissionTimeout == 0 {
			b.PermissionTimeout = Duration(5 * time.Minute)
		}
		if b.Permission == "" {
			b.Permission = permission.Deny
		}
		if b.BriefPlacement == "" {
			// A process that remembers gets the stable brief once, with its
			// framing, and a warm turn only what changed (the stable-prefix
			// rule); a process that starts fresh every time is always cold.
			b.BriefPlacement = delivery.InTurn
			if b.Resident {
				b.BriefPlacement = delivery.InFraming
			}
		}
		if b.RestoreMethod == "" {
			b.RestoreMethod = RestoreAuto
		}
		if b.Bursts == "" {
			b.Bursts = BurstsQueue
		}
		if b.Scope == "" {
			b.Scope = ScopeChannel
		}
		if b.Workspace == "" {
			b.Workspace = workspace.Shared
		}
		if b.BriefEvery == 0 {
			b.BriefEvery = 10
		}
		if b.TurnTimeout == 0 {
			b.TurnTimeout = Duration(10 * time.Minute)
		}
		if b.StartTimeout == 0 {
			b.StartTimeout = Duration(DefaultStartTimeout)
		}
		if b.Runtime == "" {
			b.Runtime = "acp:" + filepath.Base(b.Command)
		}
	}
}

// Validate reports the first problem, naming the binding and the fix.
func (c *Config) Validate() error {
	if len(c.Bindings) == 0 {
		return fmt.Errorf("%w: no bindings; add one under \"bindings\"", ErrInvalid)
	}
	if err := checkNumbers("", c.numbers()); err != nil {
		return err
	}
	if d := c.Attachments.Dir; d != "" && !filepath.IsAbs(d) {
		return fmt.Errorf("%w: attachments.dir %q must be an absolute path", ErrInvalid, d)
	}
	if err := c.checkResidency(); err != nil {
		return err
	}
	if d := c.WorkspaceRoot; d != "" && !filepath.IsAbs(d) {
		return fmt.Errorf("%w: workspace_root %q must be an absolute path", ErrInvalid, d)
	}
	if c.MaxProcesses > 0 && c.MaxProcesses < c.MaxLive {
		return fmt.Errorf("%w: max_processes %d is below max_live %d; it caps the key-bound processes and the spares together", ErrInvalid, c.MaxProcesses, c.MaxLive)
	}
	seen := map[string]bool{}
	for i, b := range c.Bindings {
		switch {
		case !idRE().MatchString(b.ID):
			return fmt.Errorf("%w: binding %d: id %q must be 1-64 letters, digits, '.', '_' or '-'", ErrInvalid, i, b.ID)
		case seen[b.ID]:
			return fmt.Errorf("%w: binding %q is defined twice", ErrInvalid, b.ID)
		case b.Command == "":
			return fmt.Errorf("%w: binding %q has no command", ErrInvalid, b.ID)
		case !strings.HasPrefix(b.Handle, "@"):
			return fmt.Errorf("%w: binding %q: handle %q must start with '@'", ErrInvalid, b.ID, b.Handle)
		case b.System != "" && b.SystemFile != "":
			return fmt.Errorf("%w: binding %q sets both system and system_file; keep one", ErrInvalid, b.ID)
		}
		if err := checkNumbers(fmt.Sprintf("binding %q: ", b.ID), b.numbers()); err != nil {
			return err
		}
		if b.SystemFile != "" {
			if _, err := regfile.Read(b.SystemFile, MaxFileBytes); err != nil {
				return fmt.Errorf("%w: binding %q: system_file: %w; fix the path or use system", ErrInvalid, b.ID, err)
			}
		}
		if p := b.Prices; p != nil && (p.Input < 0 || p.Output < 0 || p.CacheRead < 0 || p.CacheWrite < 0 || p.CacheWrite1h < 0) {
			return fmt.Errorf("%w: binding %q: prices must be 0 or more per million tokens, got %+v", ErrInvalid, b.ID, *p)
		}
		if err := b.Permission.Check(); err != nil {
			return fmt.Errorf("%w: binding %q: permission: %v", ErrInvalid, b.ID, err)
		}
		if err := b.BriefPlacement.Check(); err != nil {
			return fmt.Errorf("%w: binding %q: brief_placement: %v", ErrInvalid, b.ID, err)
		}
		switch b.SystemPlacement {
		case "", SystemInPrompt, SystemInTurn:
		default:
			return fmt.Errorf("%w: binding %q: system_placement %q: use system_prompt or turn", ErrInvalid, b.ID, b.SystemPlacement)
		}
		switch b.RestoreMethod {
		case "", RestoreAuto, RestoreResume, RestoreLoad:
		default:
			return fmt.Errorf("%w: binding %q: restore_method %q: use auto, resume or load", ErrInvalid, b.ID, b.RestoreMethod)
		}
		switch b.Bursts {
		case "", BurstsQueue, BurstsCoalesce, BurstsSteer:
		default:
			return fmt.Errorf("%w: binding %q: bursts %q: use queue, coalesce or steer", ErrInvalid, b.ID, b.Bursts)
		}
		switch b.Protocol {
		case "", "1", "2", "auto":
		default:
			return fmt.Errorf("%w: binding %q: protocol %q: use 1, 2 or auto", ErrInvalid, b.ID, b.Protocol)
		}
		switch b.Scope {
		case "", ScopeChannel, ScopeThread:
		default:
			return fmt.Errorf("%w: binding %q: scope %q: use channel or thread", ErrInvalid, b.ID, b.Scope)
		}
		if err := b.checkResidency(); err != nil {
			return err
		}
		if err := c.checkWorkspace(b); err != nil {
			return err
		}
		if n := b.Spares(); n < 0 || n > MaxSpare {
			return fmt.Errorf("%w: binding %q: spare %d must be 0 to %d", ErrInvalid, b.ID, n, MaxSpare)
		}
		for id, v := range b.SessionOptions {
			if id == "" || v == "" {
				return fmt.Errorf("%w: binding %q: session_options: option %q = %q: both the option id and its value must be set", ErrInvalid, b.ID, id, v)
			}
		}
		switch l := b.Limits; {
		case l.MemoryMax < 0 || l.PidsMax < 0:
			return fmt.Errorf("%w: binding %q: limits must not be negative", ErrInvalid, b.ID)
		case l.MemoryMax > 0 && l.MemoryMax < 1<<20:
			return fmt.Errorf("%w: binding %q: limits.memory_max %d bytes is too small for any agent; use at least \"1M\"", ErrInvalid, b.ID, l.MemoryMax)
		case l.CPUWeight < 0 || l.CPUWeight > 10000:
			return fmt.Errorf("%w: binding %q: limits.cpu_weight %d must be 1..10000 (100 is the default share)", ErrInvalid, b.ID, l.CPUWeight)
		}
		seen[b.ID] = true
	}
	return c.Budgets.validate(seen)
}

// checkWorkspace refuses a workspace mode that is neither shared nor
// worktree, and a worktree binding whose dir cannot give worktrees (not
// the top folder of a git repository with a commit) or holds the
// folder the worktrees are made in.
func (c *Config) checkWorkspace(b Binding) error {
	switch b.Workspace {
	case "", workspace.Shared:
		return nil
	case workspace.Worktree:
	default:
		return fmt.Errorf("%w: binding %q: workspace %q: use shared or worktree", ErrInvalid, b.ID, b.Workspace)
	}
	if b.Dir == "" {
		return fmt.Errorf("%w: binding %q: workspace \"worktree\" needs dir: the git repository each key gets a worktree of", ErrInvalid, b.ID)
	}
	if err := workspace.CheckRepo(b.Dir); err != nil {
		return fmt.Errorf("%w: binding %q: workspace \"worktree\": %w", ErrInvalid, b.ID, err)
	}
	root := c.WorktreeRoot()
	if rel, err := filepath.Rel(b.Dir, root); err == nil && rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator)) {
		return fmt.Errorf("%w: binding %q: the worktrees' folder %q is inside its dir %q, where each would show as a change of the repository; set workspace_root elsewhere", ErrInvalid, b.ID, root, b.Dir)
	}
	return nil
}

func (b Budgets) validate(bindings map[string]bool) error {
	if _, err := b.Location(); err != nil {
		return fmt.Errorf("%w: budgets: timezone %q: %v; use an IANA name such as \"Europe/Berlin\", \"UTC\" or \"Local\"", ErrInvalid, b.Timezone, err)
	}
	if _, err := b.ResetOffset(); err != nil {
		return fmt.Errorf("%w: budgets: %v", ErrInvalid, err)
	}
	if b.WarnAt < 0 || b.WarnAt >= 1 {
		return fmt.Errorf("%w: budgets: warn_at %g must be a share between 0 and 1 (0.8 warns at 80%%)", ErrInvalid, b.WarnAt)
	}
	if b.ChannelDefault < 0 {
		return fmt.Errorf("%w: budgets: channel_default %g must not be negative", ErrInvalid, b.ChannelDefault)
	}
	for id, v := range b.Bindings {
		if !bindings[id] {
			return fmt.Errorf("%w: budgets: bindings: %q is not a configured binding", ErrInvalid, id)
		}
		if v <= 0 {
			return fmt.Errorf("%w: budgets: binding %q: a daily limit must be more than 0, got %g (leave it out for none)", ErrInvalid, id, v)
		}
	}
	for id, v := range b.Channels {
		if id == "" || v <= 0 {
			return fmt.Errorf("%w: budgets: channel %q: a daily limit must be more than 0, got %g (leave it out for none)", ErrInvalid, id, v)
		}
	}
	return nil
}

// number is a setting that counts, sizes or times something: 0 (or
// leaving it out) means its default, and below 0 means nothing.
type number struct {
	name string
	n    int64
	dur  bool // a Duration, shown as one
}

func (c *Config) numbers() []number {
	d := func(name string, v Duration) number { return number{name, int64(v), true} }
	i := func(name string, v int) number { return number{name, int64(v), false} }
	return []number{
		i("max_live", c.MaxLive), d("idle_timeout", c.IdleTimeout), i("queue_len", c.QueueLen), d("queue_timeout", c.QueueTimeout),
		d("agent_grace", c.AgentGrace), i("yield_after", c.YieldAfter), i("restore_failures", c.RestoreFailures),
		d("restore_timeout", c.RestoreTimeout), d("background_limit", c.BackgroundLimit), d("agent_cancel_grace", c.AgentCancelGrace),
		i("max_processes", c.MaxProcesses), {"max_memory", int64(c.MaxMemory), false},
		i("context.fetch", c.Context.Fetch), i("context.limit", c.Context.Limit), i("context.max_chars", c.Context.MaxChars), i("context.max_ids", c.Context.MaxIDs),
		i("runs.events", c.Runs.Events), i("runs.bytes", c.Runs.Bytes), d("runs.retention", c.Runs.Retention), i("runs.ended", c.Runs.Ended),
		d("runs.keepalive", c.Runs.Keepalive), i("runs.pending_permissions", c.Runs.PendingPermissions),
		{"attachments.max_bytes", c.Attachments.MaxBytes, false}, i("attachments.max_per_message", c.Attachments.MaxPerMessage), i("attachments.max_per_push", c.Attachments.MaxPerPush),
	}
}

func (b *Binding) numbers() []number {
	return []number{
		{"brief_every", int64(b.BriefEvery), false}, {"turn_timeout", int64(b.TurnTimeout), true}, {"permission_timeout", int64(b.PermissionTimeout), true},
		{"start_timeout", int64(b.StartTimeout), true},
	}
}

// checkNumbers refuses the first negative of nums, its name after prefix.
func checkNumbers(prefix string, nums []number) error {
	for _, n := range nums {
		if n.n >= 0 {
			continue
		}
		v := fmt.Sprint(n.n)
		if n.dur {
			v = fmt.Sprintf("%q", time.Duration(n.n))
		}
		return fmt.Errorf("%w: %s%s %s must not be negative (0, or leaving it out, gives the default)", ErrInvalid, prefix, n.name, v)
	}
	return nil
}

// BindingIDs lists the configured bindings' ids, sorted.
func (c *Config) BindingIDs() []string {
	ids := make([]string, 0, len(c.Bindings))
	for _, b := range c.Bindings {
		ids = append(ids, b.ID)
	}
	sort.Strings(ids)
	return ids
}

// Binding returns the binding with id, or false.
func (c *Config) Binding(id string) (Binding, bool) {
	for _, b := range c.Bindings {
		if b.ID == id {
			return b, true
		}
	}
	return Binding{}, false
}

// BuiltinFraming is the built-in binding's system framing. It never changes
// between turns: everything per-turn goes in the user turn.
const BuiltinFraming = `You are @agent, a resident coding agent in a team chat. People mention you in channels; each mention arrives as a user turn with the mention payload, a brief, and the channel lines you have not seen yet. Answer the mention; keep replies short.`

// Builtin returns the binding for the repo's own deterministic agent, run
// as "<self> agent" with its sessions kept under stateDir.
func Builtin(self, stateDir string) Binding {
	return Binding{
		ID: "b-builtin", Handle: "@agent", Runtime: "builtin:residentd:agent",
		Command: self, Args: []string{"agent", "--state", filepath.Join(stateDir, "builtin-agent")},
		System: BuiltinFraming, Supervised: true, Resident: true,
		Spare: new(int), // it starts in milliseconds: a spare would save nothing
	}
}

// ClaudeAgentACP returns a ready binding for claude-agent-acp. A one-hour
// provider cache outlives the 30-minute idle reaper, so a session restored
// after a reap still hits it. Bursts coalesce: measured with 0.49 and 0.101
// (BENCHMARKS.md), a burst of mentions costs 28 % of queue's input tokens
// and is answered as soon as with steer, which re-sends the context once per
// steered mention.
func ClaudeAgentACP() Binding {
	return Binding{
		ID: "b-claude", Handle: "@claude", Runtime: "cli:claude:agent",
		Command:    "claude-agent-acp",
		Env:        map[string]string{"ENABLE_PROMPT_CACHING_1H": "1"},
		System:     `You are @claude, a resident coding agent in a team chat. People mention you in channels; each mention arrives as a user turn with the mention payload, a brief, and the channel lines you have not seen yet.`,
		Supervised: true, Resident: true, Bursts: BurstsCoalesce,
	}
}

// CodexACP is the ready binding for codex-acp (`serve --with-codex`):
// codex-acp on PATH, which runs the Codex CLI it installs with and uses
// that CLI's own login (~/.codex), supervised and resident. Bursts
// coalesce, as for claude: codex-acp 2.6 takes steering, but a steered
// mention drops the model call in flight and calls the model again with the
// whole context (TestCodexSteer). No prices: codex-acp reports tokens and no
// cost, and the right prices are those of the model the login uses; a
// config file's b-codex can give them.
func CodexACP() Binding {
	return Binding{
		ID: "b-codex", Handle: "@codex", Runtime: "cli:codex:agent",
		Command:    "codex-acp",
		System:     `You are @codex, a resident coding agent in a team chat. People mention you in channels; each mention arrives as a user turn with the mention payload, a brief, and the channel lines you have not seen yet.`,
		Supervised: true, Resident: true, Bursts: BurstsCoalesce,
	}
}
