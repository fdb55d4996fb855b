package daemon

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/residentd/residentd/internal/config"
	"github.com/residentd/residentd/internal/pool"
	"github.com/residentd/residentd/internal/residency"
	"github.com/residentd/residentd/internal/resident"
)

// DefaultTendEvery is how often the daemon looks at the agents' memory and
// at the idle sessions' caches.
const DefaultTendEvery = 5 * time.Second

// ReasonSparesFirst is the reason a spare is stopped for memory: spares
// go before any key's process.
const ReasonSparesFirst = "spares first"

// PressureFile is where the kernel reports memory pressure (PSI).
const PressureFile = "/proc/pressure/memory"

// policyFor is the residency policy c names (Validate refused any other),
// config.DefaultResidency when it names none. Whatever registers itself
// with residency.Register can be named.
func policyFor(c *config.Config) residency.Policy {
	idle := time.Duration(c.IdleTimeout)
	name := c.Residency
	if name == "" {
		name = config.DefaultResidency
	}
	if p, err := residency.ByName(name, residency.Settings{Idle: idle}); err == nil {
		return p
	}
	return residency.Timer{Idle: idle}
}

// decisionOf names what a pool decision was, for the metrics and the log.
func decisionOf(r pool.Reason) string {
	switch r {
	case pool.ReasonCapacity:
		return "evict"
	case pool.ReasonMemory:
		return "memory"
	}
	return "expire"
}

// decided hears the pool's residency decisions: counted and logged.
func (d *Daemon) decided(x pool.Decision) {
	what := decisionOf(x.Reason)
	d.m.ResidencyDecided(x.Key.Key.Binding, x.Policy, what, x.Why)
	fields := []zap.Field{zap.String("key", x.Key.Key.String()), zap.String("policy", x.Policy), zap.String("decision", what), zap.String("why", x.Why),
		zap.Duration("idle", x.At.Sub(x.Key.LastUsed)), zap.Int64("context_tokens", x.Key.ContextTokens), zap.Int64("memory_bytes", x.Key.MemoryBytes)}
	if !x.Key.LastRequest.IsZero() {
		fields = append(fields, zap.Time("cache_expires", x.Key.CacheExpires()))
	}
	d.log.Named("residency").Info("residency decision", fields...)
}

// startTending starts the loop that runs Tend every every (none when it
// is below 0); Close stops it.
func (d *Daemon) startTending(every time.Duration) {
	ctx, cancel := context.WithCancel(context.Background())
	d.tendStop, d.tendDone = cancel, make(chan struct{})
	if every < 0 {
		close(d.tendDone)
		return
	}
	if every == 0 {
		every = DefaultTendEvery
	}
	go func() {
		defer close(d.tendDone)
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				d.Tend(ctx)
			}
		}
	}()
}

// stopTending stops the loop and waits for a look in progress.
func (d *Daemon) stopTending() {
	d.tendStop()
	<-d.tendDone
}

// Tend is one look of the daemon's own residency work: the memory limits
// (spares first, then the policy's victims among the idle processes), then
// each idle session's cache (an idle compaction, a keep-alive). The loop
// runs it every Options.TendEvery; tests call it with an injected clock.
func (d *Daemon) Tend(ctx context.Context) {
	d.shedMemory()
	d.tendCaches(ctx)
}

// shedMemory stops processes while the agents' memory is over max_memory
// or the kernel's memory pressure over memory_pressure: the oldest spare
// first, then the idle process the residency policy picks. Pressure is a
// 10-second average, so under it one process goes per look.
func (d *Daemon) shedMemory() {
	c := d.conf()
	for range c.ProcessCap() + 1 {
		over := d.memoryOver(c)
		d.keeper.SetMemoryTight(over != "")
		if over == "" {
			return
		}
		log := d.log.Named("residency").With(zap.String("limit", over))
		if binding, pid, ok := d.keeper.ShedSpare(); ok {
			d.m.ResidencyDecided(binding, "rule", "memory", ReasonSparesFirst)
			log.Info("residency decision", zap.String("binding", binding), zap.Int("pid", pid), zap.String("policy", "rule"), zap.String("decision", "memory"), zap.String("why", ReasonSparesFirst))
		} else if _, ok := d.pool.Shed(pool.ReasonMemory); !ok {
			d.warnOnce("memory-nothing-idle", func() {
				log.Warn("memory over its limit with no spare and no idle process to stop; the busy ones stop nothing until their turns end")
			})
			return
		}
		if over == "memory_pressure" {
			return
		}
	}
}

// memoryOver names the limit the agents' memory is over ("" for none):
// max_memory (every agent's tree, spares included), then memory_pressure.
func (d *Daemon) memoryOver(c *config.Config) string {
	if c.MaxMemory > 0 && d.keeper.AgentMemoryTotal() > int64(c.MaxMemory) {
		return "max_memory"
	}
	if c.MemoryPressure <= 0 {
		return ""
	}
	some, err := readPressure(d.pressure)
	if err != nil {
		d.warnOnce("psi", func() {
			d.log.Warn("memory_pressure is set but the kernel's memory pressure cannot be read; it is not watched", zap.String("file", d.pressure), zap.Error(err))
		})
		return ""
	}
	if some >= c.MemoryPressure {
		return "memory_pressure"
	}
	return ""
}

// readPressure reads the "some avg10" of a PSI file: the share of the last
// 10 s, in percent, in which some task waited for memory.
func readPressure(path string) (float64, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 2 || fields[0] != "some" {
			continue
		}
		for _, kv := range fields[1:] {
			if v, ok := strings.CutPrefix(kv, "avg10="); ok {
				return strconv.ParseFloat(v, 64)
			}
		}
	}
	if err := sc.Err(); err != nil {
		return 0, err
	}
	return 0, errors.New("no \"some avg10=\" line")
}

// tendCaches gives each idle session what its cache calls for now: an
// idle compaction where the daemon times it, else a keep-alive where its
// binding asks for them, each when the policy (or the daemon's rule)
// says so.
func (d *Daemon) tendCaches(ctx context.Context) {
	pol := policyFor(d.conf())
	now := d.now()
	for _, in := range d.pool.Sessions() {
		if ctx.Err() != nil {
			return
		}
		if in.State != "idle" || in.Residency.Working {
			continue
		}
		if t := d.tendDue(pol, now, in); t != nil {
			d.tendOne(ctx, in, *t)
		}
	}
}

// tending is the daemon's own prompt an idle session is due: what
// ("compact", "keep_alive"), its text, who decided (the policy's name, or
// "rule") and why.
type tending struct{ what, text, by, why string }

// tendDue says what idle session in is due, nil for nothing.
func (d *Daemon) tendDue(pol residency.Policy, now time.Time, in pool.Info) *tending {
	compact, minTokens, keepAlive, ok := d.keeper.Tending(in.Pid)
	if !ok {
		return nil
	}
	k := in.Residency
	if compact != "" {
		due, why := residency.CompactDue(now, k, minTokens)
		by := "rule"
		if c, ok := pol.(residency.Compactor); ok {
			due, why = c.Compact(now, k, minTokens)
			by = pol.Name()
		}
		if due {
			return &tending{"compact", compact, by, why}
		}
	}
	if keepAlive {
		due, why := residency.KeepAliveDue(now, k)
		by := "rule"
		if c, ok := pol.(residency.KeepAliver); ok {
			due, why = c.KeepAlive(now, k)
			by = pol.Name()
		}
		if due {
			return &tending{"keep_alive", resident.KeepAlivePrompt, by, why}
		}
	}
	return nil
}

// tendOne sends the daemon's own prompt to in's idle session, when its
// process is still the one decided on and nothing waits for it.
func (d *Daemon) tendOne(ctx context.Context, in pool.Info, t tending) {
	co, ok := d.pool.Borrow(in.Key)
	if !ok {
		return
	}
	defer d.pool.Release(co, true)
	if co.Session.Pid() != in.Pid {
		return
	}
	d.m.ResidencyDecided(in.Key.Binding, t.by, t.what, t.why)
	d.log.Named("residency").Info("residency decision", zap.String("key", in.Key.String()), zap.Int("pid", in.Pid), zap.String("policy", t.by), zap.String("decision", t.what), zap.String("why", t.why),
		zap.Int64("context_tokens", in.Residency.ContextTokens), zap.Time("cache_expires", in.Residency.CacheExpires()))
	limit := 10 * time.Minute
	if b, ok := d.conf().Binding(in.Key.Binding); ok && b.TurnTimeout > 0 {
		limit = time.Duration(b.TurnTimeout)
	}
	tctx, cancel := context.WithTimeoutCause(ctx, limit, fmt.Errorf("the daemon's %s of %s ran past the binding's turn_timeout (%s)", t.what, in.Key, limit))
	defer cancel()
	if err := d.keeper.Tend(tctx, co.Session, t.what, t.text); err != nil {
		d.log.Named("residency").Warn("the daemon's own prompt on an idle session failed", zap.String("key", in.Key.String()), zap.String("decision", t.what), zap.Error(err))
	}
}
