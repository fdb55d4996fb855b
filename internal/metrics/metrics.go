// Package metrics owns residentd's Prometheus registry: every series the daemon exports and the one-line helpers its call sites use.
package metrics

import (
	"fmt"
	"net/http"
	"runtime"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/residentd/residentd/internal/acp"
	"github.com/residentd/residentd/internal/child"
	"github.com/residentd/residentd/internal/delivery"
	"github.com/residentd/residentd/internal/lease"
	"github.com/residentd/residentd/internal/pool"
	"github.com/residentd/residentd/internal/residency"
)

// Known label values. They are initialised to zero in New so every series
// exists from the first scrape, which keeps rate() and absent() honest. The
// packages that produce a label's values own its list.
var (
	// Shapes are the lease shapes, plus lease.Unstarted for turns that
	// never got a process.
	Shapes          = append(labels(lease.Shapes), lease.Unstarted)
	Outcomes        = labels(lease.Outcomes)
	EvictReasons    = labels(pool.Reasons)
	ExitKinds       = child.ExitKinds
	ReadyMethods    = []string{"new", "resume", "load", "fork"}
	RestoreMethods  = []string{"resume", "load"}
	RestoreResults  = []string{"ok", "failed", "timeout", "unknown"}
	LineFates       = []string{"sent", "seen", "bound", "own", "known"}
	TokenKinds      = []string{"input", "output", "cache_read", "cache_write", "thought"}
	BriefPlacements = labels(delivery.Placements)
	IngestResults   = []string{"added", "edited", "duplicate", "rejected", "deleted"}
	UsageKinds      = []string{"reported", "unknown"}
	GapBuckets      = []string{"first", "under_5m", "5m_to_60m", "over_60m"}
	BudgetScopes    = []string{"binding", "channel"}
	BudgetLevels    = []string{"warning", "exceeded"}
	ReloadResults   = []string{"applied", "refused"}
	ReloadActions   = []string{"applied_next_turn", "replace_process", "new_session", "removed", "added"}
)

// labels formats a producer's values as label values (String for a Shape).
func labels[T any](vs []T) []string {
	out := make([]string, len(vs))
	for i, v := range vs {
		out[i] = fmt.Sprint(v)
	}
	return out
}

// Gauges is what the pool reports about itself; it is read at scrape time so
// the exported values can never drift from the pool's own bookkeeping.
type Gauges interface {
	Live() int
	Busy() int
	Queued() int
}

// BudgetState is one configured daily budget at scrape time.
type BudgetState struct {
	Scope, ID    string
	Spent, Limit float64
}

// Budgets reports the configured budgets, read at scrape time.
type Budgets interface {
	BudgetStates() []BudgetState
}

// StoreStats is what the store reports about its writes, read at scrape
// time like Gauges.
type StoreStats interface {
	Commits() int64 // write transactions committed
	Writes() int64  // writes they carried
	NoSpace() int64 // writes the state file's filesystem refused for lack of space
	DiskFull() bool // the last write was refused so: none was stored since
}

// AgentMemory reports the memory of the live agents' process trees by
// binding, read at scrape time.
type AgentMemory interface {
	AgentMemory() map[string]int64
}

// Metrics holds every residentd series on a registry of its own (never the
// global default, so tests and embedders get no cross-talk).
type Metrics struct {
	Registry *prometheus.Registry

	Turns             *prometheus.CounterVec   // shape, outcome
	TurnDuration      *prometheus.HistogramVec // shape
	TurnFirstUpdate   *prometheus.HistogramVec // shape
	QueueWait         prometheus.Histogram
	Evictions         *prometheus.CounterVec // reason
	AgentSpawn        prometheus.Histogram
	SessionReady      *prometheus.HistogramVec // method
	AgentExits        *prometheus.CounterVec   // kind
	SessionRestores   *prometheus.CounterVec   // method, result
	RestoreStopped    *prometheus.GaugeVec     // binding
	UsageTurns        *prometheus.CounterVec   // binding, shape, usage
	UsageCost         *prometheus.CounterVec   // binding, shape
	IdleGap           *prometheus.HistogramVec // binding
	CostByGap         *prometheus.CounterVec   // binding, gap
	WatermarkCommits  prometheus.Counter
	WatermarkDiscards prometheus.Counter
	ChannelLines      *prometheus.CounterVec // fate
	ChannelChars      prometheus.Counter
	ChannelTruncated  prometheus.Counter
	AgentTokens       *prometheus.CounterVec // binding, shape, kind
	BriefTokensSent   *prometheus.CounterVec // placement
	FramingChanges    *prometheus.CounterVec // binding
	MessagesIngested  *prometheus.CounterVec // result
	BuildInfo         *prometheus.GaugeVec   // version, goversion
	OptionsSet        *prometheus.CounterVec // binding
	ToolCalls         *prometheus.CounterVec // binding, kind, outcome
	PolicyModesSet    *prometheus.CounterVec // binding
	Compactions       *prometheus.CounterVec // binding
	// ResidencyDecisions counts what the residency policy and the daemon's
	// cache rules decided: binding, policy, decision (evict, expire,
	// memory, compact, keep_alive, ttl_5m, ttl_1h), reason.
	ResidencyDecisions *prometheus.CounterVec
	Notices            *prometheus.CounterVec // binding, severity
	AgentRuns          prometheus.Counter
	StrayUpdates       *prometheus.CounterVec // binding
	SpareProcesses     *prometheus.GaugeVec   // binding
	SpareEvents        *prometheus.CounterVec // binding, event
	StartTimeouts      *prometheus.CounterVec // binding, try
	BudgetCrossings    *prometheus.CounterVec // scope, level
	BudgetRefusals     *prometheus.CounterVec // scope
	ConfigReloads      *prometheus.CounterVec // result
	ReloadBindings     *prometheus.CounterVec // action
	ReloadOK           prometheus.Gauge

	gauges *gaugeCollector
}

// SetGauges makes scrapes read the live, busy and queued counts from g.
func (m *Metrics) SetGauges(g Gauges) { m.gauges.set(g) }

// SetBudgets makes scrapes read the configured budgets from b.
func (m *Metrics) SetBudgets(b Budgets) {
	m.gauges.mu.Lock()
	m.gauges.budgets = b
	m.gauges.mu.Unlock()
}

// SetAgentMemory makes scrapes read the agents' memory by binding from a.
func (m *Metrics) SetAgentMemory(a AgentMemory) {
	m.gauges.mu.Lock()
	m.gauges.mem = a
	m.gauges.mu.Unlock()
}

// SetStore makes scrapes read the store's commit and write counts, and its
// full disk, from s.
func (m *Metrics) SetStore(s StoreStats) {
	m.gauges.mu.Lock()
	m.gauges.st = s
	m.gauges.mu.Unlock()
}

// Buckets sized for agent turns, which run from sub-second to many minutes.
var (
	turnBuckets  = []float64{0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 30, 60, 120, 300, 600, 1200}
	firstBuckets = []float64{0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 30, 60, 120}
	waitBuckets  = []float64{0.001, 0.01, 0.05, 0.1, 0.5, 1, 5, 10, 30, 60, 120, 300, 600}
	spawnBuckets = []float64{0.05, 0.1, 0.25, 0.5, 1, 2, 3, 5, 10, 20, 30, 60}
)

// New builds the registry, registers every residentd series plus the Go and
// process collectors, and sets residentd_build_info{version,goversion} to 1.
// g may be nil (the three pool gauges then read 0) and set later with
// SetGauges, since the pool that owns them is usually built after metrics.
func New(version string, g Gauges) *Metrics {
	r := prometheus.NewRegistry()
	m := &Metrics{Registry: r, gauges: newGaugeCollector(g)}
	reg := registerer{r}

	m.Turns = reg.counterVec("residentd_turns_total", "Turns finished, by lease shape and outcome.", "shape", "outcome")
	m.TurnDuration = reg.histogramVec("residentd_turn_duration_seconds", "Wall time of a turn from lease to result, by lease shape.", turnBuckets, "shape")
	m.TurnFirstUpdate = reg.histogramVec("residentd_turn_first_update_seconds", "Time from prompt sent to the agent's first streamed update, by lease shape.", firstBuckets, "shape")
	m.QueueWait = reg.histogram("residentd_queue_wait_seconds", "Time a turn waited in the pool queue before it got a process.", waitBuckets)
	m.Evictions = reg.counterVec("residentd_evictions_total", "Agent processes removed from the pool, by reason.", "reason")
	m.AgentSpawn = reg.histogram("residentd_agent_spawn_seconds", "Time to spawn an agent process and complete ACP initialize.", spawnBuckets)
	m.SessionReady = reg.histogramVec("residentd_session_ready_seconds", "Time for session/new or session/load to return, by method.", spawnBuckets, "method")
	m.AgentExits = reg.counterVec("residentd_agent_exits_total", "Agent processes reaped, by how they exited.", "kind")
	m.SessionRestores = reg.counterVec("residentd_session_restores_total", "Attempts to reopen a saved native session in a new process, by method (resume, then load) and result (ok, failed, unknown: the agent does not know the session, or timeout: no sign of progress for restore_timeout, and the process was stopped).", "method", "result")
	m.RestoreStopped = reg.gaugeVec("residentd_restore_stopped", "1 for a binding whose session restores failed restore_failures times in a row: the daemon no longer tries them and starts its processes cold.", "binding")
	m.UsageTurns = reg.counterVec("residentd_usage_turns_total", "Turns that reached the agent, by binding, lease shape and whether the agent reported its usage (reported) or nothing (unknown).", "binding", "shape", "usage")
	m.UsageCost = reg.counterVec("residentd_usage_cost_total", "What turns cost, in the agent's or the price table's currency, by binding and shape.", "binding", "shape")
	m.IdleGap = reg.histogramVec("residentd_turn_idle_gap_seconds", "Time since the key's previous turn ended, by binding: what the provider's prompt cache (5 min, 1 h) had to outlive.", []float64{60, 300, 900, 1800, 3600, 7200, 21600}, "binding")
	m.CostByGap = reg.counterVec("residentd_usage_cost_by_gap_total", "Turn cost by binding and the key's idle gap before the turn: first (no earlier turn this run), under_5m, 5m_to_60m, over_60m.", "binding", "gap")
	m.WatermarkCommits = reg.counter("residentd_watermark_commits_total", "Staged watermarks committed after a successful run.")
	m.WatermarkDiscards = reg.counter("residentd_watermark_discards_total", "Staged watermarks discarded because the run did not succeed.")
	m.ChannelLines = reg.counterVec("residentd_channel_lines_total", "Channel messages considered for a turn's context block, by fate: sent, seen (the session saw it before), bound (left out by the line limit and counted in the block's pointer), own (the agent's own post), known (the prompt carries it: the mention, a replayed mention).", "fate")
	m.ChannelChars = reg.counter("residentd_channel_characters_sent_total", "Characters of channel context sent to agents.")
	m.ChannelTruncated = reg.counter("residentd_channel_lines_truncated_total", "Channel lines cut with a truncation marker.")
	m.AgentTokens = reg.counterVec("residentd_agent_tokens_total", "Tokens the agents reported per turn (deltas for agents that report running totals), by binding, lease shape and kind (input, output, cache_read, cache_write, and thought: reasoning tokens where the agent counts them apart, of output where it counts them there); cache-read share = cache_read / (input + cache_read + cache_write).", "binding", "shape", "kind")
	m.BriefTokensSent = reg.counterVec("residentd_brief_tokens_sent_total", "Approximate brief tokens sent, by placement (in the user turn or in the system framing).", "placement")
	m.FramingChanges = reg.counterVec("residentd_framing_changes_total", "Times a binding's system framing changed, which forfeits the provider's prompt cache.", "binding")
	m.MessagesIngested = reg.counterVec("residentd_messages_ingested_total", "Channel messages posted to the daemon, by result.", "result")
	m.OptionsSet = reg.counterVec("residentd_session_options_set_total", "Session config options set on agents (session/set_config_option) when a session starts or the key's options change, by binding.", "binding")
	m.ToolCalls = reg.counterVec("residentd_agent_tool_calls_total", "Tool calls agents reported (session/update tool_call) or asked about, by binding, ACP kind and outcome: ran, failed or refused_by_agent (no permission request: by the last status the agent reported; refused_by_agent when the tool was not available to it), allowed_by_policy or refused_by_policy (asked; the binding's policy answered), asked_allowed or asked_rejected (asked a person; rejected also by the timeout, the pending limit or a cancel), unfinished (no final status nor answer by the turn's end).", "binding", "kind", "outcome")
	m.PolicyModesSet = reg.counterVec("residentd_policy_modes_set_total", "Session modes set on agents (session/set_mode) to carry a binding's permission policy, by binding.", "binding")
	m.Compactions = reg.counterVec("residentd_agent_compactions_total", "Turns during which the agent compacted its history (its context in use went down), by binding; the next warm turn carries the full brief again.", "binding")
	m.ResidencyDecisions = reg.counterVec("residentd_residency_decisions_total", "Residency decisions, by binding, policy (timer, cache, …; rule for the daemon's own rules), decision (evict: the victim when a new key needed a slot; expire: the idle reaper's stop; memory: a stop for max_memory or memory_pressure, spares first with reason spares first; compact: an idle compaction the daemon sent; keep_alive: a cache keep-alive it sent; ttl_5m, ttl_1h: the cache TTL a spawn of a cache_ttl auto binding asked for) and the reason's fixed phrase (the words before its figures; the log line has them all).", "binding", "policy", "decision", "reason")
	m.Notices = reg.counterVec("residentd_agent_notices_total", "Notices agents sent (ACP notice session updates), by binding and severity.", "binding", "severity")
	m.AgentRuns = reg.counter("residentd_agent_runs_total", "Agent runs: output of an agent with no prompt in flight (a turn it started, background work ending), gathered into a run of kind agent.")
	m.StrayUpdates = reg.counterVec("residentd_agent_stray_updates_total", "Session updates for a session id the agent never opened, which no run can carry (each also logged with the id), by binding.", "binding")
	m.SpareProcesses = reg.gaugeVec("residentd_spare_processes", "Spare agent processes spawned and initialized ahead, with no key yet, by binding.", "binding")
	m.SpareEvents = reg.counterVec("residentd_spare_events_total", "Spare agent processes by what happened to them: started, failed (to start), taken (by a cold or restored turn), exited (by itself, before a turn took it), stopped (idle, capacity, shutdown); and the sessions spares open ahead: session_opened, session_used (a cold turn started on it), session_dropped (a restored or forked turn took the spare; the session is closed); by binding.", "binding", "event")
	m.StartTimeouts = reg.counterVec("residentd_agent_start_timeouts_total", "Agent starts that ran past their binding's start_timeout, by binding and try: first (tried again at once with twice the limit) or second (the start failed and counts in the crash loop).", "binding", "try")
	m.BudgetCrossings = reg.counterVec("residentd_budget_crossings_total", "Turns whose cost took a daily budget to its warning share (warning) or past its limit (exceeded), by scope.", "scope", "level")
	m.BudgetRefusals = reg.counterVec("residentd_budget_refusals_total", "Turns refused with budget_exceeded, by the scope of the spent budget.", "scope")
	m.ConfigReloads = reg.counterVec("residentd_config_reloads_total", "Config reloads (SIGHUP, residentd reload, POST /v1/config/reload): applied, or refused (the file did not load or validate; the config in force stayed).", "result")
	m.ReloadBindings = reg.counterVec("residentd_config_reload_bindings_total", "Bindings an applied config reload changed, by what it did to each: applied_next_turn, replace_process, new_session, removed, added.", "action")
	m.ReloadOK = reg.gauge("residentd_config_last_reload_successful", "1 when the last config reload was applied (or none was tried), 0 when it was refused.")
	m.BuildInfo = reg.gaugeVec("residentd_build_info", "Always 1; labels carry the residentd version and the Go version it was built with.", "version", "goversion")

	r.MustRegister(
		m.gauges,
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	)

	m.BuildInfo.WithLabelValues(version, runtime.Version()).Set(1)
	for _, s := range Shapes {
		for _, o := range Outcomes {
			m.Turns.WithLabelValues(s, o)
		}
		m.TurnDuration.WithLabelValues(s)
		m.TurnFirstUpdate.WithLabelValues(s)
	}
	initVec(m.Evictions, EvictReasons)
	initVec(m.AgentExits, ExitKinds)
	for _, meth := range RestoreMethods {
		for _, r := range RestoreResults {
			m.SessionRestores.WithLabelValues(meth, r)
		}
	}
	initVec(m.ChannelLines, LineFates)
	initVec(m.BriefTokensSent, BriefPlacements)
	initVec(m.MessagesIngested, IngestResults)
	initVec(m.BudgetRefusals, BudgetScopes)
	initVec(m.ConfigReloads, ReloadResults)
	initVec(m.ReloadBindings, ReloadActions)
	m.ReloadOK.Set(1)
	for _, sc := range BudgetScopes {
		for _, l := range BudgetLevels {
			m.BudgetCrossings.WithLabelValues(sc, l)
		}
	}
	for _, meth := range ReadyMethods {
		m.SessionReady.WithLabelValues(meth)
	}
	return m
}

// registerer makes New's series, each registered on r as it is made.
type registerer struct{ r *prometheus.Registry }

func register[C prometheus.Collector](r *prometheus.Registry, c C) C {
	r.MustRegister(c)
	return c
}

func (g registerer) counter(name, help string) prometheus.Counter {
	return register(g.r, prometheus.NewCounter(prometheus.CounterOpts{Name: name, Help: help}))
}

func (g registerer) counterVec(name, help string, labels ...string) *prometheus.CounterVec {
	return register(g.r, prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, labels))
}

func (g registerer) gauge(name, help string) prometheus.Gauge {
	return register(g.r, prometheus.NewGauge(prometheus.GaugeOpts{Name: name, Help: help}))
}

func (g registerer) gaugeVec(name, help string, labels ...string) *prometheus.GaugeVec {
	return register(g.r, prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: name, Help: help}, labels))
}

func (g registerer) histogram(name, help string, buckets []float64) prometheus.Histogram {
	return register(g.r, prometheus.NewHistogram(prometheus.HistogramOpts{Name: name, Help: help, Buckets: buckets}))
}

func (g registerer) histogramVec(name, help string, buckets []float64, labels ...string) *prometheus.HistogramVec {
	return register(g.r, prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: name, Help: help, Buckets: buckets}, labels))
}

func initVec(v *prometheus.CounterVec, values []string) {
	for _, x := range values {
		v.WithLabelValues(x)
	}
}

// SpareEventKinds are the events residentd_spare_events_total counts.
var SpareEventKinds = []string{"started", "failed", "taken", "exited", "stopped", "session_opened", "session_used", "session_dropped"}

// InitBindings creates the framing-change series for each configured binding
// so they read 0 before the first change. Binding ids come from config, which
// keeps the label's cardinality bounded.
func (m *Metrics) InitBindings(ids []string) {
	initVec(m.FramingChanges, ids)
	initVec(m.OptionsSet, ids)
	initVec(m.PolicyModesSet, ids)
	for _, id := range ids {
		for _, k := range ToolKinds {
			for _, o := range ToolOutcomes {
				m.ToolCalls.WithLabelValues(id, k, o)
			}
		}
	}
	initVec(m.Compactions, ids)
	initVec(m.StrayUpdates, ids)
	for _, id := range ids {
		m.SpareProcesses.WithLabelValues(id)
		for _, e := range SpareEventKinds {
			m.SpareEvents.WithLabelValues(id, e)
		}
		m.StartTimeouts.WithLabelValues(id, "first")
		m.StartTimeouts.WithLabelValues(id, "second")
	}
	for _, id := range ids {
		m.RestoreStopped.WithLabelValues(id)
		m.IdleGap.WithLabelValues(id)
		for _, g := range GapBuckets {
			m.CostByGap.WithLabelValues(id, g)
		}
		for _, sh := range labels(lease.Shapes) {
			m.UsageCost.WithLabelValues(id, sh)
			for _, u := range UsageKinds {
				m.UsageTurns.WithLabelValues(id, sh, u)
			}
			for _, k := range TokenKinds {
				m.AgentTokens.WithLabelValues(id, sh, k)
			}
		}
	}
}

// Handler serves this registry (and only it) in the Prometheus exposition format.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.Registry, promhttp.HandlerOpts{Registry: m.Registry})
}

// ObserveTurn counts a finished turn and records its duration. Rejected and
// refused turns never ran, so their duration is not observed.
func (m *Metrics) ObserveTurn(shape string, outcome lease.Outcome, d time.Duration) {
	m.Turns.WithLabelValues(shape, string(outcome)).Inc()
	if outcome != lease.OutcomeRejected && outcome != lease.OutcomeRefused {
		m.TurnDuration.WithLabelValues(shape).Observe(d.Seconds())
	}
}

// ObserveFirstUpdate records the latency to a turn's first streamed update.
func (m *Metrics) ObserveFirstUpdate(shape string, d time.Duration) {
	m.TurnFirstUpdate.WithLabelValues(shape).Observe(d.Seconds())
}

// ObserveQueueWait records how long a turn waited for a process.
func (m *Metrics) ObserveQueueWait(d time.Duration) { m.QueueWait.Observe(d.Seconds()) }

// Evicted counts one process leaving the pool for reason.
func (m *Metrics) Evicted(reason string) { m.Evictions.WithLabelValues(reason).Inc() }

// AgentExited counts one reaped agent process by exit kind (clean, signal, error, oom).
func (m *Metrics) AgentExited(kind string) { m.AgentExits.WithLabelValues(kind).Inc() }

// ObserveSpawn records spawn + initialize time.
func (m *Metrics) ObserveSpawn(d time.Duration) { m.AgentSpawn.Observe(d.Seconds()) }

// ObserveSessionReady records session/new or session/load latency.
func (m *Metrics) ObserveSessionReady(method string, d time.Duration) {
	m.SessionReady.WithLabelValues(method).Observe(d.Seconds())
}

// RestoreTimedOut counts a restore by method that did not answer within
// restore_timeout.
func (m *Metrics) RestoreTimedOut(method string) {
	m.SessionRestores.WithLabelValues(method, "timeout").Inc()
}

// Restore counts one attempt to reload a saved session.
// Restore counts one attempt to reopen a saved session by method.
func (m *Metrics) Restore(method string, ok bool) {
	r := "failed"
	if ok {
		r = "ok"
	}
	m.SessionRestores.WithLabelValues(method, r).Inc()
}

// TurnCost is what one successful turn used, for TurnUsage.
type TurnCost struct {
	Binding, Shape                       string
	Known                                bool // the agent reported tokens or cost
	Input, Output, CacheRead, CacheWrite int64
	Thought                              int64 // reasoning tokens the agent counts apart
	Cost                                 float64
	Gap                                  time.Duration
	HasGap                               bool // false for the key's first turn this run
}

// GapBucket names the idle-gap bucket of a turn.
func GapBucket(gap time.Duration, has bool) string {
	switch {
	case !has:
		return "first"
	case gap < 5*time.Minute:
		return "under_5m"
	case gap <= time.Hour:
		return "5m_to_60m"
	}
	return "over_60m"
}

// TurnUsage counts one successful turn's usage, cost and idle gap.
func (m *Metrics) TurnUsage(c TurnCost) {
	if !c.Known {
		m.UsageTurns.WithLabelValues(c.Binding, c.Shape, "unknown").Inc()
	} else {
		m.UsageTurns.WithLabelValues(c.Binding, c.Shape, "reported").Inc()
		add64(m.AgentTokens.WithLabelValues(c.Binding, c.Shape, "input"), c.Input)
		add64(m.AgentTokens.WithLabelValues(c.Binding, c.Shape, "output"), c.Output)
		add64(m.AgentTokens.WithLabelValues(c.Binding, c.Shape, "cache_read"), c.CacheRead)
		add64(m.AgentTokens.WithLabelValues(c.Binding, c.Shape, "cache_write"), c.CacheWrite)
		add64(m.AgentTokens.WithLabelValues(c.Binding, c.Shape, "thought"), c.Thought)
		if c.Cost > 0 {
			m.UsageCost.WithLabelValues(c.Binding, c.Shape).Add(c.Cost)
		}
	}
	if c.HasGap {
		m.IdleGap.WithLabelValues(c.Binding).Observe(c.Gap.Seconds())
	}
	if c.Cost > 0 {
		m.CostByGap.WithLabelValues(c.Binding, GapBucket(c.Gap, c.HasGap)).Add(c.Cost)
	}
}

// Watermark counts a staged watermark being committed or discarded.
func (m *Metrics) Watermark(committed bool) {
	if committed {
		m.WatermarkCommits.Inc()
		return
	}
	m.WatermarkDiscards.Inc()
}

// ChannelRender records what one render of channel context did with its lines.
func (m *Metrics) ChannelRender(sent, seen, bound, own, known, chars, truncated int) {
	addN(m.ChannelLines.WithLabelValues("known"), known)
	addN(m.ChannelLines.WithLabelValues("sent"), sent)
	addN(m.ChannelLines.WithLabelValues("seen"), seen)
	addN(m.ChannelLines.WithLabelValues("bound"), bound)
	addN(m.ChannelLines.WithLabelValues("own"), own)
	addN(m.ChannelChars, chars)
	addN(m.ChannelTruncated, truncated)
}

// FramingChanged counts a change of binding's system framing.
func (m *Metrics) FramingChanged(binding string) { m.FramingChanges.WithLabelValues(binding).Inc() }

// BriefTokens adds n approximate brief tokens sent at placement (turn or framing).
func (m *Metrics) BriefTokens(placement delivery.Placement, n int) {
	addN(m.BriefTokensSent.WithLabelValues(string(placement)), n)
}

// Ingested records the outcome of one ingest call.
func (m *Metrics) Ingested(added, edited, dup, rejected int) {
	addN(m.MessagesIngested.WithLabelValues("added"), added)
	addN(m.MessagesIngested.WithLabelValues("edited"), edited)
	addN(m.MessagesIngested.WithLabelValues("duplicate"), dup)
	addN(m.MessagesIngested.WithLabelValues("rejected"), rejected)
}

// ToolKinds are ACP's tool kinds, the kind label of
// residentd_agent_tool_calls_total (an agent's own kind counts as other).
var ToolKinds = []string{"read", "edit", "delete", "move", "search", "execute", "think", "fetch", "switch_mode", "other"}

// ToolOutcomes are what became of a tool call (acp.ToolCallSeen.Outcome),
// the outcome label of residentd_agent_tool_calls_total.
var ToolOutcomes = acp.ToolOutcomes

// ToolCall counts one tool call an agent of binding reported, of ACP kind
// kind, by its outcome.
func (m *Metrics) ToolCall(binding, kind, outcome string) {
	if !slices.Contains(ToolKinds, kind) {
		kind = "other"
	}
	if !slices.Contains(ToolOutcomes, outcome) {
		outcome = acp.ToolUnfinished
	}
	m.ToolCalls.WithLabelValues(binding, kind, outcome).Inc()
}

// PolicyModeSet counts one session mode set to carry binding's policy.
func (m *Metrics) PolicyModeSet(binding string) { m.PolicyModesSet.WithLabelValues(binding).Inc() }

// OptionSet counts one session option set on an agent of binding.
func (m *Metrics) OptionSet(binding string) { m.OptionsSet.WithLabelValues(binding).Inc() }

// Reloaded counts a config reload: applied with what it did to each
// binding (by action; unchanged ones are not counted), or refused (nil).
func (m *Metrics) Reloaded(applied bool, actions []string) {
	if !applied {
		m.ConfigReloads.WithLabelValues("refused").Inc()
		m.ReloadOK.Set(0)
		return
	}
	m.ConfigReloads.WithLabelValues("applied").Inc()
	m.ReloadOK.Set(1)
	for _, a := range actions {
		if a != "unchanged" {
			m.ReloadBindings.WithLabelValues(a).Inc()
		}
	}
}

// Compacted counts a turn during which binding's agent compacted its history.
func (m *Metrics) Compacted(binding string) { m.Compactions.WithLabelValues(binding).Inc() }

// AgentRun counts an agent run.
func (m *Metrics) AgentRun() { m.AgentRuns.Inc() }

// Stray counts n updates for a session binding's agent never opened.
func (m *Metrics) Stray(binding string, n int) {
	m.StrayUpdates.WithLabelValues(binding).Add(float64(n))
}

// Notice counts a notice binding's agent sent.
func (m *Metrics) Notice(binding, severity string) {
	m.Notices.WithLabelValues(binding, severity).Inc()
}

// BudgetCrossed counts a turn that took a budget of scope to level.
func (m *Metrics) BudgetCrossed(scope, level string) {
	m.BudgetCrossings.WithLabelValues(scope, level).Inc()
}

// BudgetRefused counts a turn refused because a budget of scope is spent.
func (m *Metrics) BudgetRefused(scope string) { m.BudgetRefusals.WithLabelValues(scope).Inc() }

// Deleted counts one message deleted by the desktop app.
func (m *Metrics) Deleted() { m.MessagesIngested.WithLabelValues("deleted").Inc() }

// addN ignores non-positive n: counters panic on negative adds, and a caller's
// arithmetic slip must not take the daemon down.
func addN(c prometheus.Counter, n int) {
	if n > 0 {
		c.Add(float64(n))
	}
}

func add64(c prometheus.Counter, n int64) {
	if n > 0 {
		c.Add(float64(n))
	}
}

// gaugeCollector reads the pool's live numbers and the store's counts at
// scrape time.
type gaugeCollector struct {
	live, busy, queued *prometheus.Desc
	commits, writes    *prometheus.Desc
	noSpace, diskFull  *prometheus.Desc
	spent, limit       *prometheus.Desc
	memory             *prometheus.Desc

	mu      sync.Mutex // guards g, st, budgets and mem
	g       Gauges
	st      StoreStats
	budgets Budgets
	mem     AgentMemory
}

func (c *gaugeCollector) set(g Gauges) {
	c.mu.Lock()
	c.g = g
	c.mu.Unlock()
}

func newGaugeCollector(g Gauges) *gaugeCollector {
	return &gaugeCollector{
		g:      g,
		live:   prometheus.NewDesc("residentd_agents_live", "Agent processes currently alive in the pool.", nil, nil),
		busy:   prometheus.NewDesc("residentd_agents_busy", "Agent processes currently running a turn.", nil, nil),
		queued: prometheus.NewDesc("residentd_turns_queued", "Turns waiting in the pool queue for a process.", nil, nil),
		commits: prometheus.NewDesc("residentd_store_commits_total",
			"bbolt write transactions committed (two fsyncs each): one per warm turn, at most two per cold turn, fewer than turns when concurrent turns share a group commit.", nil, nil),
		writes: prometheus.NewDesc("residentd_store_writes_total",
			"Writes the committed transactions carried; writes over commits is how many callers shared each fsync pair.", nil, nil),
		noSpace: prometheus.NewDesc("residentd_store_no_space_total",
			"Writes the filesystem holding the state file refused for lack of space or quota (storage_full): nothing of them was stored.", nil, nil),
		diskFull: prometheus.NewDesc("residentd_store_disk_full",
			"1 while the filesystem holding the state file refuses its writes for lack of space or quota: from a refused write until a write is stored again.", nil, nil),
		spent: prometheus.NewDesc("residentd_budget_spent",
			"What the current budget day has cost so far, per configured daily budget (scope binding or channel), in the budgets' currency.", []string{"scope", "id"}, nil),
		limit: prometheus.NewDesc("residentd_budget_limit",
			"The daily limit of each configured budget, in the budgets' currency.", []string{"scope", "id"}, nil),
		memory: prometheus.NewDesc("residentd_agent_memory_bytes",
			"Memory of the live agents (sessions and spares) by binding, each agent's whole process tree: its cgroup's memory.current, else the resident sets of every process of its tree summed.", []string{"binding"}, nil),
	}
}

func (c *gaugeCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.live
	ch <- c.busy
	ch <- c.queued
	ch <- c.commits
	ch <- c.writes
	ch <- c.noSpace
	ch <- c.diskFull
	ch <- c.spent
	ch <- c.limit
	ch <- c.memory
}

func (c *gaugeCollector) Collect(ch chan<- prometheus.Metric) {
	var live, busy, queued int
	var commits, writes, noSpace int64
	var full float64
	c.mu.Lock()
	g, st, bs, mem := c.g, c.st, c.budgets, c.mem
	c.mu.Unlock()
	if mem != nil {
		for b, n := range mem.AgentMemory() {
			ch <- prometheus.MustNewConstMetric(c.memory, prometheus.GaugeValue, float64(n), b)
		}
	}
	if bs != nil {
		for _, b := range bs.BudgetStates() {
			ch <- prometheus.MustNewConstMetric(c.spent, prometheus.GaugeValue, b.Spent, b.Scope, b.ID)
			ch <- prometheus.MustNewConstMetric(c.limit, prometheus.GaugeValue, b.Limit, b.Scope, b.ID)
		}
	}
	if g != nil {
		live, busy, queued = g.Live(), g.Busy(), g.Queued()
	}
	if st != nil {
		commits, writes, noSpace = st.Commits(), st.Writes(), st.NoSpace()
		if st.DiskFull() {
			full = 1
		}
	}
	ch <- prometheus.MustNewConstMetric(c.live, prometheus.GaugeValue, float64(live))
	ch <- prometheus.MustNewConstMetric(c.busy, prometheus.GaugeValue, float64(busy))
	ch <- prometheus.MustNewConstMetric(c.queued, prometheus.GaugeValue, float64(queued))
	ch <- prometheus.MustNewConstMetric(c.commits, prometheus.CounterValue, float64(commits))
	ch <- prometheus.MustNewConstMetric(c.writes, prometheus.CounterValue, float64(writes))
	ch <- prometheus.MustNewConstMetric(c.noSpace, prometheus.CounterValue, float64(noSpace))
	ch <- prometheus.MustNewConstMetric(c.diskFull, prometheus.GaugeValue, full)
}

// ResidencyDecided counts one residency decision of policy on a process
// of binding: what it decided and why. The reason's label is its fixed
// phrase (residency.ReasonLabel), so its figures make no new series.
func (m *Metrics) ResidencyDecided(binding, policy, decision, reason string) {
	m.ResidencyDecisions.WithLabelValues(binding, policy, decision, residency.ReasonLabel(reason)).Inc()
}
