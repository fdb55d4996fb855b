package resident

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	sdk "github.com/coder/acp-go-sdk"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.uber.org/zap"

	"github.com/residentd/residentd/apitype"
	"github.com/residentd/residentd/internal/acp"
	"github.com/residentd/residentd/internal/channel"
	"github.com/residentd/residentd/internal/child"
	"github.com/residentd/residentd/internal/config"
	"github.com/residentd/residentd/internal/lease"
	"github.com/residentd/residentd/internal/pool"
	"github.com/residentd/residentd/internal/session"
	"github.com/residentd/residentd/internal/store"
	"github.com/residentd/residentd/internal/tracing"
	"github.com/residentd/residentd/internal/workspace"
)

// Process is one agent process serving one native session; the pool holds
// it between turns.
type Process struct {
	a       *acp.Agent
	key     session.Key
	between *between // its output between prompts
	native  string

	// Nothing else is locked under mu.
	mu       sync.Mutex // guards briefN, briefDue, facts, unsaved, appliedOpts, origOpts, policyMode and the usage below
	briefN   int        // warm turns since the brief last went out in full (brief in framing)
	briefDue bool       // the agent compacted its history: the next warm turn carries the full brief
	facts    string     // the key's facts JSON the process was last given (brief in framing)
	unsaved  bool       // native is new and not yet the key's saved session id
	// appliedOpts are the session options residentd set on this process's
	// session, by id; origOpts what the agent had for them before.
	appliedOpts, origOpts map[string]string
	// policyMode is the session mode residentd set for the binding's
	// permission policy ("" before it set one).
	policyMode string

	restoredBy string                 // "resume" or "load" when the process reopened a saved session, "fork" when it forked its channel's
	restore    *apitype.RestoreReport // how the key's saved session fared when the process started; nil: it had none
	missed     int                    // stored turns the reopened session lacks, for its first turn (guarded by mu)

	wt atomic.Pointer[workspace.Record] // the key's worktree its session works in; nil: the binding's dir

	// binding is what the process was started with; served what its last
	// turn was prepared with (guarded by mu). They differ after a config
	// reload changed the binding in ways a live process takes.
	binding config.Binding
	served  config.Binding

	// What the process's turns used, for per-turn deltas and the sessions
	// listing; guarded by mu.
	seen     acp.Usage     // the agent's last running token totals (usage_totals)
	used     apitype.Usage // the sum of its turns
	reported bool          // some turn reported usage
}

// TakeUnsaved reports whether the native id still has to be saved, and
// hands that job to the caller.
func (s *Process) TakeUnsaved() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	u := s.unsaved
	s.unsaved = false
	return u
}

// KeepUnsaved gives the job back after the caller failed to save.
func (s *Process) KeepUnsaved() {
	s.mu.Lock()
	s.unsaved = true
	s.mu.Unlock()
}

// Brief is the process's warm turns since the full brief, whether it is
// due anyway (the agent compacted its history), and the key's facts the
// process was last given.
func (s *Process) Brief() (n int, due bool, facts string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.briefN, s.briefDue, s.facts
}

// BriefSent records the count and the facts after a turn; a full brief
// pays what a compaction made due.
func (s *Process) BriefSent(n int, full bool, facts string) {
	s.mu.Lock()
	s.briefN, s.facts = n, facts
	if full {
		s.briefDue = false
	}
	s.mu.Unlock()
}

// takeMissed hands the stored turns the session lacks to the turn that
// carries them, once.
func (s *Process) takeMissed() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := s.missed
	s.missed = 0
	return n
}

// compacted makes the next warm turn carry the full brief, unless the
// brief is in the session's system prompt, which a compaction keeps.
func (s *Process) compacted() {
	if s.a.SystemPromptTaken() {
		return
	}
	s.mu.Lock()
	s.briefDue = true
	s.mu.Unlock()
}

// EndAgentRun ends the agent run the process's output between prompts
// opened, if any (why: the log's word for it).
func (s *Process) EndAgentRun(why string) { s.between.end(why) }

// EndWork: see pool.Ender. With work running — an agent run open, or
// background work the agent reported — it sends session/cancel for the
// session (ACP's stop request; no agent residentd knows advertises one of
// its own), gives the agent up to its cancel grace to report the work
// ended, and ends the agent run with the reason.
func (s *Process) EndWork(r pool.Reason) {
	works, _ := s.a.Working()
	if !works && !s.between.open() {
		return
	}
	log := s.between.log
	log.Info("ending the agent's background work before stopping its process: session/cancel sent", zap.String("reason", string(r)), zap.String("native", s.native), zap.Int("pid", s.a.Pid()))
	grace := time.Duration(s.between.k.conf().AgentCancelGrace)
	ctx, cancel := context.WithTimeout(context.Background(), grace)
	defer cancel()
	if err := s.a.CancelSession(ctx, s.native); err != nil {
		log.Warn("ending background work: session/cancel not sent", zap.String("reason", string(r)), zap.Error(err))
	}
	if !s.a.WaitIdle(ctx) {
		log.Warn("agent still reported work running after session/cancel; stopping its process anyway", zap.String("reason", string(r)), zap.Duration("agent_cancel_grace", grace))
	}
	s.between.cancelled(r)
}

// Working: see pool.Worker.
func (s *Process) Working() (bool, time.Time) { return s.between.working(s.a) }

var (
	_ pool.Worker = (*Process)(nil)
	_ pool.Ender  = (*Process)(nil)
)

func (s *Process) Native() string        { return s.native }
func (s *Process) Pid() int              { return s.a.Pid() }
func (s *Process) Done() <-chan struct{} { return s.a.Done() }
func (s *Process) Close() error          { return s.a.Close() }

// CanSteer reports whether the process's agent takes text into a running
// turn (_session/steering).
func (s *Process) CanSteer() bool { return s.a.CanSteer() }

// Steer adds text to the session's running turn; an error means it did not
// join it.
func (s *Process) Steer(ctx context.Context, text string) error {
	return s.a.Steer(ctx, s.native, text)
}

// Prompt sends the turn's text and attachments to the process's session
// (acp.Agent.PromptWith: as the blocks the agent takes). ctx's span (the
// turn's prompt span) goes to the agent as _meta traceparent and
// tracestate, and is the parent of the agent run its later output opens.
func (s *Process) Prompt(ctx context.Context, text string, atts []channel.Attachment, on func(acp.Update)) (acp.Result, error) {
	var with []acp.Attachment
	for _, a := range atts {
		with = append(with, acp.Attachment{Message: a.Message, Author: a.Author, Name: a.Name, Type: a.Type, Size: a.Size, Path: a.Path})
	}
	s.between.prompted(ctx)
	done := s.prompting(text, true)
	res, err := s.a.PromptMeta(ctx, s.native, text, with, tracing.Meta(ctx), on)
	done(res)
	return res, err
}

var _ pool.Session = (*Process)(nil)

var _ pool.Spawner[*Process] = (*Keeper)(nil)

// Spawn starts binding's agent for key k and readies its session: the
// key's saved one reopened (lease.Restored) or a new one (lease.Cold). The
// pool's exited hook runs once the process has been reaped.
func (kp *Keeper) Spawn(ctx context.Context, k session.Key, exited func()) (s *Process, shape lease.Shape, err error) {
	ctx, span := tracing.Start(ctx, "spawn")
	t0 := kp.now()
	defer func() {
		if err == nil {
			kp.res.spawned(k.Binding, shape, kp.now().Sub(t0))
		}
		if span.IsRecording() {
			span.SetAttributes(attribute.String("residentd.binding", k.Binding), attribute.String("residentd.shape", shape.String()))
			if s != nil {
				span.SetAttributes(attribute.Int("residentd.pid", s.Pid()), attribute.String("residentd.native_session", s.native))
			}
			if err != nil {
				span.SetStatus(codes.Error, err.Error())
			}
		}
		span.End()
	}()
	b, ok := kp.bindingFor(ctx, k.Binding)
	if !ok {
		return nil, lease.Cold, fmt.Errorf("%w %q", ErrUnknownBinding, k.Binding)
	}
	if err := kp.checkBackoff(b.ID, k); err != nil {
		return nil, lease.Cold, err
	}
	defer func() {
		if err != nil && ctx.Err() == nil && !errors.Is(err, pool.ErrClosed) && !errors.Is(err, workspace.ErrUnavailable) {
			kp.spawnFailed(b.ID, err)
		}
	}()
	log := kp.log.Named("agent").With(zap.String("key", k.String()), zap.String("binding", b.ID))
	// What the session needs of its key goes in its request (mcpServers),
	// so a spare spawned before the key was known serves it. The
	// capabilities the process carries are revoked at its exit.
	rel := &releases{}
	hook := func() { rel.run(); exited() }
	ap, spare, err := kp.processFor(ctx, b, k, log, hook)
	if err != nil {
		return nil, lease.Cold, err
	}
	pre := ap.takePre() // a session the spare opened ahead, nil without one
	if pre != nil {
		rel.add(pre.release) // revoked at the exit, if not before
	}
	if span.IsRecording() {
		span.SetAttributes(attribute.Bool("residentd.spare", spare), attribute.Bool("residentd.spare_session", pre != nil))
	}
	return kp.openSession(ctx, &ladder{k: k, b: b, log: log, ap: ap, pre: pre, hook: hook, rel: rel})
}

// processFor is a process for key k of binding b, bound to k with hook
// as its exit hook: the binding's spare (one that still fits the binding),
// else a new one; spare says which.
func (kp *Keeper) processFor(ctx context.Context, b config.Binding, k session.Key, log *zap.Logger, hook func()) (ap *agentProc, spare bool, err error) {
	for ap == nil {
		if ap = kp.takeSpare(b.ID); ap == nil {
			break
		}
		if !fits(&ap.started, &b, ap.a.Info()) {
			// Started before a reload changed what its process or its
			// sessions are opened with (the reload stops such spares; this
			// one was taken as it did).
			kp.stopEach([]*agentProc{ap}, "reload")
			ap = nil
			continue
		}
		if !ap.bind(k, log, hook) {
			ap = nil // it died as it was taken; its exit was counted
			continue
		}
		log.Info("took a spare agent", zap.Int("pid", ap.a.Pid()))
		return ap, true, nil
	}
	kp.makeRoom()
	if ap, err = kp.startForTurn(ctx, b, k, log); err != nil {
		return nil, false, err
	}
	if !ap.bind(k, log, hook) {
		return nil, false, fmt.Errorf("agent pid %d exited before its session opened: %w", ap.a.Pid(), ap.a.ExitErr())
	}
	return ap, false, nil
}

// keyServers puts l's key's own servers in its process's next session
// request, once; the release they return is what revokes them.
func (kp *Keeper) keyServers(l *ladder) {
	if l.keyRelease != nil {
		return
	}
	servers, release := kp.servers(l.k, l.b)
	l.keyRelease, l.mcp = release, servers
	l.rel.add(release)
	l.ap.a.SetMCPServers(servers)
}

// openSession gives l's process the key's session: a saved one
// reopened, else a fork of its channel's (a thread key's first), else a
// new one (the one its spare opened ahead, where it fits).
func (kp *Keeper) openSession(ctx context.Context, l *ladder) (*Process, lease.Shape, error) {
	cands, saved, err := kp.restoreCandidates(ctx, l)
	if err != nil {
		l.ap.a.Close()
		return nil, lease.Cold, err
	}
	var report *apitype.RestoreReport // how the key's saved session fared, for the listing
	if saved {
		report = &l.report
	}
	if len(cands) > 0 {
		p, err := kp.reopenSaved(ctx, l, cands, report)
		if err != nil {
			return nil, lease.Cold, err
		}
		if p != nil {
			return p, lease.Restored, nil
		}
	}
	// A new session (a fork, session/new) works where the binding says
	// now: the key's worktree, or its dir.
	wt, err := kp.newIn(ctx, l.ap.a, l.k, l.b)
	if err != nil {
		l.ap.a.Close()
		return nil, lease.Cold, err
	}
	if !saved && l.k.Thread != "" && l.ap.a.CanFork() && l.b.KeepsSession() {
		// A thread key's first session: a fork of its channel's.
		kp.keyServers(l)
		s, err := kp.fork(ctx, l.ap.a, l.k, l.b, l.ap.bw, l.log)
		if err == nil && s != nil {
			err = kp.openedIn(s, wt)
		}
		if err != nil {
			l.ap.a.Close()
			return nil, lease.Restored, err
		}
		if s != nil {
			kp.dropPre(l.ap, l.pre, l.log)
			return s, lease.Restored, nil
		}
	}
	if l.pre != nil && l.ap.a.SessionCwd(l.pre.native) != l.ap.a.Cwd() {
		kp.dropPre(l.ap, l.pre, l.log) // opened ahead in another cwd than the key's
		l.pre = nil
	}
	if l.pre != nil {
		if s := kp.usePre(l.ap, l.pre, l.k, l.b, l.keyRelease, report, l.log); s != nil {
			return s, lease.Cold, nil
		}
		l.keyRelease = nil // revoked: the session opened below gets new ones
	}
	p, err := kp.newSession(ctx, l, report)
	if err != nil {
		return nil, lease.Cold, err
	}
	if err := kp.openedIn(p, wt); err != nil {
		l.ap.a.Close()
		return nil, lease.Cold, err
	}
	return kp.live(p), lease.Cold, nil
}

// reopenSaved restores one of the key's saved sessions (cands) on l's
// process, or on another once a way timed out there; nil when none was
// reopened: the turn goes on cold, on the process the restore ended on
// (l.ap), on the session that process opened ahead if any (l.pre).
func (kp *Keeper) reopenSaved(ctx context.Context, l *ladder, cands []candidate, report *apitype.RestoreReport) (*Process, error) {
	kp.keyServers(l)
	r, err := kp.restore(ctx, l, cands)
	if r.how != "" {
		// The one opened ahead is dropped after the restore, so that its
		// close does not compete with it.
		kp.dropPre(l.ap, l.pre, l.log)
		l.pre = nil
	}
	if err != nil {
		l.ap.a.Close()
		return nil, err
	}
	if r.how == "" {
		return nil, nil
	}
	p := &Process{a: l.ap.a, key: l.k, between: l.ap.bw, native: r.native, restoredBy: r.how, missed: r.missed, unsaved: r.unsaved,
		restore: report, binding: l.b, served: l.b}
	p.wt.Store(l.wt) // the cwd it reopened in
	return kp.live(p), nil
}

// newSession opens a new session (session/new) on l's process with the
// key's servers.
func (kp *Keeper) newSession(ctx context.Context, l *ladder, report *apitype.RestoreReport) (*Process, error) {
	kp.keyServers(l)
	a := l.ap.a
	t1 := kp.now()
	_, nspan := tracing.Start(ctx, "session new")
	native, err := a.NewSession(ctx)
	if err != nil {
		nspan.SetStatus(codes.Error, err.Error())
		nspan.End()
		return nil, a.StartFailed(err) // with what the agent said on stderr
	}
	nspan.End()
	kp.m.ObserveSessionReady("new", kp.now().Sub(t1))
	l.log.Info("session started", zap.String("native", native), zap.Int("pid", a.Pid()))
	// The id is saved with the first turn's exchange, in its one commit
	// (saveNative when the turn fails), which carries the agent record too
	// (RecordAgent waits for the next write): a cold turn costs the turn's
	// commit and its run's.
	return &Process{a: a, key: l.k, between: l.ap.bw, native: native, unsaved: l.b.KeepsSession(), restore: report, binding: l.b, served: l.b}, nil
}

// usePre gives key k the session spare process ap opened ahead: its
// capability is bound to k's channel, and k's cold turn starts on it
// without waiting for session/new. Capabilities issued for k meanwhile
// (keyRelease, for a fork that found nothing to fork) are revoked now: no
// session carries them. Nil when the capability could not be bound; the
// session opened ahead is dropped then, and so are those capabilities.
func (kp *Keeper) usePre(ap *agentProc, pre *preopened, k session.Key, b config.Binding, keyRelease func(), report *apitype.RestoreReport, log *zap.Logger) *Process {
	if keyRelease != nil {
		keyRelease()
	}
	if pre.bind != nil {
		if err := pre.bind(k); err != nil {
			log.Warn("the spare's session opened ahead could not be given this key's capability; opening a new session", zap.String("native", pre.native), zap.Error(err))
			kp.dropPre(ap, pre, log)
			return nil
		}
	}
	kp.m.SpareEvents.WithLabelValues(b.ID, "session_used").Inc()
	log.Info("session opened ahead on the spare taken", zap.String("native", pre.native), zap.Int("pid", ap.a.Pid()))
	return kp.live(&Process{a: ap.a, key: k, between: ap.bw, native: pre.native, unsaved: b.KeepsSession(), restore: report, binding: b, served: b})
}

// releases are what a process's exit undoes (its capabilities revoked),
// added as they are made; one added after the exit ran runs at once.
type releases struct {
	mu   sync.Mutex // guards fs and done; the releases (the tools registry's lock) run outside it
	fs   []func()
	done bool
}

func (r *releases) add(f func()) {
	if f == nil {
		return
	}
	r.mu.Lock()
	if r.done {
		r.mu.Unlock()
		f()
		return
	}
	r.fs = append(r.fs, f)
	r.mu.Unlock()
}

func (r *releases) run() {
	r.mu.Lock()
	fs := r.fs
	r.fs, r.done = nil, true
	r.mu.Unlock()
	for _, f := range fs {
		f()
	}
}

// fork opens thread key k's first session on a's process (the key's own,
// new one) as a fork of the channel key's saved session, and files the
// channel session's watermarks under k for the fork: it has seen what its
// source had. The source's id and watermarks are read together, before the
// fork, so the fork holds at least what they say it saw (a turn the
// source commits meanwhile is in the fork or not; its lines show again in
// the thread at worst, never go missing). The fork's id is this process's
// alone: no other process, the channel's included, ever serves it. A nil
// process and no error: there is nothing to fork, or the agent refused;
// the caller starts a new session.
func (kp *Keeper) fork(ctx context.Context, a *acp.Agent, k session.Key, b config.Binding, bw *between, log *zap.Logger) (*Process, error) {
	src, wms, err := kp.st.ForkSource(k.Main())
	if err != nil {
		return nil, fmt.Errorf("read the channel's session to fork: %w", err)
	}
	if src == "" {
		return nil, nil
	}
	restoreNote(ctx)(apitype.Event{Event: apitype.EventRestoring, Method: "fork"})
	t0 := kp.now()
	sctx, span := tracing.Start(ctx, "session fork")
	fctx, cancel := context.WithTimeout(sctx, time.Duration(kp.conf().RestoreTimeout))
	native, err := a.ForkSession(fctx, src)
	cancel()
	if span.IsRecording() {
		span.SetAttributes(attribute.String("residentd.fork.source", src), attribute.String("residentd.native_session", native))
		if err != nil {
			span.SetStatus(codes.Error, err.Error())
		}
	}
	span.End()
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		select {
		case <-a.Done():
			return nil, fmt.Errorf("agent exited during session/fork of %q: %w", src, a.ExitErr())
		default:
		}
		log.Warn("session/fork of the channel's session failed; starting a new session with the thread's snapshot", zap.String("source", src), zap.Error(err))
		return nil, nil
	}
	kp.m.ObserveSessionReady("fork", kp.now().Sub(t0))
	if err := kp.st.InheritWatermarks(k, native, wms); err != nil {
		// The fork stands; without them its first turn shows the thread
		// from its start, as a new session's would.
		log.Warn("the fork's inherited watermarks were not saved", zap.String("native", native), zap.Error(err))
	}
	p := &Process{a: a, key: k, between: bw, native: native, restoredBy: "fork", unsaved: true, binding: b, served: b}
	// The fork holds the channel's facts already: its first turn says
	// them again only when they changed.
	if conv, err := kp.st.Conversation(k.Main()); err == nil {
		for i := len(conv) - 1; i >= 0; i-- {
			if conv[i].Role == session.RoleUser {
				p.facts = conv[i].Facts
				break
			}
		}
	}
	log.Info("session forked from the channel's", zap.String("native", native), zap.String("source", src), zap.Int("watermarks", len(wms)), zap.Int("pid", a.Pid()))
	return kp.live(p), nil
}

// agentSpec is how to start binding b's agent. Nothing in it is specific
// to a key, so a spare started with it fits any key: what a session needs
// of its key goes in the session request (see servers).
func (kp *Keeper) agentSpec(b config.Binding) (acp.Spec, error) {
	dir := b.Dir
	if dir == "" {
		dir = filepath.Join(kp.conf().StateDir, "work", b.ID)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return acp.Spec{}, fmt.Errorf("create working dir: %w", err)
	}
	env := make([]string, 0, len(b.Env))
	for k, v := range b.Env {
		env = append(env, k+"="+v)
	}
	sort.Strings(env)
	env = kp.residencyEnv(b, env)
	return acp.Spec{
		Command: b.Command, Args: b.Args, Env: env, Dir: dir, Permission: b.Permission, Ask: kp.ask, Elicit: kp.formsOf(b), SessionMeta: kp.sessionMeta(b),
		SystemPrompt: kp.systemPrompt(b),
		MCPServers:   []sdk.McpServer{}, Grace: time.Duration(kp.conf().AgentGrace), CancelGrace: time.Duration(kp.conf().AgentCancelGrace),
		Cgroups: kp.cgroups, Limits: limitsOf(b), MarkPrefix: kp.st.MarkPrefix(), StartTimeout: startLimit(b),
		Protocol: b.Protocol,
	}, nil
}

// servers are the MCP servers of key k's session (the channel tools, with
// a capability scoped to k's channel) and a release func to call once its
// process has exited (it revokes the capability).
func (kp *Keeper) servers(k session.Key, b config.Binding) ([]sdk.McpServer, func()) {
	mcp := []sdk.McpServer{}
	release := func() {}
	if kp.mcp != nil && b.ToolsOn() {
		servers, rel := kp.mcp(k, b)
		mcp = append(mcp, servers...)
		if rel != nil {
			release = rel
		}
	}
	return mcp, release
}

// agentProc is an agent process as the one spawn path started it: for a
// turn's key at once, or as a spare that learns its key when a turn takes
// it.
type agentProc struct {
	a       *acp.Agent
	bw      *between
	binding string
	started config.Binding // the binding it was started with
	born    time.Time

	// mu guards hook, gone and pre; nothing else is locked under it (bind
	// sets its between's key before it, exit runs hook after it).
	mu   sync.Mutex
	hook func()     // what its exit runs once it is bound to a key (the pool's hook)
	gone bool       // it exited
	pre  *preopened // the session it opened ahead as a spare, until a turn takes it
}

// exit runs on the reaper once the process is gone.
func (p *agentProc) exit(d *Keeper) {
	p.mu.Lock()
	p.gone = true
	f, pre := p.hook, p.pre
	p.pre = nil
	p.mu.Unlock()
	if pre != nil && pre.release != nil {
		pre.release()
	}
	if f != nil {
		f()
		return
	}
	d.spareExited(p)
}

// unbind takes the process from its key: its exit no longer runs the
// key's hook (a restore gave it up and goes on on another process).
func (p *agentProc) unbind() {
	p.mu.Lock()
	p.hook = nil
	p.mu.Unlock()
}

// bind gives the process to key k: its output between prompts becomes k's
// agent runs, and hook runs at its exit. False when it already exited.
func (p *agentProc) bind(k session.Key, log *zap.Logger, hook func()) bool {
	p.bw.mu.Lock()
	p.bw.key, p.bw.log = k, log
	p.bw.mu.Unlock()
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.gone {
		return false
	}
	p.hook = hook
	return true
}

// startAgent is the one way an agent process starts, for a turn's key or
// as a spare (k then names only the binding): contained (own process
// group, cgroup and limits, cleaned environment), initialized, recorded for
// the startup sweep, its exit watched.
//
// A start that runs past the binding's start_timeout (the agent did not
// answer initialize in time, and ctx still runs) is tried once more at
// once with twice the limit: on a busy machine a slow agent is not a
// broken one. Only what the second try ends with is the caller's to
// count; ctx bounds both tries.
func (kp *Keeper) startAgent(ctx context.Context, b config.Binding, k session.Key, log *zap.Logger) (*agentProc, error) {
	spec, err := kp.agentSpec(b)
	if err != nil {
		return nil, err
	}
	p, err := kp.startOnce(ctx, spec, b, k, log)
	if !startTimedOut(ctx, err) {
		return p, err
	}
	first := spec.StartTimeout
	kp.m.StartTimeouts.WithLabelValues(b.ID, "first").Inc()
	log.Warn("agent did not answer initialize within the binding's start_timeout; starting it again with twice the limit",
		zap.Duration("start_timeout", first), zap.Error(err))
	spec.StartTimeout = 2 * first
	p, err = kp.startOnce(ctx, spec, b, k, log)
	if startTimedOut(ctx, err) {
		kp.m.StartTimeouts.WithLabelValues(b.ID, "second").Inc()
		err = fmt.Errorf("binding %q's agent did not answer initialize within start_timeout (%s), nor within %s on a second try (raise start_timeout on a busy machine): %w",
			b.ID, first, spec.StartTimeout, err)
	}
	return p, err
}

// startForTurn is startAgent for a turn's key: both tries stay within the
// turn's own time limit (turn_timeout), as its prompt does.
func (kp *Keeper) startForTurn(ctx context.Context, b config.Binding, k session.Key, log *zap.Logger) (*agentProc, error) {
	if b.TurnTimeout <= 0 {
		return kp.startAgent(ctx, b, k, log)
	}
	sctx, cancel := context.WithTimeoutCause(ctx, time.Duration(b.TurnTimeout),
		fmt.Errorf("the agent's start ran past binding %q's turn_timeout (%s)", b.ID, time.Duration(b.TurnTimeout)))
	defer cancel()
	p, err := kp.startAgent(sctx, b, k, log)
	if err != nil && ctx.Err() == nil && sctx.Err() != nil {
		err = fmt.Errorf("%w: %w", context.Cause(sctx), err)
	}
	return p, err
}

// startLimit is binding b's start_timeout, its default when unset.
func startLimit(b config.Binding) time.Duration {
	if b.StartTimeout > 0 {
		return time.Duration(b.StartTimeout)
	}
	return config.DefaultStartTimeout
}

// startTimedOut reports whether err is a start's own limit running out
// (acp.Start's initialize), not ctx ending.
func startTimedOut(ctx context.Context, err error) bool {
	return errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil
}

// startOnce is one try of startAgent, with spec's start limit.
func (kp *Keeper) startOnce(ctx context.Context, spec acp.Spec, b config.Binding, k session.Key, log *zap.Logger) (*agentProc, error) {
	bw := &between{k: kp, key: k, log: log, res: procResOf(b, spec.Env)}
	spec.Between = bw.add
	spec.Stray = func(native string, n int) { kp.m.Stray(b.ID, n) }
	// Its exit hook is counted from now: Close waits for an agent starting.
	if !kp.hold() {
		return nil, fmt.Errorf("resident: the keeper is closed: %w", pool.ErrClosed)
	}
	t0 := kp.now()
	a, err := acp.Start(ctx, spec, log)
	if err != nil {
		kp.wg.Done()
		return nil, err
	}
	bw.mu.Lock()
	bw.pid = a.Pid()
	bw.mu.Unlock()
	kp.m.ObserveSpawn(kp.now().Sub(t0))
	kp.recordAgent(a, k, b.Command, log)
	p := &agentProc{a: a, bw: bw, binding: b.ID, started: b, born: kp.now()}
	kp.watchExit(a, k, log, func() { bw.end("exit"); p.exit(kp); kp.kickSpares() })
	return p, nil
}

// live registers s for the sessions listing until its process is reaped.
func (kp *Keeper) live(s *Process) *Process {
	kp.procs.Store(s.a.Pid(), s)
	select {
	case <-s.a.Done(): // reaped before the store: its watcher already cleaned up
		kp.procs.Delete(s.a.Pid())
	default:
	}
	return s
}

// recordAgent notes a spawned agent in the store so that a daemon restarted
// after a crash can find and stop the process group this one leaves behind.
// The record rides the store's next write (the turn's own commit, for a
// cold turn), so it costs no fsync pair; an agent whose record a crash
// left unwritten is found by its mark, which begins with the store's
// MarkPrefix (sweepLeftovers).
func (kp *Keeper) recordAgent(a *acp.Agent, k session.Key, command string, log *zap.Logger) {
	pid := a.Pid()
	ticks, err := child.StartTicks(pid)
	if err != nil {
		// Already gone, or not identifiable: a record nobody can verify is useless.
		log.Warn("agent start time unknown; not recorded for the startup sweep", zap.Int("pid", pid), zap.Error(err))
		return
	}
	pgid, err := syscall.Getpgid(pid)
	if err != nil {
		pgid = pid // acp starts every agent as its own group leader
	}
	rec := store.AgentRecord{Pid: pid, Pgid: pgid, StartTicks: ticks, Command: command, Key: k, StartedAt: time.Now(), Mark: a.Mark(), Cgroup: a.Cgroup()}
	if err := kp.st.RecordAgent(rec); err != nil {
		log.Warn("record agent failed", zap.Int("pid", pid), zap.Error(err))
	}
}

// watchExit has the agent's reaper clean up after its exit: the listing,
// the tools' capability, the store's record, the exit counter. The hook
// ends the work startAgent held for it.
func (kp *Keeper) watchExit(a *acp.Agent, k session.Key, log *zap.Logger, release func()) {
	a.OnExit(func() {
		defer kp.wg.Done()
		kp.procs.Delete(a.Pid())
		kp.exitedWorktree(k)
		release()
		if err := kp.st.ForgetAgent(a.Pid()); err != nil {
			log.Warn("forget agent record failed", zap.Int("pid", a.Pid()), zap.Error(err))
		}
		kp.m.AgentExited(a.ExitKind())
		log.Info("agent exited", zap.Int("pid", a.Pid()), zap.String("kind", a.ExitKind()))
	})
}

// openCgroups makes the cgroup subtree the agents run in, named with the
// store's mark prefix so the next daemon on the store finds it, and says
// once how agents are contained: in cgroups (with which limit
// controllers), or by process group and the mark their descendants inherit.
func openCgroups(cfg *config.Config, prefix string, log *zap.Logger) *child.Cgroups {
	if !cfg.CgroupsOn() {
		log.Info("agent cgroups off (cgroups: false); agents are stopped by process group and by the mark their descendants inherit")
		return nil
	}
	var want []string
	for _, b := range cfg.Bindings {
		for _, c := range limitsOf(b).Controllers() {
			if !slices.Contains(want, c) {
				want = append(want, c)
			}
		}
	}
	cg, err := child.OpenCgroups(prefix, want)
	if err != nil {
		log.Warn("agents run without cgroups of their own; they are stopped by process group and by the mark their descendants inherit, and memory, pids and cpu limits are not applied", zap.Error(err))
		return nil
	}
	var missing []string
	for _, c := range want {
		if !slices.Contains(cg.Controllers, c) {
			missing = append(missing, c)
		}
	}
	if len(missing) > 0 {
		log.Warn("cgroup controllers unavailable to the daemon; the limits that need them are not applied", zap.Strings("controllers", missing), zap.String("cgroup", cg.Dir))
	}
	log.Info("agents run in cgroups of their own", zap.String("cgroup", cg.Dir), zap.Strings("controllers", cg.Controllers))
	return cg
}

// limitsOf is a binding's limits as the child package applies them.
func limitsOf(b config.Binding) child.Limits {
	l := b.Limits
	return child.Limits{MemoryMax: int64(l.MemoryMax), PidsMax: l.PidsMax, CPUWeight: l.CPUWeight, NoFile: l.NoFile}
}

// systemPrompt is the text b's sessions get as their system prompt where
// the agent takes one; a framing file that cannot be read leaves it in the
// turn, whose compose reports the error.
func (kp *Keeper) systemPrompt(b config.Binding) string {
	text, err := b.SystemPrompt()
	if err != nil {
		kp.log.Warn("framing not readable for the system prompt; it goes in the first turn", zap.String("binding", b.ID), zap.Error(err))
		return ""
	}
	return text
}

// formsOf is the ElicitFunc b's agents get: none when b turns forms off, so
// none is advertised.
func (kp *Keeper) formsOf(b config.Binding) acp.ElicitFunc {
	if !b.Forms() {
		return nil
	}
	return kp.elicit
}
