package store

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/residentd/residentd/apitype"
	"github.com/residentd/residentd/internal/session"
)

// SpendDays is how many budget days of spending the file keeps; older days
// are dropped as new spending is recorded.
const SpendDays = 35

// dayLayout names a budget day in spend keys; every day is the same length,
// so byte order is day order.
const dayLayout = "2006-01-02"

// migrateSettings adds the key options set through the API and the
// spending that budgets count.
func migrateSettings(tx *bolt.Tx) error {
	for _, name := range [][]byte{bucketOptions, bucketSpend} {
		if _, err := tx.CreateBucketIfNotExists(name); err != nil {
			return fmt.Errorf("create bucket %q: %w", name, err)
		}
	}
	return nil
}

// KeyOptions returns every key's own session options, as set through the
// API (the binding's options are in the config).
func (s *Store) KeyOptions() (map[session.Key]map[string]string, error) {
	out := map[session.Key]map[string]string{}
	err := s.view(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketOptions).ForEach(func(k, v []byte) error {
			parts, err := splitKey(k, 2)
			if err != nil {
				return fmt.Errorf("options %x: %w", k, err)
			}
			var m map[string]string
			if err := json.Unmarshal(v, &m); err != nil {
				return fmt.Errorf("options of %s/%s: %w", parts[0], parts[1], err)
			}
			out[session.Key{Channel: parts[0], Binding: parts[1]}] = m
			return nil
		})
	})
	if err != nil {
		return nil, fmt.Errorf("store: key options: %w", err)
	}
	return out, nil
}

// SetKeyOptions replaces the key's own session options; none removes them.
func (s *Store) SetKeyOptions(k session.Key, opts map[string]string) error {
	if err := k.Check(); err != nil {
		return fmt.Errorf("store: set options: %w", err)
	}
	var v []byte
	if len(opts) > 0 {
		var err error
		if v, err = json.Marshal(opts); err != nil {
			return fmt.Errorf("store: set options of %q: %w", k, err)
		}
	}
	err := s.update(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketOptions)
		if v == nil {
			return b.Delete(joinKey(k.Channel, k.Binding))
		}
		return b.Put(joinKey(k.Channel, k.Binding), v)
	})
	if err != nil {
		return fmt.Errorf("store: set options of %q: %w", k, err)
	}
	return nil
}

// Spend is cost counted toward one budget on one budget day.
type Spend struct {
	Day   time.Time // the budget day: its date is what counts
	Scope string    // "binding" or "channel"
	ID    string    // the binding or channel id
	Cost  apitype.Amount
}

// SpendKey names one budget: its scope and the binding or channel id.
type SpendKey struct {
	Scope, ID string
}

// AddSpend adds spending to its days' totals in one transaction.
func (s *Store) AddSpend(spend []Spend) error {
	if len(spend) == 0 {
		return nil
	}
	if err := s.update(func(tx *bolt.Tx) error { return addSpend(tx, spend) }); err != nil {
		return fmt.Errorf("store: add spending: %w", err)
	}
	return nil
}

// SpentOn returns every budget's total for day.
func (s *Store) SpentOn(day time.Time) (map[SpendKey]apitype.Amount, error) {
	out := map[SpendKey]apitype.Amount{}
	prefix := joinKey(day.Format(dayLayout))
	err := s.view(func(tx *bolt.Tx) error {
		c := tx.Bucket(bucketSpend).Cursor()
		for k, v := c.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix); k, v = c.Next() {
			parts, err := splitKey(k, 3)
			if err != nil {
				return fmt.Errorf("spend %x: %w", k, err)
			}
			if len(v) != 8 {
				return fmt.Errorf("spend of %s %s: %d bytes, want 8", parts[1], parts[2], len(v))
			}
			out[SpendKey{Scope: parts[1], ID: parts[2]}] = apitype.Amount(binary.BigEndian.Uint64(v))
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("store: spending on %s: %w", day.Format(dayLayout), err)
	}
	return out, nil
}

// addSpend adds each spend to its day's total and drops the days older
// than SpendDays before the newest one written.
func addSpend(tx *bolt.Tx, spend []Spend) error {
	b := tx.Bucket(bucketSpend)
	newest := spend[0].Day
	for _, sp := range spend {
		if sp.Scope == "" || sp.ID == "" {
			return fmt.Errorf("spend needs a scope and an id, got %q %q", sp.Scope, sp.ID)
		}
		if sp.Day.After(newest) {
			newest = sp.Day
		}
		k := joinKey(sp.Day.Format(dayLayout), sp.Scope, sp.ID)
		total := sp.Cost
		if v := b.Get(k); len(v) == 8 {
			total += apitype.Amount(binary.BigEndian.Uint64(v))
		}
		if err := b.Put(k, u64(uint64(total))); err != nil {
			return err
		}
	}
	cut := joinKey(newest.AddDate(0, 0, -SpendDays).Format(dayLayout))
	c := b.Cursor()
	for k, _ := c.First(); k != nil && bytes.Compare(k, cut) < 0; k, _ = c.First() {
		if err := b.Delete(bytes.Clone(k)); err != nil {
			return err
		}
	}
	return nil
}

// AgentSeen is who a binding's agent said it is at initialize (its
// agentInfo), the command line that started it, and the policy control it
// refused if any: the daemon remembers it
// to report, at its next start and before any process runs, how the
// binding's permission policy reaches that agent.
type AgentSeen struct {
	Name    string `json:"name"`
	Version string `json:"version"`
	Command string `json:"command"`
	Failed  string `json:"failed,omitempty"` // the policy control the agent refused, if it did
}

// agentSeenPrefix prefixes a binding id in the meta bucket. No migration:
// a file without such keys has seen no agent yet, and older daemons ignore
// the keys.
const agentSeenPrefix = "agent-seen/"

// AgentsSeen returns the remembered agent of each binding that has started
// one.
func (s *Store) AgentsSeen() (map[string]AgentSeen, error) {
	out := map[string]AgentSeen{}
	err := s.view(func(tx *bolt.Tx) error {
		c := tx.Bucket(bucketMeta).Cursor()
		p := []byte(agentSeenPrefix)
		for k, v := c.Seek(p); k != nil && bytes.HasPrefix(k, p); k, v = c.Next() {
			var a AgentSeen
			if err := json.Unmarshal(v, &a); err != nil {
				return fmt.Errorf("agent seen for binding %q: %w", k[len(p):], err)
			}
			out[string(k[len(p):])] = a
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("store: agents seen: %w", err)
	}
	s.fmu.Lock()
	defer s.fmu.Unlock()
	for binding, v := range s.seen {
		var a AgentSeen
		if err := json.Unmarshal(v, &a); err == nil {
			out[binding] = a
		}
	}
	return out, nil
}

// SetAgentSeen remembers binding's agent. Like ForgetAgent it commits
// nothing itself: the record goes in the next write transaction (the
// turn's commit, usually) or when the store closes, so an agent's first
// start costs no fsync pair of its own. AgentsSeen sees it at once.
func (s *Store) SetAgentSeen(binding string, a AgentSeen) error {
	v, err := json.Marshal(a)
	if err != nil {
		return fmt.Errorf("store: agent seen for binding %q: %w", binding, err)
	}
	s.fmu.Lock()
	defer s.fmu.Unlock()
	if s.seen == nil {
		s.seen = map[string][]byte{}
	}
	s.seen[binding] = v
	return nil
}

// applySeen writes the pending agents seen in tx and returns what it wrote,
// to be cleared from the pending set once tx commits.
func (s *Store) applySeen(tx *bolt.Tx) (map[string][]byte, error) {
	s.fmu.Lock()
	defer s.fmu.Unlock()
	if len(s.seen) == 0 {
		return nil, nil
	}
	out := make(map[string][]byte, len(s.seen))
	for binding, v := range s.seen {
		if err := tx.Bucket(bucketMeta).Put([]byte(agentSeenPrefix+binding), v); err != nil {
			return nil, fmt.Errorf("store: agent seen for binding %q: %w", binding, err)
		}
		out[binding] = v
	}
	return out, nil
}

// seenWritten clears what a committed transaction wrote, unless the binding
// was set again since.
func (s *Store) seenWritten(done map[string][]byte) {
	if len(done) == 0 {
		return
	}
	s.fmu.Lock()
	defer s.fmu.Unlock()
	for binding, v := range done {
		if bytes.Equal(s.seen[binding], v) {
			delete(s.seen, binding)
		}
	}
}
