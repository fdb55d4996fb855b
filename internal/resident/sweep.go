package resident

import (
	"time"

	"go.uber.org/zap"

	"github.com/residentd/residentd/internal/child"
	"github.com/residentd/residentd/internal/store"
)

// sweepGrace is how long leftover agents get between SIGTERM and SIGKILL.
// It delays startup only when an earlier daemon died with agents running.
const sweepGrace = 3 * time.Second

// sweepLeftovers stops the agent process groups an earlier daemon run on
// the same store left behind (it crashed, or was killed before it could stop
// them) and forgets every record: a leftover is stopped only when its pid
// still names the process that was recorded, so a recycled pid is never
// signalled. Then, on Linux, it stops every process still carrying a mark
// with the store's prefix: the agents whose records the crash left
// unwritten (RecordAgent waits for the next write), and their descendants.
// Last, what escaped both: whatever is in an earlier daemon's agents'
// cgroup subtree (named with the prefix), and whatever carries the
// store's rlimit mark, however it detached and whatever it cleared.
// Elsewhere other processes cannot be examined and only recorded agents
// are swept. New runs it, before anything can spawn.
func sweepLeftovers(st *store.Store, log *zap.Logger) {
	recs, err := st.Agents()
	if err != nil {
		log.Warn("startup sweep: cannot read agent records; recorded leftovers, if any, stay", zap.Error(err))
		recs = nil
	}
	left := make([]child.Leftover, len(recs))
	swept := make([]string, 0, len(recs))
	for i, r := range recs {
		left[i] = child.Leftover{Pid: r.Pid, Pgid: r.Pgid, StartTicks: r.StartTicks, StartedAt: r.StartedAt, Mark: r.Mark, Cgroup: r.Cgroup}
		if r.Mark != "" {
			swept = append(swept, r.Mark)
		}
	}
	var killed, spared int
	for i, res := range child.Sweep(left, sweepGrace) {
		r := recs[i]
		fields := []zap.Field{
			zap.Int("pid", r.Pid), zap.Int("pgid", r.Pgid), zap.String("command", r.Command),
			zap.String("key", r.Key.Channel+"/"+r.Key.Binding), zap.Time("started_at", r.StartedAt),
			zap.String("outcome", res.Outcome),
		}
		switch res.Outcome {
		case child.SweepKilled:
			killed++
			log.Info("startup sweep: stopped a leftover agent group", append(fields, zap.Int("members", res.Members), zap.Int("escaped", res.Escaped), zap.Bool("sigkill", res.Forced))...)
		case child.SweepGone:
			log.Debug("startup sweep: leftover agent already gone", fields...)
		case child.SweepReused:
			spared++
			log.Info("startup sweep: pid now belongs to another process; spared", fields...)
		default:
			spared++
			log.Warn("startup sweep: leftover agent not stopped", append(fields, zap.Error(res.Err))...)
		}
		if err := st.ForgetAgent(r.Pid); err != nil {
			log.Warn("startup sweep: forget agent record failed", zap.Int("pid", r.Pid), zap.Error(err))
		}
	}
	// A mark with the store's prefix is proof enough: only agents started
	// on this file carry one, and this daemon has started none yet.
	var unrecorded int
	for _, res := range child.SweepMarked(st.MarkPrefix(), swept, sweepGrace) {
		fields := []zap.Field{
			zap.Int("pid", res.Pid), zap.Int("pgid", res.Pgid), zap.String("mark", res.Mark),
			zap.String("cgroup", res.Cgroup), zap.String("outcome", res.Outcome),
		}
		switch res.Outcome {
		case child.SweepKilled:
			unrecorded++
			killed++
			log.Info("startup sweep: stopped an unrecorded leftover agent (found by its mark)", append(fields, zap.Int("processes", res.Escaped), zap.Bool("sigkill", res.Forced))...)
		case child.SweepGone:
			log.Debug("startup sweep: unrecorded leftover agent already gone", fields...)
		default:
			spared++
			log.Warn("startup sweep: unrecorded leftover agent not stopped", append(fields, zap.Error(res.Err))...)
		}
		if res.Err != nil && res.Outcome == child.SweepKilled {
			log.Warn("startup sweep: unrecorded leftover agent's cgroup not removed", append(fields, zap.Error(res.Err))...)
		}
	}
	// The subtrees and the rlimit mark are the store's alone too.
	strays := child.SweepStrays(st.MarkPrefix(), sweepGrace)
	if strays.Processes > 0 {
		killed++
		log.Info("startup sweep: stopped processes that had left their agents (found in an earlier daemon's agents' cgroup subtree or by their rlimit mark)",
			zap.Strings("cgroups", strays.Subtrees), zap.Int("processes", strays.Processes), zap.Int("by_rlimit_mark", strays.ByLimit), zap.Bool("sigkill", strays.Forced))
	}
	if strays.Err != nil {
		log.Warn("startup sweep: an earlier daemon's agents' cgroup subtree not removed", zap.Strings("cgroups", strays.Subtrees), zap.Error(strays.Err))
	}
	if len(recs) == 0 && unrecorded == 0 && strays.Processes == 0 {
		return
	}
	log.Info("startup sweep done", zap.Int("records", len(recs)), zap.Int("unrecorded", unrecorded), zap.Int("strays", strays.Processes), zap.Int("stopped", killed), zap.Int("spared", spared))
}
