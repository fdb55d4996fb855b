package store

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/residentd/residentd/internal/child"
	"github.com/residentd/residentd/internal/session"
)

// AgentRecord is an agent process this daemon started, kept so a restarted
// daemon can find and sweep leftovers. StartTicks (the process start time
// from /proc/<pid>/stat) tells a leftover from a recycled pid.
type AgentRecord struct {
	Pid        int         `json:"pid"`
	Pgid       int         `json:"pgid"`
	StartTicks uint64      `json:"start_ticks"`
	Command    string      `json:"command"`
	Key        session.Key `json:"key"`
	StartedAt  time.Time   `json:"started_at"`
	// Mark and Cgroup find the descendants that left the agent's group.
	Mark   string `json:"mark,omitempty"`
	Cgroup string `json:"cgroup,omitempty"`
}

func pidKey(pid int) []byte { return u64(uint64(pid)) }

// agentOp is a change to an agent record waiting for the next write
// transaction: a put (rec set) or a forget (rec nil). gen orders the
// changes of one pid, so a transaction clears only what it wrote.
type agentOp struct {
	gen uint64
	rec []byte // the record's JSON; nil forgets the pid
}

// RecordAgent saves r under its pid, replacing any record of that pid
// (and any pending ForgetAgent of it: a process that had the pid before).
// Like ForgetAgent it commits nothing itself: the record goes in the next
// write transaction (the turn's commit, usually) or when the store closes,
// so starting an agent costs no fsync pair of its own. Agents lists it at
// once. A daemon killed before the next write leaves no record; the
// startup sweep finds such an agent by its mark (see MarkPrefix).
func (s *Store) RecordAgent(r AgentRecord) error {
	if r.Pid <= 0 {
		return fmt.Errorf("store: record agent: pid must be positive, got %d", r.Pid)
	}
	v, err := json.Marshal(r)
	if err != nil {
		return fmt.Errorf("store: record agent pid %d: %w", r.Pid, err)
	}
	s.pendAgent(r.Pid, v)
	return nil
}

// ForgetAgent drops the record of pid; a missing one is not an error. It
// commits nothing itself: the record goes in the next write transaction
// (a turn's commit, usually), or when the store closes, so an agent's exit
// costs no fsync pair of its own. Agents no longer lists it meanwhile; a
// daemon killed before the next write leaves the record, which the startup
// sweep tells from a live agent by its start time. A record still pending
// is simply never written.
func (s *Store) ForgetAgent(pid int) error {
	if pid <= 0 {
		return nil
	}
	s.pendAgent(pid, nil)
	return nil
}

// pendAgent makes rec (nil: none) pid's pending change, replacing any
// earlier one: the last change of a pid is the one written.
func (s *Store) pendAgent(pid int, rec []byte) {
	s.fmu.Lock()
	defer s.fmu.Unlock()
	if s.agentOps == nil {
		s.agentOps = make(map[int]agentOp)
	}
	s.agentN++
	s.agentOps[pid] = agentOp{gen: s.agentN, rec: rec}
}

// applyAgents writes the pending agent records in tx, and drops the
// forgotten ones, and returns what it applied, to be cleared from the
// pending set once tx commits. It runs inside every write transaction
// (commitGroup), under fmu: a change made meanwhile waits for the next.
func (s *Store) applyAgents(tx *bolt.Tx) (map[int]uint64, error) {
	s.fmu.Lock()
	defer s.fmu.Unlock()
	if len(s.agentOps) == 0 {
		return nil, nil
	}
	b := tx.Bucket(bucketAgents)
	out := make(map[int]uint64, len(s.agentOps))
	for pid, op := range s.agentOps {
		if op.rec == nil {
			// A forget of a record never written deletes nothing.
			if err := b.Delete(pidKey(pid)); err != nil {
				return nil, fmt.Errorf("store: forget agent pid %d: %w", pid, err)
			}
		} else if err := b.Put(pidKey(pid), op.rec); err != nil {
			return nil, fmt.Errorf("store: record agent pid %d: %w", pid, err)
		}
		out[pid] = op.gen
	}
	return out, nil
}

// agentsWritten clears what a committed transaction applied, unless the
// pid changed again since (a later process with the same pid, or the
// recorded one's exit).
func (s *Store) agentsWritten(done map[int]uint64) {
	if len(done) == 0 {
		return
	}
	s.fmu.Lock()
	defer s.fmu.Unlock()
	for pid, gen := range done {
		if s.agentOps[pid].gen == gen {
			delete(s.agentOps, pid)
		}
	}
}

// agentsPending says whether agent records wait for the next write:
// recorded or forgotten ones, or agents seen (SetAgentSeen).
func (s *Store) agentsPending() bool {
	s.fmu.Lock()
	defer s.fmu.Unlock()
	return len(s.agentOps) > 0 || len(s.seen) > 0
}

// Agents lists the agent processes by pid: the records in the file, as
// the pending changes leave them (recorded ones added, forgotten ones left
// out).
func (s *Store) Agents() ([]AgentRecord, error) {
	// The pending changes are taken before the file is read: a change
	// that commits in between is then in one or the other, never lost
	// from both.
	s.fmu.Lock()
	ops := maps.Clone(s.agentOps)
	s.fmu.Unlock()
	byPid := map[int]AgentRecord{}
	err := s.view(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketAgents).ForEach(func(k, v []byte) error {
			var r AgentRecord
			if err := json.Unmarshal(v, &r); err != nil {
				return fmt.Errorf("agent %x: %w", k, err)
			}
			byPid[r.Pid] = r
			return nil
		})
	})
	if err != nil {
		return nil, fmt.Errorf("store: list agents: %w", err)
	}
	for pid, op := range ops {
		delete(byPid, pid)
		if op.rec == nil {
			continue
		}
		var r AgentRecord
		if err := json.Unmarshal(op.rec, &r); err != nil {
			return nil, fmt.Errorf("store: list agents: pending agent pid %d: %w", pid, err)
		}
		byPid[pid] = r
	}
	out := make([]AgentRecord, 0, len(byPid))
	for _, r := range byPid {
		out = append(out, r)
	}
	slices.SortFunc(out, func(a, b AgentRecord) int { return a.Pid - b.Pid })
	return out, nil
}

// keyMarkPrefix names, in the meta bucket, the file's agent mark prefix.
// No migration: Open writes one into a file that has none, and older
// daemons ignore it.
var keyMarkPrefix = []byte("mark-prefix")

// MarkPrefix is this file's agent mark prefix: 16 hex digits made once,
// when the file was first opened, and kept in it. Every agent a daemon on
// this file starts carries a mark beginning with it, so the next daemon's
// startup sweep finds a crashed daemon's agents even when their records
// were never written (RecordAgent commits with the next write).
func (s *Store) MarkPrefix() string { return s.markPrefix }

// ensureMarkPrefix reads the file's mark prefix, making one in tx if the
// file has none (or a malformed one).
func ensureMarkPrefix(tx *bolt.Tx) (string, error) {
	meta := tx.Bucket(bucketMeta)
	if v := meta.Get(keyMarkPrefix); child.ValidMarkPrefix(string(v)) {
		return string(v), nil
	}
	p, err := child.NewMarkPrefix()
	if err != nil {
		return "", fmt.Errorf("make the agent mark prefix: %w", err)
	}
	if err := meta.Put(keyMarkPrefix, []byte(p)); err != nil {
		return "", fmt.Errorf("save the agent mark prefix: %w", err)
	}
	return p, nil
}
