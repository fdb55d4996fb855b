package store

import (
	"encoding/json"
	"fmt"
	"time"

	bolt "go.etcd.io/bbolt"

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

// RecordAgent saves r under its pid, replacing any record of that pid; a
// pending ForgetAgent of the pid (a process that had it before) is dropped.
func (s *Store) RecordAgent(r AgentRecord) error {
	if r.Pid <= 0 {
		return fmt.Errorf("store: record agent: pid must be positive, got %d", r.Pid)
	}
	s.fmu.Lock()
	delete(s.forget, r.Pid)
	s.fmu.Unlock()
	v, err := json.Marshal(r)
	if err != nil {
		return fmt.Errorf("store: record agent pid %d: %w", r.Pid, err)
	}
	err = s.update(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketAgents).Put(pidKey(r.Pid), v)
	})
	if err != nil {
		return fmt.Errorf("store: record agent pid %d: %w", r.Pid, err)
	}
	return nil
}

// ForgetAgent drops the record of pid; a missing one is not an error. It
// commits nothing itself: the record goes in the next write transaction
// (a turn's commit, usually), or when the store closes, so an agent's exit
// costs no fsync pair of its own. Agents no longer lists it meanwhile; a
// daemon killed before the next write leaves the record, which the startup
// sweep tells from a live agent by its start time.
func (s *Store) ForgetAgent(pid int) error {
	if pid <= 0 {
		return nil
	}
	s.fmu.Lock()
	defer s.fmu.Unlock()
	if s.forget == nil {
		s.forget = make(map[int]uint64)
	}
	s.forgetN++
	s.forget[pid] = s.forgetN
	return nil
}

// applyForget drops the pending agent records in tx and returns what it
// dropped, to be cleared from the pending set once tx commits.
func (s *Store) applyForget(tx *bolt.Tx) (map[int]uint64, error) {
	s.fmu.Lock()
	defer s.fmu.Unlock()
	if len(s.forget) == 0 {
		return nil, nil
	}
	b := tx.Bucket(bucketAgents)
	out := make(map[int]uint64, len(s.forget))
	for pid, gen := range s.forget {
		if err := b.Delete(pidKey(pid)); err != nil {
			return nil, fmt.Errorf("store: forget agent pid %d: %w", pid, err)
		}
		out[pid] = gen
	}
	return out, nil
}

// forgotten clears what a committed transaction dropped, unless the pid was
// forgotten again since (a later process with the same pid).
func (s *Store) forgotten(done map[int]uint64) {
	if len(done) == 0 {
		return
	}
	s.fmu.Lock()
	defer s.fmu.Unlock()
	for pid, gen := range done {
		if s.forget[pid] == gen {
			delete(s.forget, pid)
		}
	}
}

// forgetPending says whether agent records wait for the next write:
// forgotten ones, or agents seen (SetAgentSeen).
func (s *Store) forgetPending() bool {
	s.fmu.Lock()
	defer s.fmu.Unlock()
	return len(s.forget) > 0 || len(s.seen) > 0
}

func (s *Store) forgetting(pid int) bool {
	s.fmu.Lock()
	defer s.fmu.Unlock()
	_, ok := s.forget[pid]
	return ok
}

// Agents lists the recorded agent processes by pid, leaving out those
// forgotten and not yet dropped.
func (s *Store) Agents() ([]AgentRecord, error) {
	var out []AgentRecord
	err := s.view(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketAgents).ForEach(func(k, v []byte) error {
			var r AgentRecord
			if err := json.Unmarshal(v, &r); err != nil {
				return fmt.Errorf("agent %x: %w", k, err)
			}
			if !s.forgetting(r.Pid) {
				out = append(out, r)
			}
			return nil
		})
	})
	if err != nil {
		return nil, fmt.Errorf("store: list agents: %w", err)
	}
	return out, nil
}
