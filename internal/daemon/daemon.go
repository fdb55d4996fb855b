// Package daemon runs turns and nothing else. A mention is submitted as a
// run and becomes a turn (turn.go) in its key's lane (lane.go), which
// answers a key's mentions once each, in the order they were accepted,
// across restarts, by the binding's bursts rule. A turn waits for its
// key, acquires the key's process from the pool, is gated by the budgets
// and readied by the keeper (internal/resident, which owns the agent
// processes), composed by its lease, recorded as started, prompted,
// settled with the keeper and the budgets, and committed (the exchange,
// the watermarks and the run's end in one transaction) or discarded; then
// it releases the process and the key. The daemon also cancels runs,
// routes permission requests to the run that asked, and starts keys fresh.
package daemon

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	sdk "github.com/coder/acp-go-sdk"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/zap"

	"github.com/residentd/residentd/apitype"
	"github.com/residentd/residentd/internal/acp"
	"github.com/residentd/residentd/internal/budget"
	"github.com/residentd/residentd/internal/config"
	"github.com/residentd/residentd/internal/lease"
	"github.com/residentd/residentd/internal/metrics"
	"github.com/residentd/residentd/internal/pool"
	"github.com/residentd/residentd/internal/resident"
	"github.com/residentd/residentd/internal/run"
	"github.com/residentd/residentd/internal/session"
	"github.com/residentd/residentd/internal/store"
)

// Errors the API maps to stable codes.
var (
	ErrBadRequest     = resident.ErrBadRequest
	ErrUnknownBinding = resident.ErrUnknownBinding
	ErrUnknownRun     = errors.New("unknown run")
	ErrUnknownThread  = errors.New("unknown thread")
	ErrRunEnded       = errors.New("run already ended")
	ErrAgentFailed    = errors.New("agent failed the turn")
	ErrShuttingDown   = errors.New("daemon is shutting down")
	// ErrInterrupted: the daemon stopped while the run's attempt was in
	// flight, and its binding does not retry interrupted runs.
	ErrInterrupted = errors.New("interrupted by a restart")
	// ErrBackoff: the binding's agents keep failing to start or crashing, so
	// its next spawn waits; other bindings are unaffected.
	ErrBackoff = resident.ErrBackoff
	// ErrInvalidOption: a session option the agent does not list.
	ErrInvalidOption = resident.ErrInvalidOption
	// ErrBudgetExceeded: a daily budget the turn counts toward is spent
	// (budget.ErrExceeded, under the daemon's name).
	ErrBudgetExceeded = budget.ErrExceeded
	// ErrPolicyRefused: the agent stopped the turn itself (stop reason
	// cancelled; nobody cancelled the run) after a permission request of
	// the turn was refused.
	ErrPolicyRefused = errors.New("permission refused")
	// errCancelled is the cause of a turn cancelled by a client.
	errCancelled = errors.New("cancelled by a client")
	// errFresh is the cause of a turn cancelled because its session was
	// started fresh.
	errFresh = errors.New("cancelled: the session was started fresh")
)

// MCPServers is the channel tools handed to a new agent process.
type MCPServers = resident.MCPServers

// SpareMCPServers is the channel tools of a session a spare opens ahead,
// with a capability bound to a key only when a turn takes the session.
type SpareMCPServers = resident.SpareMCPServers

// Options wires a Daemon.
type Options struct {
	Config  *config.Config // defaults set, validated
	Store   *store.Store
	Metrics *metrics.Metrics
	Log     *zap.Logger
	MCP     MCPServers
	// MCPSpare is MCP for a spare's session opened ahead; without it a
	// binding with tools opens none ahead.
	MCPSpare SpareMCPServers
	// OnEvict, when set, also hears of every eviction (the demo prints them).
	OnEvict func(k session.Key, r pool.Reason)
	// Now is the clock; tests inject one.
	Now func() time.Time
	// BackoffBase and BackoffCap shape the crash-loop backoff: after the
	// second consecutive spawn failure or crash of a binding its next spawn
	// is refused for BackoffBase, doubling per failure up to BackoffCap
	// (defaults 1s and 1m).
	BackoffBase, BackoffCap time.Duration
	// AgentQuiet is how long an agent run waits for more output before it
	// ends (default 2s); tests shorten it.
	AgentQuiet time.Duration
	// OnSpare, when set, hears of every spare process as it becomes ready,
	// and with pid 0 of one that failed to start (tests wait on it).
	OnSpare func(binding string, pid int)
	// Reload reads the config file again as the daemon was started with it
	// (command-line settings over the file's, defaults set, validated) for
	// Daemon.Reload; nil: the daemon runs on the built-in default config
	// and there is no file to reload. ConfigFile names the file.
	Reload     func() (*config.Config, error)
	ConfigFile string
	// Tracer traces every run (tracing.Provider.Tracer); nil: no traces,
	// at no cost.
	Tracer trace.Tracer
	// TendEvery is how often the daemon looks at the agents' memory and
	// the idle sessions' caches (Tend): 0 is DefaultTendEvery, below 0
	// never (tests call Tend themselves). PressureFile is the kernel's
	// memory pressure (PSI) file, PressureFile by default.
	TendEvery    time.Duration
	PressureFile string
}

// Daemon runs turns. Create it with New; stop it with Close. It keeps
// only what outlives a turn: each turn's own state is its turn value.
type Daemon struct {
	cfg     atomic.Pointer[config.Config] // the config in force: an immutable snapshot, swapped by Reload
	st      *store.Store
	records runLog // where turns record their runs: the store
	m       *metrics.Metrics
	log     *zap.Logger
	tracer  trace.Tracer // nil: no traces
	now     func() time.Time
	pool    *pool.Pool[*resident.Process]
	keeper  *resident.Keeper
	book    *budget.Book // daily budgets

	runs     *run.Registry
	wg       sync.WaitGroup // turn goroutines
	accepted atomic.Uint64  // the last run accepted (RunRecord.Seq)

	// mu guards the fields below. Lock order: mu, then run.Registry's
	// (newTurn opens a run under mu); a lane's lock is never taken under
	// mu.
	mu      sync.Mutex
	live    map[string]*turn      // run id -> its turn, until it ends: what Cancel, start fresh and Close cancel
	lanes   map[session.Key]*lane // every key's lane, kept for its last end
	asking  map[string]*asker     // native session -> the run its permission requests go to
	framing map[string]string     // binding -> framing of its last cold turn
	warned  map[string]bool       // what warnOnce logged already
	closing bool

	reloadMu sync.Mutex // serializes reloads
	load     func() (*config.Config, error)
	file     string

	// The residency loop (residency.go): memory limits, idle sessions'
	// caches.
	tendStop context.CancelFunc
	tendDone chan struct{}
	pressure string // the PSI file
}

// conf is the config in force: a snapshot nobody changes. A turn reads the
// binding it runs with once, when it is accepted.
func (d *Daemon) conf() *config.Config { return d.cfg.Load() }

// New returns a running daemon; Close stops it. Its keeper first stops the
// agents an earlier run on the same store left behind.
func New(o Options) (*Daemon, error) {
	if o.Log == nil {
		o.Log = zap.NewNop()
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	d := &Daemon{
		st: o.Store, records: o.Store, m: o.Metrics, log: o.Log.Named("daemon"), tracer: o.Tracer, now: o.Now,
		live: map[string]*turn{}, lanes: map[session.Key]*lane{}, asking: map[string]*asker{}, framing: map[string]string{}, warned: map[string]bool{},
		runs: run.NewRegistry(run.Limits{
			Events: o.Config.Runs.Events, Bytes: o.Config.Runs.Bytes,
			Retention: time.Duration(o.Config.Runs.Retention), Ended: o.Config.Runs.Ended,
			Pending: o.Config.Runs.PendingPermissions,
		}, o.Now),
	}
	d.cfg.Store(o.Config)
	d.load, d.file = o.Reload, o.ConfigFile
	d.pressure = o.PressureFile
	if d.pressure == "" {
		d.pressure = PressureFile
	}
	if o.Config.Context.Fetch > 0 {
		d.log.Warn("context.fetch is no longer used and can be removed: a block reads every message the session has not seen, and its pointer counts all it leaves out", zap.Int("fetch", o.Config.Context.Fetch))
	}
	var err error
	if d.book, err = newBook(o.Config.Budgets, o.Now, d.st); err != nil {
		return nil, fmt.Errorf("daemon: %w", err)
	}
	// The keeper reads the daemon's clock, which tests may swap.
	d.keeper, err = resident.New(resident.Options{
		Config: o.Config, Store: o.Store, Metrics: o.Metrics, Log: d.log, MCP: o.MCP, MCPSpare: o.MCPSpare, Ask: d.ask, Elicit: d.elicitForm,
		Now: func() time.Time { return d.now() }, BackoffBase: o.BackoffBase, BackoffCap: o.BackoffCap,
		Runs: d.runs, AgentQuiet: o.AgentQuiet, OnSpare: o.OnSpare,
	})
	if err != nil {
		return nil, fmt.Errorf("daemon: %w", err)
	}
	d.m.InitBindings(o.Config.BindingIDs())
	d.pool = pool.New[*resident.Process](d.poolConfig(o), d.keeper)
	d.keeper.RunSpares(d.pool.Live)
	d.startTending(o.TendEvery)
	d.m.SetGauges(d)
	d.m.SetStore(d.st)
	d.m.SetBudgets(budgetGauges{d.book})
	d.m.SetAgentMemory(d.keeper)
	if err := d.resume(); err != nil {
		d.Close(0)
		return nil, fmt.Errorf("daemon: resume the recorded runs: %w", err)
	}
	return d, nil
}

// poolConfig is the pool's config in o: its limits, and what it tells the
// daemon.
func (d *Daemon) poolConfig(o Options) pool.Config {
	plog := o.Log.Named("pool")
	return pool.Config{
		MaxLive:      o.Config.MaxLive,
		IdleTimeout:  time.Duration(o.Config.IdleTimeout),
		QueueLen:     o.Config.QueueLen,
		QueueTimeout: time.Duration(o.Config.QueueTimeout),
		YieldAfter:   o.Config.YieldAfter,
		Now:          o.Now,
		// A binding a reload removed: its processes stop after their turn.
		Retired: func(k session.Key) bool {
			_, ok := d.conf().Binding(k.Binding)
			return !ok
		},
		Residency: policyFor(o.Config),
		Describe:  d.keeper.ResidencyKey,
		OnDecide:  d.decided,
		OnEvict: func(k session.Key, r pool.Reason) {
			d.m.Evicted(string(r))
			if o.OnEvict != nil {
				o.OnEvict(k, r)
			}
			plog.Info("evicted", zap.String("key", k.String()), zap.String("reason", string(r)))
		},
	}
}

// Live, Busy and Queued feed the metrics gauges.
func (d *Daemon) Live() int   { return d.pool.Live() }
func (d *Daemon) Busy() int   { return d.pool.Busy() }
func (d *Daemon) Queued() int { return d.pool.Queued() }

// successful reports whether a stop reason means the agent read the turn:
// end_turn, max_tokens, max_turn_requests and refusal all answered after
// reading it; cancelled may not have.
func successful(stop string) bool {
	switch sdk.StopReason(stop) {
	case sdk.StopReasonEndTurn, sdk.StopReasonMaxTokens, sdk.StopReasonMaxTurnRequests, sdk.StopReasonRefusal:
		return true
	}
	return false
}

// ctxErr turns the cancellation of a turn into the error that says why.
func (d *Daemon) ctxErr(ctx context.Context, err error) error {
	if cause := context.Cause(ctx); cause != nil && !errors.Is(err, cause) && (errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)) {
		return fmt.Errorf("%w: %w", cause, err)
	}
	return err
}

// Outcome classifies a turn's error for metrics and logs.
func Outcome(err error) lease.Outcome {
	switch {
	case err == nil:
		return lease.OutcomeOK
	case errors.Is(err, pool.ErrQueueFull), errors.Is(err, pool.ErrQueueTimeout), errors.Is(err, ErrBackoff):
		return lease.OutcomeRejected
	case errors.Is(err, ErrBudgetExceeded), errors.Is(err, ErrInvalidOption):
		return lease.OutcomeRefused
	case errors.Is(err, context.DeadlineExceeded):
		return lease.OutcomeTimeout
	case errors.Is(err, context.Canceled), errors.Is(err, errCancelled), errors.Is(err, errFresh), errors.Is(err, ErrShuttingDown):
		return lease.OutcomeCancelled
	case errors.Is(err, acp.ErrExited):
		return lease.OutcomeCrash
	}
	return lease.OutcomeAgentError
}

// approxTokens estimates tokens at four bytes each; good enough for a
// counter that compares placements.
func approxTokens(s string) int { return (len(s) + 3) / 4 }

// guardFraming counts (and logs once per binding) a change of a binding's
// system framing between cold turns: it costs the whole prompt cache.
func (d *Daemon) guardFraming(binding, system string) {
	d.mu.Lock()
	prev, seen := d.framing[binding]
	d.framing[binding] = system
	changed := seen && prev != system
	d.mu.Unlock()
	if changed {
		d.m.FramingChanged(binding)
		d.warnOnce("framing:"+binding, func() {
			d.log.Warn("system framing changed between cold turns; the provider's prompt cache is lost", zap.String("binding", binding))
		})
	}
}

// Fresh starts key k over: it cancels the turn running on k, stops k's
// process and forgets its saved native session, conversation and
// watermarks, so the next turn is cold with a snapshot. Turns queued behind
// the cancelled one run after the reset, on a new process. It reports
// whether there was a process to stop. The key's worktree stays as it is.
func (d *Daemon) Fresh(k session.Key) (bool, error) {
	out, err := d.FreshKey(k, false)
	return out.StoppedProcess, err
}

// FreshKey is Fresh, and with resetWorktree it also resets the key's git
// worktree (its next session gets a new one, from the repository's HEAD):
// refused, with nothing done, when the worktree has uncommitted changes
// (workspace.ErrUncommitted, the message listing them); changes made by
// the key's agent while its turn is stopped refuse it too, the key's
// session then kept.
func (d *Daemon) FreshKey(k session.Key, resetWorktree bool) (apitype.FreshResponse, error) {
	var out apitype.FreshResponse
	if _, ok := d.conf().Binding(k.Binding); !ok {
		return out, fmt.Errorf("%w %q", ErrUnknownBinding, k.Binding)
	}
	if resetWorktree {
		if err := d.keeper.CheckWorktreeReset(k); err != nil {
			return out, fmt.Errorf("start fresh %q: %w", k, err)
		}
	}
	release, had, err := d.pool.Exclusive(context.Background(), k, func(holder string) {
		d.cancelRun(holder, errFresh)
	})
	if errors.Is(err, pool.ErrClosed) {
		return out, ErrShuttingDown
	}
	if err != nil {
		return out, fmt.Errorf("start fresh %q: %w", k, err)
	}
	defer release()
	out.StoppedProcess = had
	if resetWorktree {
		if out.Worktree, err = d.keeper.ResetWorktree(context.Background(), k); err != nil {
			return out, fmt.Errorf("start fresh %q: %w", k, err)
		}
	}
	if err := d.st.Forget(k); err != nil {
		return out, fmt.Errorf("start fresh %q: %w", k, err)
	}
	d.log.Info("started fresh", zap.String("key", k.String()), zap.Bool("stopped_process", had), zap.Bool("worktree_reset", out.Worktree != nil))
	return out, nil
}

// Keeper is the keeper of the daemon's agent processes: the serve command
// asks it for the agents' cgroup, by which the API tells their processes.
func (d *Daemon) Keeper() *resident.Keeper { return d.keeper }

// Close stops the daemon: new runs are refused and queued ones end at once
// (shutting_down); runs in flight get grace to finish with their normal
// result, and those still going then are cancelled (shutting_down, their
// watermarks discarded); then every agent stops. Idempotent.
func (d *Daemon) Close(grace time.Duration) error {
	d.mu.Lock()
	already := d.closing
	d.closing = true
	// Runs that have not started (queued, or starting: their process
	// not readied yet) end now. Running ones get the grace to finish normally.
	for _, t := range d.live {
		if st := t.r.Snapshot().State; st == apitype.RunQueued || st == apitype.RunStarting {
			t.cancel(ErrShuttingDown)
		}
	}
	d.mu.Unlock()
	d.keeper.StopSpares() // no turn will take one now
	d.stopTending()
	if !already {
		done := make(chan struct{})
		go func() { d.wg.Wait(); close(done) }()
		timer := time.NewTimer(grace)
		select {
		case <-done:
		case <-timer.C:
			d.mu.Lock()
			d.log.Warn("runs still going after the shutdown grace; cancelling them", zap.Int("runs", len(d.live)), zap.Duration("grace", grace))
			for _, t := range d.live {
				t.cancel(ErrShuttingDown)
			}
			d.mu.Unlock()
		}
		timer.Stop()
	}
	err := d.pool.Close()
	// With their agents stopped the remaining turns end promptly; wait for
	// them so none writes to the store (or spawns) after Close.
	d.wg.Wait()
	d.keeper.Close()
	return err
}

func newRunID() string {
	var b [8]byte
	rand.Read(b[:])
	return "run-" + hex.EncodeToString(b[:])
}
