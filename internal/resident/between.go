// What an agent says with no prompt in flight: a turn it started itself,
// background work that ended, a late message. It becomes an agent run of
// the key (kind "agent"): numbered events, a result, listed with the
// others and announced on the feed, its reply stored in the key's
// conversation so a cold replay includes it.

package resident

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/zap"

	"github.com/residentd/residentd/apitype"
	"github.com/residentd/residentd/internal/acp"
	"github.com/residentd/residentd/internal/pool"
	"github.com/residentd/residentd/internal/run"
	"github.com/residentd/residentd/internal/session"
	"github.com/residentd/residentd/internal/tracing"
)

// DefaultAgentQuiet is how long an agent run waits for more output before
// it ends.
const DefaultAgentQuiet = 2 * time.Second

// between gathers one process's output between prompts into agent runs.
// Its methods are safe for concurrent use; add runs on the agent's reader.
type between struct {
	k   *Keeper
	key session.Key
	pid int
	log *zap.Logger

	// ending is held by an end across its store write and the run's
	// finish, so the process's exit (which the daemon's Close waits for)
	// waits for an end the quiet timer began; mu is held only to detach
	// the run, never across a write: the pool asks working under its own
	// lock and add runs on the agent's reader, neither may wait for one.
	// Lock order: ending, then mu; ending, then the store's and the run
	// registry's and a run's (an end); mu, then the run registry's and a
	// run's (add opens and logs the agent run). mu itself is taken under
	// pool.Pool.mu (working) and acp's route mu (add): nothing under it
	// may call the pool or the agent.
	ending sync.Mutex

	mu     sync.Mutex
	r      *run.Run   // the open agent run, nil between them
	span   trace.Span // the open agent run's
	prompt trace.Span // the last prompt's: the parent of the agent run after it
	native string
	text   strings.Builder
	timer  *time.Timer
	closed bool      // the process is gone: no new runs
	last   time.Time // the last output between prompts

	since time.Time // when the process began working, zero while it is not
	over  bool      // it worked past background_limit (logged once)

	res *procRes // the process's cache and compaction (residency.go); set at its start
}

// working reports whether the process works with no turn in flight — an
// agent run is open, or the agent reported work running — and when it
// last did; past background_limit it no longer counts, with a log line.
func (bw *between) working(a *acp.Agent) (bool, time.Time) {
	agentWorks, changed := a.Working()
	bw.mu.Lock()
	defer bw.mu.Unlock()
	last := bw.last
	if changed.After(last) {
		last = changed
	}
	now := bw.k.now()
	if !agentWorks && bw.r == nil {
		bw.since, bw.over = time.Time{}, false
		return false, last
	}
	if bw.since.IsZero() {
		bw.since = now
	}
	conf := bw.k.conf()
	limit := time.Duration(conf.BackgroundLimit)
	if b, ok := conf.Binding(bw.key.Binding); ok {
		limit = time.Duration(b.BackgroundLimitOr(conf.BackgroundLimit))
	}
	if now.Sub(bw.since) < limit {
		return true, last
	}
	if !bw.over {
		bw.over = true
		bw.log.Warn("agent has been working with no turn in flight for longer than background_limit; it may now be stopped as idle or evicted", zap.Duration("background_limit", limit), zap.Time("working_since", bw.since))
	}
	return false, bw.since.Add(limit)
}

// add logs u in the open agent run, opening one first.
func (bw *between) add(native string, u acp.Update) {
	bw.mu.Lock()
	defer bw.mu.Unlock()
	if bw.closed {
		return
	}
	bw.last = bw.k.now()
	if bw.r == nil && !opensRun(u) {
		return // session state (commands, title, usage), not something said
	}
	if bw.r == nil {
		span := tracing.None
		if bw.prompt != nil {
			_, span = tracing.StartAfter(bw.prompt, "agent run")
		}
		traceID, spanID := tracing.IDs(span)
		r, err := bw.k.runs.NewKind(apitype.RunKindAgent, agentRunID(), bw.key, "", run.Trace{TraceID: traceID, SpanID: spanID})
		if err != nil {
			span.End()
			bw.log.Error("agent output between prompts: open its run", zap.Error(err))
			return
		}
		if span.IsRecording() {
			span.SetAttributes(attribute.String("residentd.run", r.ID), attribute.String("residentd.channel", bw.key.Channel),
				attribute.String("residentd.binding", bw.key.Binding), attribute.String("residentd.native_session", native))
		}
		bw.r, bw.native, bw.span = r, native, span
		bw.text.Reset()
		r.Emit(apitype.Event{Event: apitype.EventStarted, Shape: apitype.ShapeAgent, Native: native, Pid: bw.pid})
		bw.k.m.AgentRun()
		bw.log.Info("agent output between prompts: agent run started", zap.String("run", r.ID), zap.String("native", native))
		// A timer that fired for this run must not end a later one.
		bw.timer = bw.k.afterFunc(bw.k.agentQuiet, func() { bw.endRun(r, "quiet") })
	} else {
		bw.timer.Reset(bw.k.agentQuiet)
	}
	if u.Kind == acp.KindPermission {
		return // decided by policy out of turn; the log has it
	}
	up := u.Update
	if up.Kind == apitype.UpdateMessage && up.Subagent == "" {
		bw.text.WriteString(up.Text)
	}
	bw.r.Emit(apitype.Event{Event: apitype.EventUpdate, Update: &up})
}

// prompted notes the span of a prompt the process is given (ctx's).
func (bw *between) prompted(ctx context.Context) {
	span := trace.SpanFromContext(ctx)
	bw.mu.Lock()
	bw.prompt = span
	bw.mu.Unlock()
}

// open reports whether an agent run is open.
func (bw *between) open() bool {
	bw.mu.Lock()
	defer bw.mu.Unlock()
	return bw.r != nil
}

// cancelled ends the open agent run, if any, because the process is being
// stopped for r (start fresh or shutdown): cancelled with the reason, what
// it said so far kept in the key's conversation. No run opens after it.
func (bw *between) cancelled(r pool.Reason) {
	bw.ending.Lock()
	defer bw.ending.Unlock()
	run, text, native, span := bw.detach(nil, true)
	if run == nil {
		return
	}
	defer span.End()
	if text != "" {
		if err := bw.k.st.AppendTurns(bw.key, session.Turn{Role: session.RoleAssistant, Text: text, At: bw.k.now()}); err != nil {
			bw.log.Error("agent output between prompts: storing it in the key's conversation failed", zap.String("run", run.ID), zap.Error(err))
		}
	}
	code, msg := apitype.CodeCancelled, "cancelled: the session was started fresh while the agent worked in the background"
	if r == pool.ReasonShutdown {
		code, msg = apitype.CodeShuttingDown, "cancelled: residentd shut down while the agent worked in the background"
	}
	run.Finish(apitype.Event{Event: apitype.EventError, Shape: apitype.ShapeAgent, Native: native, Code: code, Message: msg, Text: text}, errors.New(msg))
	bw.log.Info("agent output between prompts: agent run cancelled", zap.String("run", run.ID), zap.String("why", string(r)), zap.Int("chars", len(text)))
}

// agentRunID is a new agent run's id.
func agentRunID() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return "agent-run-" + hex.EncodeToString(b[:])
}

// opensRun: u is something the agent said or did — a message, a thought,
// a tool call, a plan, a notice, a compaction, a subagent's update — not
// session state (its commands, title, context use, options), which goes
// into an open agent run but opens none.
func opensRun(u acp.Update) bool {
	if u.Subagent != "" {
		return true
	}
	switch u.Kind {
	case apitype.UpdateMessage, apitype.UpdateThought, apitype.UpdateToolCall, apitype.UpdateToolUpdate,
		apitype.UpdatePlan, apitype.UpdateNotice, apitype.UpdateCompaction:
		return true
	}
	return false
}

// end ends the open agent run, if any: done with its text, which joins the
// key's conversation. why is logged (quiet, prompt, exit).
func (bw *between) end(why string) { bw.endRun(nil, why) }

// endRun is end of the open agent run if it is only (nil: any).
func (bw *between) endRun(only *run.Run, why string) {
	bw.ending.Lock()
	defer bw.ending.Unlock()
	r, text, native, span := bw.detach(only, why == "exit")
	if r == nil {
		return
	}
	defer span.End()
	if text != "" {
		if err := bw.k.st.AppendTurns(bw.key, session.Turn{Role: session.RoleAssistant, Text: text, At: bw.k.now()}); err != nil {
			bw.log.Error("agent output between prompts: storing it in the key's conversation failed", zap.String("run", r.ID), zap.Error(err))
		}
	}
	r.Finish(apitype.Event{Event: apitype.EventDone, Shape: apitype.ShapeAgent, Native: native, Text: text, Watermark: apitype.WatermarkNone}, nil)
	bw.log.Info("agent output between prompts: agent run done", zap.String("run", r.ID), zap.String("why", why), zap.Int("chars", len(text)))
}

// detach takes the open agent run (if it is only, when only is set) with
// its text, session and span, stops its quiet timer and, with closing,
// lets no run open after it.
func (bw *between) detach(only *run.Run, closing bool) (*run.Run, string, string, trace.Span) {
	bw.mu.Lock()
	defer bw.mu.Unlock()
	if closing {
		bw.closed = true
	}
	if only != nil && bw.r != only {
		return nil, "", "", nil
	}
	r, text, native, span := bw.r, bw.text.String(), bw.native, bw.span
	bw.r, bw.span = nil, nil
	if bw.timer != nil {
		bw.timer.Stop()
		bw.timer = nil
	}
	return r, text, native, span
}
