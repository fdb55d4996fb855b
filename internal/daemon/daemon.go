// Package daemon owns one turn end to end, as a run: it leases the key's
// process from the pool, shapes the prompt, streams the agent's reply into
// the run's log, puts permission requests to a person, and commits or
// discards the turn's watermarks and conversation on the way out.
package daemon

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"sort"
	"sync"
	"time"

	sdk "github.com/coder/acp-go-sdk"
	"go.uber.org/zap"

	"github.com/residentd/residentd/apitype"
	"github.com/residentd/residentd/internal/acp"
	"github.com/residentd/residentd/internal/budget"
	"github.com/residentd/residentd/internal/channel"
	"github.com/residentd/residentd/internal/child"
	"github.com/residentd/residentd/internal/config"
	"github.com/residentd/residentd/internal/delivery"
	"github.com/residentd/residentd/internal/lease"
	"github.com/residentd/residentd/internal/metrics"
	"github.com/residentd/residentd/internal/pool"
	"github.com/residentd/residentd/internal/run"
	"github.com/residentd/residentd/internal/session"
	"github.com/residentd/residentd/internal/store"
)

// Errors the API maps to stable codes.
var (
	ErrBadRequest     = errors.New("bad request")
	ErrUnknownBinding = errors.New("unknown binding")
	ErrUnknownRun     = errors.New("unknown run")
	ErrUnknownThread  = errors.New("unknown thread")
	ErrRunEnded       = errors.New("run already ended")
	ErrAgentFailed    = errors.New("agent failed the turn")
	ErrShuttingDown   = errors.New("daemon is shutting down")
	// ErrBackoff: the binding's agents keep failing to start or crashing, so
	// its next spawn waits; other bindings are unaffected.
	ErrBackoff = errors.New("agent is in crash-loop backoff")
	// ErrBudgetExceeded: a daily budget the turn counts toward is spent
	// (budget.ErrExceeded, under the daemon's name).
	ErrBudgetExceeded = budget.ErrExceeded
	// errCancelled is the cause of a turn cancelled by a client.
	errCancelled = errors.New("cancelled by a client")
	// errFresh is the cause of a turn cancelled because its session was
	// started fresh.
	errFresh = errors.New("cancelled: the session was started fresh")
)

// MCPServers returns the MCP servers handed to a new agent process for key
// k, and a release func the daemon calls once that process has exited (so
// any capability it carried dies with it). The daemon sends an empty list
// when MCPServers is nil or the binding turned tools off.
type MCPServers func(k session.Key, b config.Binding) (servers []sdk.McpServer, release func())

// Options wires a Daemon.
type Options struct {
	Config  *config.Config // defaults set, validated
	Store   *store.Store
	Metrics *metrics.Metrics
	Log     *zap.Logger
	MCP     MCPServers
	// OnEvict, when set, also hears of every eviction (the demo prints them).
	OnEvict func(k session.Key, r pool.Reason)
	// Now is the clock; tests inject one.
	Now func() time.Time
	// BackoffBase and BackoffCap shape the crash-loop backoff: after the
	// second consecutive spawn failure or crash of a binding its next spawn
	// is refused for BackoffBase, doubling per failure up to BackoffCap
	// (defaults 1s and 1m).
	BackoffBase, BackoffCap time.Duration
}

// Daemon runs turns. Create it with New; stop it with Close.
type Daemon struct {
	cfg  *config.Config
	st   *store.Store
	m    *metrics.Metrics
	log  *zap.Logger
	mcp  MCPServers
	now  func() time.Time
	pool *pool.Pool[*resident]

	runs     *run.Registry
	turns    sync.WaitGroup // runs in flight
	watchers sync.WaitGroup // agent exit watchers

	residents sync.Map // agent pid -> *resident, while it lives

	lastMu  sync.Mutex
	lastEnd map[session.Key]time.Time // when each key's last turn ended, this run

	mu       sync.Mutex                         // guards the fields below
	cancels  map[string]context.CancelCauseFunc // run id -> cancel, while it runs
	asking   map[string]*asker                  // native session -> the run its permission requests go to
	framing  map[string]string                  // binding -> framing of its last cold turn
	loops    map[string]*crashLoop              // binding -> its crash loop, while failing
	restores map[string]*restoreRun             // binding -> its failed restores in a row
	closing  bool

	keyOpts    map[session.Key]map[string]string // the keys' own session options (the store's copy)
	listed     map[string][]acp.Option           // binding -> the config options its agent last listed
	optionErrs map[string]string                 // binding -> why its session options failed last
	warned     map[string]bool                   // what warnOnce logged already

	book *budget.Book // daily budgets

	setOptsMu sync.Mutex // held across a key's options' store write and keyOpts update

	probes      sync.WaitGroup // startup option checks
	stopProbing context.CancelFunc

	backoffBase, backoffCap time.Duration

	cgroups *child.Cgroups // nil: agents run without cgroups of their own
}

// New returns a running daemon; Close stops it. It first stops the agents
// an earlier run on the same store left behind (see sweepLeftovers).
func New(o Options) (*Daemon, error) {
	if o.Log == nil {
		o.Log = zap.NewNop()
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	d := &Daemon{
		cfg: o.Config, st: o.Store, m: o.Metrics, log: o.Log.Named("daemon"), mcp: o.MCP, now: o.Now,
		cancels: map[string]context.CancelCauseFunc{}, asking: map[string]*asker{}, framing: map[string]string{},
		runs: run.NewRegistry(run.Limits{
			Events: o.Config.Runs.Events, Bytes: o.Config.Runs.Bytes,
			Retention: time.Duration(o.Config.Runs.Retention), Ended: o.Config.Runs.Ended,
		}, o.Now),
		loops:       map[string]*crashLoop{},
		restores:    map[string]*restoreRun{},
		listed:      map[string][]acp.Option{},
		optionErrs:  map[string]string{},
		warned:      map[string]bool{},
		lastEnd:     map[session.Key]time.Time{},
		backoffBase: o.BackoffBase, backoffCap: o.BackoffCap,
	}
	if d.backoffBase <= 0 {
		d.backoffBase = time.Second
	}
	if d.backoffCap <= 0 {
		d.backoffCap = time.Minute
	}
	if o.Config.Context.Fetch > 0 {
		d.log.Warn("context.fetch is no longer used and can be removed: a block reads every message the session has not seen, and its pointer counts all it leaves out", zap.Int("fetch", o.Config.Context.Fetch))
	}
	keyOpts, err := d.st.KeyOptions()
	if err != nil {
		return nil, fmt.Errorf("daemon: %w", err)
	}
	d.keyOpts = keyOpts
	if d.book, err = newBook(o.Config.Budgets, o.Now, d.st); err != nil {
		return nil, fmt.Errorf("daemon: %w", err)
	}
	sweepLeftovers(d.st, d.log)
	d.cgroups = openCgroups(o.Config, d.log)
	ids := make([]string, 0, len(o.Config.Bindings))
	for _, b := range o.Config.Bindings {
		ids = append(ids, b.ID)
	}
	d.m.InitBindings(ids)
	plog := o.Log.Named("pool")
	d.pool = pool.New[*resident](pool.Config{
		MaxLive:      o.Config.MaxLive,
		IdleTimeout:  time.Duration(o.Config.IdleTimeout),
		QueueLen:     o.Config.QueueLen,
		QueueTimeout: time.Duration(o.Config.QueueTimeout),
		YieldAfter:   o.Config.YieldAfter,
		Now:          o.Now,
		OnEvict: func(k session.Key, r pool.Reason) {
			d.m.Evicted(string(r))
			if o.OnEvict != nil {
				o.OnEvict(k, r)
			}
			plog.Info("evicted", zap.String("key", k.String()), zap.String("reason", string(r)))
		},
	}, (*spawner)(d))
	d.m.SetGauges(d)
	d.m.SetStore(d.st)
	d.m.SetBudgets(budgetGauges{d.book})
	pctx, stop := context.WithCancel(context.Background())
	d.stopProbing = stop
	d.probeOptions(pctx)
	return d, nil
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

// compose reads what this turn's prompt is made of and hands it to
// lease.Compose; the watermark it would move is staged on l.
func (d *Daemon) compose(key session.Key, b config.Binding, req apitype.TurnRequest, l *lease.Lease, s *resident) (lease.Output, *apitype.ContextReport, error) {
	thread := ""
	if req.ThreadRoot != nil {
		thread = *req.ThreadRoot
	}
	wk := channel.WatermarkKey{Key: key, Thread: thread}
	wm, err := d.watermark(wk)
	if err != nil {
		return lease.Output{}, nil, err
	}
	main := wm
	if thread != "" {
		if main, err = d.watermark(channel.WatermarkKey{Key: key}); err != nil {
			return lease.Output{}, nil, err
		}
	}
	agents := []delivery.Agent{{Handle: b.Handle, Reachable: true}}
	if req.ChannelAgents != nil {
		agents = make([]delivery.Agent, len(req.ChannelAgents))
		for i, a := range req.ChannelAgents {
			agents[i] = delivery.Agent{Handle: a.Handle, Reachable: a.Reachable}
		}
	}
	maxRcpt := req.MaxRecipients
	if maxRcpt == 0 {
		maxRcpt = 3
	}
	briefN, briefDue, facts := s.brief()
	out, err := lease.Compose(lease.Input{
		Shape: l.Shape, Native: l.Native,
		Framing: b.Framing, Brief: b.Brief, Placement: b.BriefPlacement, BriefEvery: b.BriefEvery, BriefCount: briefN, BriefDue: briefDue, SeenFacts: facts,
		Conversation: func() ([]session.Turn, error) { return d.st.Conversation(key) },
		Mention: delivery.Payload{
			ChannelID: req.Channel, MessageID: req.MessageID, RunID: req.RunID, BindingID: b.ID, Runtime: b.Runtime,
			Supervised: b.Supervised, Resident: b.Resident, ThreadRootID: req.ThreadRoot,
			ChannelAgents: agents, MaxRecipients: maxRcpt, Text: req.Text,
		},
		Unseen: func(after uint64, known []string, pick func([]channel.Candidate) []int) (channel.View, error) {
			return d.st.Unseen(req.Channel, thread, after, known, pick)
		},
		Watermark: wm, Main: main, KeepsSession: b.KeepsSession(),
		Self: channel.Self{Handle: b.Handle, Binding: b.ID}, OmitOwn: b.OmitOwn(),
		Render: delivery.RenderOptions{Limit: d.cfg.Context.Limit, MaxChars: d.cfg.Context.MaxChars},
	})
	if err != nil {
		return lease.Output{}, nil, err
	}
	s.briefSent(out.BriefCount, out.BriefSent, out.Facts)
	l.Stage(wk, out.Stage)
	for th, ms := range out.Marks {
		l.Stage(channel.WatermarkKey{Key: key, Thread: th}, channel.Seen{Marks: ms})
	}
	r := out.Context
	d.m.ChannelRender(r.Lines, r.DroppedSeen, r.DroppedBound, r.OwnOmitted, r.Known, r.Chars, r.Truncated)
	if out.Framing != "" {
		d.guardFraming(b.ID, out.Framing)
	}
	if out.BriefSent {
		brief := b.Brief
		if brief == "" {
			brief = delivery.DefaultBrief
		}
		d.m.BriefTokens(b.BriefPlacement, approxTokens(brief))
	}
	rep := &apitype.ContextReport{Header: out.Header(), Lines: r.Lines, Chars: r.Chars, DroppedSeen: r.DroppedSeen, DroppedBound: r.DroppedBound, Truncated: r.Truncated, OwnOmitted: r.OwnOmitted, Known: r.Known, Edited: r.Edited, DroppedBoundEdits: r.BoundEdits, Shown: r.Shown, PromptBytes: len(out.Text)}
	if rep.Shown == nil {
		rep.Shown = []string{}
	}
	return out, rep, nil
}

// watermark reads the stored record of wk, nil when there is none.
func (d *Daemon) watermark(wk channel.WatermarkKey) (*channel.Watermark, error) {
	w, found, err := d.st.Watermark(wk)
	if err != nil {
		return nil, fmt.Errorf("read watermark for %q: %w", wk, err)
	}
	if !found {
		return nil, nil
	}
	return &w, nil
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
// whether there was a process to stop.
func (d *Daemon) Fresh(k session.Key) (bool, error) {
	if _, ok := d.cfg.Binding(k.Binding); !ok {
		return false, fmt.Errorf("%w %q", ErrUnknownBinding, k.Binding)
	}
	release, had, err := d.pool.Exclusive(context.Background(), k, func(holder string) {
		d.cancelRun(holder, errFresh)
	})
	if errors.Is(err, pool.ErrClosed) {
		return false, ErrShuttingDown
	}
	if err != nil {
		return false, fmt.Errorf("start fresh %q: %w", k, err)
	}
	defer release()
	if err := d.st.Forget(k); err != nil {
		return had, fmt.Errorf("start fresh %q: %w", k, err)
	}
	d.log.Info("started fresh", zap.String("key", k.String()), zap.Bool("stopped_process", had))
	return had, nil
}

func (d *Daemon) bindingIDs() []string {
	ids := make([]string, 0, len(d.cfg.Bindings))
	for _, b := range d.cfg.Bindings {
		ids = append(ids, b.ID)
	}
	sort.Strings(ids)
	return ids
}

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
	for id, c := range d.cancels {
		if r, ok := d.runs.Get(id); ok {
			if st := r.Snapshot().State; st == apitype.RunQueued || st == apitype.RunStarting {
				c(ErrShuttingDown)
			}
		}
	}
	d.mu.Unlock()
	if !already {
		done := make(chan struct{})
		go func() { d.turns.Wait(); close(done) }()
		timer := time.NewTimer(grace)
		select {
		case <-done:
		case <-timer.C:
			d.mu.Lock()
			d.log.Warn("runs still going after the shutdown grace; cancelling them", zap.Int("runs", len(d.cancels)), zap.Duration("grace", grace))
			for _, c := range d.cancels {
				c(ErrShuttingDown)
			}
			d.mu.Unlock()
		}
		timer.Stop()
	}
	d.stopProbing()
	err := d.pool.Close()
	// With their agents stopped the remaining turns end promptly; wait for
	// them so none writes to the store (or starts a watcher) after Close.
	d.turns.Wait()
	d.watchers.Wait()
	d.probes.Wait()
	if d.cgroups != nil {
		if cerr := d.cgroups.Close(); cerr != nil {
			d.log.Warn("remove the agents' cgroup", zap.Error(cerr))
		}
	}
	return err
}

func newRunID() string {
	var b [8]byte
	rand.Read(b[:])
	return "run-" + hex.EncodeToString(b[:])
}
