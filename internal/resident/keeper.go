// Package resident keeps the agent processes: it spawns one for the pool
// (it is the pool's Spawner), reopens a key's saved native session on it
// (resume, then load, else cold), brings the session's config options to
// what the key asks, backs off a binding whose agents keep failing, stops
// the agents an earlier daemon left behind, and counts what each process's
// turns used. It keeps what it knows of each binding's agents (crash loop,
// restore streak, listed options, option errors, how it is told its
// permission policy) in one record per binding.
// A turn asks it two things: Prepare the process for this turn, and record
// how the turn Settled.
package resident

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	sdk "github.com/coder/acp-go-sdk"
	"go.uber.org/zap"

	"github.com/residentd/residentd/apitype"
	"github.com/residentd/residentd/internal/acp"
	"github.com/residentd/residentd/internal/child"
	"github.com/residentd/residentd/internal/config"
	"github.com/residentd/residentd/internal/metrics"
	"github.com/residentd/residentd/internal/run"
	"github.com/residentd/residentd/internal/session"
	"github.com/residentd/residentd/internal/store"
	"github.com/residentd/residentd/internal/workspace"
)

// Errors a turn may meet preparing its process.
var (
	ErrUnknownBinding = errors.New("unknown binding")
	// ErrBackoff: the binding's agents keep failing to start or crashing, so
	// its next spawn waits; other bindings are unaffected.
	ErrBackoff = errors.New("agent is in crash-loop backoff")
	// ErrInvalidOption classifies a session option the agent does not list:
	// an unknown option id, or a value the option does not offer.
	ErrInvalidOption = errors.New("invalid session option")
	// ErrBadRequest: a session options request that cannot be served.
	ErrBadRequest = errors.New("bad request")
)

// MCPServers returns the MCP servers handed to a new agent process for key
// k, and a release func the keeper calls once that process has exited (so
// any capability it carried dies with it). The keeper sends an empty list
// when MCPServers is nil or the binding turned tools off.
type MCPServers func(k session.Key, b config.Binding) (servers []sdk.McpServer, release func())

// SpareMCPServers returns the MCP servers for a session a spare opens
// ahead, before any key: their capability reads nothing until bind gives
// it the key of the turn that takes the session; release revokes it. Nil
// funcs: no capability could be issued, and the spare opens no session
// ahead. Without it a binding with tools opens none either.
type SpareMCPServers func(b config.Binding) (servers []sdk.McpServer, bind func(k session.Key) error, release func())

// Options wires a Keeper.
type Options struct {
	Config  *config.Config // defaults set, validated
	Store   *store.Store
	Metrics *metrics.Metrics
	Log     *zap.Logger
	MCP     MCPServers
	// MCPSpare is MCP for a spare's session opened ahead (see
	// SpareMCPServers).
	MCPSpare SpareMCPServers
	// Ask puts every agent's permission requests to whoever runs its turn.
	Ask acp.AskFunc
	// Elicit puts every agent's forms to whoever runs its turn.
	Elicit acp.ElicitFunc
	// Now is the clock; tests inject one.
	Now func() time.Time
	// BackoffBase and BackoffCap shape the crash-loop backoff: after the
	// second consecutive spawn failure or crash of a binding its next spawn
	// is refused for BackoffBase, doubling per failure up to BackoffCap
	// (defaults 1s and 1m).
	BackoffBase, BackoffCap time.Duration
	// Runs gets the agent runs: what an agent says with no prompt in
	// flight. AgentQuiet is how long one waits for more output before it
	// ends (default DefaultAgentQuiet).
	Runs       *run.Registry
	AgentQuiet time.Duration
	// OnSpare, when set, hears of every spare process as it becomes ready
	// (pid 0: one that failed to start).
	OnSpare func(binding string, pid int)
}

// Keeper keeps the agent processes. Create it with New; stop it with Close
// once the pool holding its processes is closed.
type Keeper struct {
	cfg      atomic.Pointer[config.Config] // the config in force; SetConfig swaps it
	st       *store.Store
	m        *metrics.Metrics
	log      *zap.Logger
	mcp      MCPServers
	mcpSpare SpareMCPServers
	ask      acp.AskFunc
	elicit   acp.ElicitFunc
	now      func() time.Time

	backoffBase, backoffCap time.Duration
	runs                    *run.Registry
	agentQuiet              time.Duration
	onSpare                 func(binding string, pid int)

	cgroups *child.Cgroups // nil: agents run without cgroups of their own

	procs sync.Map // agent pid -> *Process, while it lives
	sp    spares   // the bindings' spare processes (spare.go)
	res   resState // what the residency policy is told (residency.go)

	ws *workspace.Manager // the keys' git worktrees (worktree.go)

	// mu guards health, keyLoops, keyOpts, seen and warned. It is
	// innermost: nothing else is locked under it.
	mu       sync.Mutex
	health   map[string]*health                // binding id -> what its agents did lately
	keyLoops map[session.Key]*keyLoop          // keys whose processes crash mid-turn
	keyOpts  map[session.Key]map[string]string // the keys' own session options (the store's copy)
	warned   map[string]bool                   // what warnOnce logged already
	seen     map[string]store.AgentSeen        // binding id -> its agent as last started (the store's copy)

	// setOptsMu is held across a key's options' store write and keyOpts
	// update. Lock order: setOptsMu, then the store's, then mu.
	setOptsMu sync.Mutex

	// The keeper's background work: the spares' goroutine, the stops of
	// spares a reload dropped, the closes of sessions spares opened ahead,
	// the agent runs' quiet ends and every agent's exit hook. Each is
	// counted in wg by hold (goBg and afterFunc start it); StopSpares
	// cancels ctx, and Close then refuses new work and waits for wg.
	ctx     context.Context
	cancel  context.CancelFunc
	wg      sync.WaitGroup
	bgMu    sync.Mutex // guards closing; nothing else is locked under it
	closing bool       // Close waits for wg: hold refuses

	closeOnce sync.Once
}

// health is what the keeper knows of one binding's agents, across their
// processes.
type health struct {
	crash       streak    // spawn failures and crashes in a row
	until       time.Time // no spawn before this (the crash loop's backoff)
	restore     streak    // failed restores in a row
	restoreStop bool      // restore_failures reached: no more tries this run
	listed      []acp.Option
	listedAny   bool       // the agent listed config options (listed may be empty)
	option      streak     // session options the agent refused or does not list
	policy      policyNote // how the agent is told the binding's permission policy
	policySeen  bool       // policy is set: an agent of the binding said who it is
	// blind is why the binding's last turn gave no cost a budget could
	// count ("" when it gave one, or before any turn), by its agent.
	blind apitype.BudgetBlind
}

// streak is a run of failures in a row and the last one's error.
type streak struct {
	n    int
	last string
}

// fail counts err and returns the length of the run.
func (s *streak) fail(err error) int {
	s.n++
	s.last = err.Error()
	return s.n
}

// ok ends the run.
func (s *streak) ok() { *s = streak{} }

// New returns a keeper. It first stops the agents an earlier daemon on the
// same store left behind (see sweepLeftovers). A binding's session options
// are checked when its first session opens: no process is started for
// them beside the pool's.
func New(o Options) (*Keeper, error) {
	if o.Log == nil {
		o.Log = zap.NewNop()
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	kp := &Keeper{
		st: o.Store, m: o.Metrics, log: o.Log, mcp: o.MCP, mcpSpare: o.MCPSpare, ask: o.Ask, elicit: o.Elicit, now: o.Now,
		backoffBase: o.BackoffBase, backoffCap: o.BackoffCap,
		health: map[string]*health{}, warned: map[string]bool{}, keyLoops: map[session.Key]*keyLoop{},
		runs: o.Runs, agentQuiet: o.AgentQuiet, onSpare: o.OnSpare,
	}
	kp.cfg.Store(o.Config)
	kp.sp.init(o.Config)
	if kp.agentQuiet <= 0 {
		kp.agentQuiet = DefaultAgentQuiet
	}
	if kp.backoffBase <= 0 {
		kp.backoffBase = time.Second
	}
	if kp.backoffCap <= 0 {
		kp.backoffCap = time.Minute
	}
	keyOpts, err := kp.st.KeyOptions()
	if err != nil {
		return nil, fmt.Errorf("resident: %w", err)
	}
	kp.keyOpts = keyOpts
	if kp.seen, err = kp.st.AgentsSeen(); err != nil {
		return nil, fmt.Errorf("resident: %w", err)
	}
	kp.ctx, kp.cancel = context.WithCancel(context.Background())
	kp.reportPolicies()
	sweepLeftovers(kp.st, kp.log)
	kp.openWorkspaces(o.Config)
	kp.cgroups = openCgroups(o.Config, kp.st.MarkPrefix(), kp.log)
	// Said at startup, before anyone mentions an agent that cannot start.
	for _, c := range kp.BindingCommands() {
		if !c.Startable {
			kp.log.Warn("binding cannot start its agent", zap.String("binding", c.Binding), zap.String("command", c.Command), zap.String("problem", c.Problem))
		}
	}
	return kp, nil
}

// Close stops the spares, waits for the keeper's background work (every
// goroutine it started and every exit hook) and removes the agents'
// cgroup. Call it after the pool has stopped the processes. Idempotent.
func (kp *Keeper) Close() {
	kp.closeOnce.Do(func() {
		kp.StopSpares()
		kp.bgMu.Lock()
		kp.closing = true
		kp.bgMu.Unlock()
		kp.wg.Wait()
		if kp.cgroups != nil {
			// The agents have stopped: what is left in their subtree had
			// moved out of its agent's cgroup, and dies with the subtree.
			if n := len(kp.cgroups.Procs()); n > 0 {
				kp.log.Warn("stopping processes that left their agent's cgroup for another in the agents' subtree", zap.Int("processes", n), zap.String("cgroup", kp.cgroups.Dir))
			}
			if err := kp.cgroups.Close(); err != nil {
				kp.log.Warn("remove the agents' cgroup", zap.Error(err))
			}
		}
	})
}

// hold counts one piece of background work in wg, unless Close already
// waits for it (false: the work must not start). Whoever got true calls
// wg.Done when the work ends.
func (kp *Keeper) hold() bool {
	kp.bgMu.Lock()
	defer kp.bgMu.Unlock()
	if kp.closing {
		return false
	}
	kp.wg.Add(1)
	return true
}

// goBg runs f in a goroutine of the keeper's, under its ctx; false when
// Close refused it (f does not run).
func (kp *Keeper) goBg(f func(ctx context.Context)) bool {
	if !kp.hold() {
		return false
	}
	go func() {
		defer kp.wg.Done()
		f(kp.ctx)
	}()
	return true
}

// afterFunc is time.AfterFunc with f counted as the keeper's work: Close
// waits for an f that runs, and none runs once Close waits.
func (kp *Keeper) afterFunc(wait time.Duration, f func()) *time.Timer {
	return time.AfterFunc(wait, func() {
		if !kp.hold() {
			return
		}
		defer kp.wg.Done()
		f()
	})
}

// conf is the config in force: an immutable snapshot.
func (kp *Keeper) conf() *config.Config { return kp.cfg.Load() }

// SetConfig puts a reloaded config (defaults set, validated, never changed
// after) in force: new processes are started by it, and the settings the
// keeper reads per use (restore timeout and failures, the background
// limit) apply at once.
//
// The agents' cgroup enables the controllers the bindings' limits needed at
// start: a limit that needs another one is logged, and applies after a
// restart.
func (kp *Keeper) SetConfig(c *config.Config) {
	old := kp.cfg.Load()
	kp.cfg.Store(c)
	kp.reconfigureSpares(old, c)
	kp.retireWorktrees(c)
	if kp.cgroups == nil {
		return
	}
	for _, b := range c.Bindings {
		for _, ctl := range limitsOf(b).Controllers() {
			if !slices.Contains(kp.cgroups.Controllers, ctl) {
				kp.log.Warn("binding's limits need a cgroup controller the agents' cgroup did not enable at start; the limit applies after a restart",
					zap.String("binding", b.ID), zap.String("controller", ctl))
			}
		}
	}
}

// of returns binding's health record, creating it; call with mu held.
func (kp *Keeper) of(binding string) *health {
	h := kp.health[binding]
	if h == nil {
		h = &health{}
		kp.health[binding] = h
	}
	return h
}

// warnOnce runs warn the first time the daemon meets what names.
func (kp *Keeper) warnOnce(what string, warn func()) {
	kp.mu.Lock()
	first := !kp.warned[what]
	kp.warned[what] = true
	kp.mu.Unlock()
	if first {
		warn()
	}
}
