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

// RecordAgent saves r under its pid, replacing any record of that pid.
func (s *Store) RecordAgent(r AgentRecord) error {
	if r.Pid <= 0 {
		return fmt.Errorf("store: record agent: pid must be positive, got %d", r.Pid)
	}
	// A recycled pid: the old process's pending forget must not drop r.
	s.gmu.Lock()
	delete(s.forget, r.Pid)
	s.gmu.Unlock()
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

// ForgetAgent drops the record of pid; a missing one is not an error. The
// record goes in the next write transaction (a turn's, usually) or at
// Close, not in a commit of its own: Agents no longer lists it at once,
// and a record a crash leaves behind is one the startup sweep finds gone
// or reused (its start time tells), as after any crash.
func (s *Store) ForgetAgent(pid int) error {
	if pid <= 0 {
		return nil
	}
	s.gmu.Lock()
	if s.forget == nil {
		s.forget = map[int]bool{}
	}
	s.forget[pid] = true
	s.gmu.Unlock()
	return nil
}

// forgetWrite drops the agent records of pids.
func forgetWrite(pids map[int]bool) *write {
	return &write{done: make(chan struct{}), lead: make(chan struct{}), fn: func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketAgents)
		for pid := range pids {
			if err := b.Delete(pidKey(pid)); err != nil {
				return fmt.Errorf("forget agent pid %d: %w", pid, err)
			}
		}
		return nil
	}}
}

// Agents lists the recorded agent processes by pid.
func (s *Store) Agents() ([]AgentRecord, error) {
	var out []AgentRecord
	err := s.view(func(tx *bolt.Tx) error {
		s.gmu.Lock()
		defer s.gmu.Unlock()
		return tx.Bucket(bucketAgents).ForEach(func(k, v []byte) error {
			var r AgentRecord
			if err := json.Unmarshal(v, &r); err != nil {
				return fmt.Errorf("agent %x: %w", k, err)
			}
			if s.forget[r.Pid] {
				return nil // forgotten; the next write drops it
			}
			out = append(out, r)
			return nil
		})
	})
	if err != nil {
		return nil, fmt.Errorf("store: list agents: %w", err)
	}
	return out, nil
}
