package resident

import (
	"context"
	"fmt"
	"sync"
	"time"

	sdk "github.com/coder/acp-go-sdk"
	"go.uber.org/zap"

	"github.com/residentd/residentd/apitype"
	"github.com/residentd/residentd/internal/child"
	"github.com/residentd/residentd/internal/config"
	"github.com/residentd/residentd/internal/session"
)

// Spares are agent processes spawned and initialized ahead for a binding,
// with no key yet, so a cold or restored turn takes one (and sends its
// session/new or session/resume on it) instead of waiting for a spawn. They
// start through the one spawn path (startAgent), so they are contained like
// any agent; nothing in a process is specific to a key (see agentSpec), so
// any spare fits any key of its binding.
//
// One goroutine keeps them (RunSpares starts it, StopSpares ends it): it
// starts a binding's spares, one at a time, while the binding had a turn
// within idle_timeout (or has spare_at_start), it has fewer than its
// spare setting, and the pool's processes and all spares together stay
// below max_processes; it stops a binding's spares once the binding has
// been idle for idle_timeout. A spare that exits before a turn took it
// counts as a failure of its binding's agent in the crash loop, whose
// backoff the goroutine waits out like a turn would. A spare that fails to
// start does not: it backs off the binding's spares alone (failing), so a
// slow start on a busy machine never holds a turn back; an agent that
// cannot start at all is found out by the turns' own spawns.
type spares struct {
	// mu guards ready, starting, lastTurn, failing, want, poolLive, running
	// and closed. Nothing else is locked under it (poolLive, which takes the
	// pool's lock, is called outside it), and it is taken under no other.
	mu       sync.Mutex
	ready    map[string][]*agentProc // binding id -> its spares, oldest first
	starting int                     // spares being started (the goroutine starts one at a time)
	lastTurn map[string]time.Time    // binding id -> its last turn (or the start, with spare_at_start)
	failing  map[string]*keyLoop     // binding id -> its spares' failed starts in a row, and their backoff

	// want is each binding's spare setting, in configuration order, for
	// the bindings that have one: read once, when the keeper is made.
	want []bindingSpares

	kick     chan struct{} // wakes the goroutine: a turn, an exit
	poolLive func() int    // the pool's processes (alive, starting or stopping)
	running  bool          // RunSpares started the goroutine
	closed   bool          // StopSpares ran: no spare joins ready
}

// bindingSpares is a binding's spare setting.
type bindingSpares struct {
	id      string
	n       int
	atStart bool
}

// init reads the bindings' spare settings.
func (s *spares) init(cfg *config.Config) {
	*s = spares{ready: map[string][]*agentProc{}, lastTurn: map[string]time.Time{}, failing: map[string]*keyLoop{}, kick: make(chan struct{}, 1), want: wantedSpares(cfg)}
}

// wantedSpares is the spare setting of cfg's bindings that have one, in
// configuration order.
func wantedSpares(cfg *config.Config) []bindingSpares {
	var want []bindingSpares
	for _, b := range cfg.Bindings {
		if n := b.Spares(); n > 0 {
			want = append(want, bindingSpares{b.ID, n, b.SpareAtStart})
		}
	}
	return want
}

// reconfigureSpares puts a reloaded config's spare settings in force: the
// spares of a binding that was removed, or whose processes a changed
// setting replaces (fits: config.Binding.SameProcess, and the permission
// policy's session _meta), stop, as do those above a lowered spare
// setting; the goroutine then starts what is missing.
func (kp *Keeper) reconfigureSpares(_, n *config.Config) {
	s := &kp.sp
	var stop []*agentProc
	s.mu.Lock()
	s.want = wantedSpares(n)
	for id, list := range s.ready {
		nb, ok := n.Binding(id)
		var kept []*agentProc
		for _, p := range list {
			// What the spare's process, or the session it opened ahead,
			// was started with still holds.
			if ok && len(kept) < nb.Spares() && fits(&p.started, &nb, p.a.Info()) {
				kept = append(kept, p)
			} else {
				stop = append(stop, p)
			}
		}
		s.ready[id] = kept
		kp.m.SpareProcesses.WithLabelValues(id).Set(float64(len(kept)))
	}
	s.mu.Unlock()
	// Off the reload's path: stopping waits for the agents' grace.
	if len(stop) > 0 && !kp.goBg(func(context.Context) { kp.stopEach(stop, "reload") }) {
		kp.stopEach(stop, "reload") // the keeper is closed
	}
	kp.kickSpares()
}

// of reports binding's spare setting.
func (s *spares) of(binding string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, w := range s.want {
		if w.id == binding {
			return w.n
		}
	}
	return 0
}

// RunSpares starts the goroutine that keeps the bindings' spares; live
// counts the pool's processes, for max_processes. Call it once, after the
// pool exists; StopSpares ends it. A keeper it is never called on keeps no
// spares.
func (kp *Keeper) RunSpares(live func() int) {
	s := &kp.sp
	s.mu.Lock()
	if s.closed || s.running {
		s.mu.Unlock()
		return
	}
	s.running, s.poolLive = true, live
	for _, w := range s.want {
		if w.atStart {
			s.lastTurn[w.id] = kp.now()
		}
	}
	s.mu.Unlock()
	kp.goBg(kp.keepSpares)
}

// StopSpares begins the keeper's shutdown: its ctx is cancelled, so the
// spares' goroutine ends (a spare it was starting is stopped, never
// kept), and every spare is stopped, for good. A daemon that shuts down
// calls it first, Close again. Idempotent.
func (kp *Keeper) StopSpares() {
	s := &kp.sp
	s.mu.Lock()
	s.closed = true
	var all []*agentProc
	for id, list := range s.ready {
		all = append(all, list...)
		delete(s.ready, id)
		kp.m.SpareProcesses.WithLabelValues(id).Set(0)
	}
	s.mu.Unlock()
	kp.cancel()
	kp.stopEach(all, "shutdown")
}

// spareWanted notes a turn of binding that got its process (Prepare calls
// it): its spares are kept, and started now, for idle_timeout from now.
// Once the turn's process is ready, so a replacement spare's spawn does
// not compete with the turn's own session request for the machine, and
// never for a binding whose agent cannot start.
func (kp *Keeper) spareWanted(binding string) {
	s := &kp.sp
	if s.of(binding) == 0 {
		return
	}
	s.mu.Lock()
	s.lastTurn[binding] = kp.now()
	s.mu.Unlock()
	kp.kickSpares()
}

// kickSpares wakes the goroutine without waiting for it.
func (kp *Keeper) kickSpares() {
	select {
	case kp.sp.kick <- struct{}{}:
	default:
	}
}

// takeSpare hands out binding's oldest spare, or nil when it has none.
func (kp *Keeper) takeSpare(binding string) *agentProc {
	s := &kp.sp
	s.mu.Lock()
	list := s.ready[binding]
	if len(list) == 0 {
		s.mu.Unlock()
		return nil
	}
	p := list[0]
	s.ready[binding] = list[1:]
	n := len(list) - 1
	s.mu.Unlock()
	kp.m.SpareProcesses.WithLabelValues(binding).Set(float64(n))
	kp.m.SpareEvents.WithLabelValues(binding, "taken").Inc()
	return p
}

// makeRoom stops the oldest spare when a turn's spawn (the pool counts it
// already) takes every process to more than max_processes: the key-bound
// processes come first.
func (kp *Keeper) makeRoom() {
	s := &kp.sp
	s.mu.Lock()
	poolLive := s.poolLive
	s.mu.Unlock()
	if poolLive == nil {
		return
	}
	live := poolLive() // outside mu: it takes the pool's lock
	s.mu.Lock()
	var oldest *agentProc
	n := s.starting
	for _, list := range s.ready {
		n += len(list)
		if len(list) > 0 && (oldest == nil || list[0].born.Before(oldest.born)) {
			oldest = list[0]
		}
	}
	if oldest == nil || live+n <= kp.conf().ProcessCap() {
		s.mu.Unlock()
		return
	}
	s.ready[oldest.binding] = s.ready[oldest.binding][1:]
	left := len(s.ready[oldest.binding])
	s.mu.Unlock()
	kp.m.SpareProcesses.WithLabelValues(oldest.binding).Set(float64(left))
	kp.stopEach([]*agentProc{oldest}, "capacity")
}

// spareExited is an unbound process's exit: a spare that died before a
// turn took it is dropped and counts as a failure of its binding's agent.
func (kp *Keeper) spareExited(p *agentProc) {
	s := &kp.sp
	s.mu.Lock()
	list := s.ready[p.binding]
	found := false
	for i, q := range list {
		if q == p {
			s.ready[p.binding] = append(list[:i:i], list[i+1:]...)
			found = true
			break
		}
	}
	left := len(s.ready[p.binding])
	s.mu.Unlock()
	if !found {
		return // taken meanwhile, or being stopped
	}
	kp.m.SpareProcesses.WithLabelValues(p.binding).Set(float64(left))
	kp.m.SpareEvents.WithLabelValues(p.binding, "exited").Inc()
	err := fmt.Errorf("spare agent pid %d of binding %q exited before a turn took it: %w", p.a.Pid(), p.binding, p.a.ExitErr())
	kp.log.Warn("spare agent exited", zap.String("binding", p.binding), zap.Int("pid", p.a.Pid()), zap.String("stderr", p.a.StderrTail()), zap.Error(err))
	kp.spawnFailed(p.binding, err)
	kp.kickSpares()
}

// stopEach stops spares the keeper no longer keeps, counted by why.
func (kp *Keeper) stopEach(ps []*agentProc, why string) {
	var wg sync.WaitGroup
	for _, p := range ps {
		// Out of the list already: its exit does not count as a death.
		kp.m.SpareEvents.WithLabelValues(p.binding, "stopped").Inc()
		kp.log.Info("spare agent stopped", zap.String("binding", p.binding), zap.Int("pid", p.a.Pid()), zap.String("why", why))
		wg.Add(1)
		go func() {
			defer wg.Done()
			p.a.Close()
		}()
	}
	wg.Wait()
}

// keepSpares is the spares' goroutine.
func (kp *Keeper) keepSpares(ctx context.Context) {
	idle := time.Duration(kp.conf().IdleTimeout)
	tick := time.NewTicker(max(min(idle/10, time.Minute), 10*time.Millisecond))
	defer tick.Stop()
	var retry <-chan time.Time
	for {
		if wait := kp.fillSpares(ctx); wait > 0 && retry == nil {
			retry = time.After(wait)
		}
		select {
		case <-ctx.Done():
			return
		case <-kp.sp.kick:
		case <-retry:
			retry = nil
		case <-tick.C:
			kp.reapSpares()
		}
	}
}

// fillSpares starts the spares the bindings lack, within max_processes,
// and returns how long to wait before trying again after a failure or a
// backoff (0: nothing to retry).
func (kp *Keeper) fillSpares(ctx context.Context) time.Duration {
	s := &kp.sp
	idle := time.Duration(kp.conf().IdleTimeout)
	s.mu.Lock()
	want := s.want
	s.mu.Unlock()
	for _, w := range want {
		k := session.Key{Binding: w.id}
		for ctx.Err() == nil {
			live := s.poolLive() // outside mu: it takes the pool's lock
			s.mu.Lock()
			last, had := s.lastTurn[w.id]
			have := len(s.ready[w.id])
			total := 0
			for _, list := range s.ready {
				total += len(list)
			}
			full := live+total >= kp.conf().ProcessCap() || kp.res.tight.Load()
			s.mu.Unlock()
			if !had || kp.now().Sub(last) >= idle || have >= w.n {
				break
			}
			if full {
				return 0 // an exit wakes the goroutine again
			}
			if err := kp.checkBackoff(w.id, k); err != nil {
				return kp.backoffBase
			}
			if wait := kp.spareWait(w.id); wait > 0 {
				return wait
			}
			log := kp.log.Named("agent").With(zap.String("binding", w.id), zap.Bool("spare", true))
			s.mu.Lock()
			s.starting++
			s.mu.Unlock()
			// Read as a turn's spawn reads it: only to start one.
			b, _ := kp.conf().Binding(w.id)
			p, err := kp.startAgent(ctx, b, k, log)
			if err == nil {
				kp.preopen(ctx, p, b, log)
			}
			s.mu.Lock()
			s.starting--
			closed := s.closed
			if err == nil && !closed {
				s.ready[w.id] = append(s.ready[w.id], p)
				have = len(s.ready[w.id])
				delete(s.failing, w.id)
			}
			s.mu.Unlock()
			if err == nil && closed {
				// StopSpares ran while it started: it is stopped, not kept.
				kp.stopEach([]*agentProc{p}, "shutdown")
				return 0
			}
			if err != nil {
				if ctx.Err() != nil {
					return 0
				}
				kp.m.SpareEvents.WithLabelValues(w.id, "failed").Inc()
				wait := kp.spareFailed(w.id, err)
				log.Warn("spare agent failed to start; the binding's next spare waits, its turns do not", zap.Duration("next_spare_in", wait), zap.Error(err))
				if kp.onSpare != nil {
					kp.onSpare(w.id, 0)
				}
				return wait
			}
			kp.m.SpareEvents.WithLabelValues(w.id, "started").Inc()
			kp.m.SpareProcesses.WithLabelValues(w.id).Set(float64(have))
			log.Info("spare agent ready", zap.Int("pid", p.a.Pid()))
			if kp.onSpare != nil {
				kp.onSpare(w.id, p.a.Pid())
			}
			select {
			case <-p.a.Done(): // died at once: its exit hook may have run before the append
				kp.spareExited(p)
			default:
			}
		}
	}
	return 0
}

// spareFailed counts a spare of binding that failed to start and returns
// how long the binding's spares wait before the next: the crash loop's
// backoff for the failures in a row, at least its base. It is not counted
// in the binding's crash loop: no turn is held back by it.
func (kp *Keeper) spareFailed(binding string, err error) time.Duration {
	s := &kp.sp
	s.mu.Lock()
	defer s.mu.Unlock()
	l := s.failing[binding]
	if l == nil {
		l = &keyLoop{}
		s.failing[binding] = l
	}
	wait := max(kp.backoff(l.crash.fail(err)), kp.backoffBase)
	l.until = kp.now().Add(wait)
	return wait
}

// spareWait is how long binding's spares still wait after failed starts.
func (kp *Keeper) spareWait(binding string) time.Duration {
	s := &kp.sp
	s.mu.Lock()
	defer s.mu.Unlock()
	if l := s.failing[binding]; l != nil {
		return max(l.until.Sub(kp.now()), 0)
	}
	return 0
}

// reapSpares stops the spares of bindings idle for idle_timeout: no turn
// since, so no spare until their next turn.
func (kp *Keeper) reapSpares() {
	s := &kp.sp
	idle := time.Duration(kp.conf().IdleTimeout)
	var stop []*agentProc
	s.mu.Lock()
	for id, last := range s.lastTurn {
		if kp.now().Sub(last) < idle {
			continue
		}
		delete(s.lastTurn, id)
		delete(s.failing, id)
		stop = append(stop, s.ready[id]...)
		delete(s.ready, id)
		kp.m.SpareProcesses.WithLabelValues(id).Set(0)
	}
	s.mu.Unlock()
	kp.stopEach(stop, "idle")
}

// Spares lists the spare processes, by binding then age, for the sessions
// listing.
func (kp *Keeper) Spares() []apitype.Spare {
	s := &kp.sp
	s.mu.Lock()
	var ps []*agentProc
	for _, w := range s.want {
		ps = append(ps, s.ready[w.id]...)
	}
	s.mu.Unlock()
	out := make([]apitype.Spare, 0, len(ps))
	for _, p := range ps {
		sp := apitype.Spare{Binding: p.binding, Pid: p.a.Pid(), Started: p.born, IdleS: kp.now().Sub(p.born).Seconds()}
		if rss, source, err := child.Memory(sp.Pid); err == nil {
			sp.RSSBytes, sp.MemorySource = rss, source
		}
		out = append(out, sp)
	}
	return out
}

// preopened is a session a spare opened ahead, before any key, with the
// capability its MCP server carries: bind gives it the key of the turn
// that takes the session, release revokes it (both nil without tools).
type preopened struct {
	native  string
	bind    func(session.Key) error
	release func()
}

// preopen has spare p open a session ahead, so a cold turn that takes it
// starts without waiting for session/new (for claude-agent-acp most of a
// cold start: the session starts the CLI). Nothing in the request is
// specific to a key: cwd and _meta are the binding's, and the channel
// tools' capability goes unbound (SpareMCPServers). A binding with tools
// but no way to issue one opens nothing ahead; a failure only logs, and
// the spare stays without a session. A binding with spare_session false
// opens none, nor does a worktree binding: a session's cwd is fixed when
// it opens, and it is the key's worktree, unknown before a turn takes
// the spare.
func (kp *Keeper) preopen(ctx context.Context, p *agentProc, b config.Binding, log *zap.Logger) {
	if !b.SpareSessionOn() || b.WorktreeOn() {
		return
	}
	servers := []sdk.McpServer{}
	pre := &preopened{}
	if kp.mcp != nil && b.ToolsOn() {
		if kp.mcpSpare == nil {
			return
		}
		srv, bind, release := kp.mcpSpare(b)
		if bind == nil {
			return
		}
		servers, pre.bind, pre.release = append(servers, srv...), bind, release
	}
	p.a.SetMCPServers(servers)
	native, err := p.a.NewSession(ctx)
	if err != nil {
		if pre.release != nil {
			pre.release()
		}
		if ctx.Err() == nil {
			log.Warn("spare agent: session/new ahead of a turn failed; the spare waits without a session", zap.Int("pid", p.a.Pid()), zap.Error(err), zap.String("stderr_tail", p.a.StderrLines()))
		}
		return
	}
	pre.native = native
	p.mu.Lock()
	gone := p.gone
	if !gone {
		p.pre = pre
	}
	p.mu.Unlock()
	if gone {
		if pre.release != nil {
			pre.release()
		}
		return
	}
	kp.m.SpareEvents.WithLabelValues(b.ID, "session_opened").Inc()
	log.Debug("spare agent opened a session ahead", zap.Int("pid", p.a.Pid()), zap.String("native", native))
}

// takePre hands out the session p opened ahead, nil when it has none.
func (p *agentProc) takePre() *preopened {
	p.mu.Lock()
	defer p.mu.Unlock()
	pre := p.pre
	p.pre = nil
	return pre
}

// dropPre drops the session spare ap opened ahead when a turn needs
// another one (the key's saved session reopened, or a fork): its
// capability is revoked now, and the session closed where the agent
// advertises session/close, off the turn's path (the agent answers it
// while it handles the turn's own request). Without session/close it
// stays open, unused, until the process exits.
func (kp *Keeper) dropPre(ap *agentProc, pre *preopened, log *zap.Logger) {
	if pre == nil {
		return
	}
	if pre.release != nil {
		pre.release()
	}
	kp.m.SpareEvents.WithLabelValues(ap.binding, "session_dropped").Inc()
	if !ap.a.CanClose() {
		log.Debug("the spare's session opened ahead stays open unused: the agent has no session/close", zap.String("native", pre.native))
		return
	}
	kp.goBg(func(ctx context.Context) {
		ctx, cancel := context.WithTimeout(ctx, time.Duration(kp.conf().RestoreTimeout))
		defer cancel()
		if err := ap.a.CloseSession(ctx, pre.native); err != nil {
			log.Info("the spare's session opened ahead was not closed", zap.String("native", pre.native), zap.Error(err))
		}
	})
}
