package store

import (
	"bytes"
	"encoding/json"
	"fmt"

	bolt "go.etcd.io/bbolt"

	"github.com/residentd/residentd/apitype"
)

// Rosters and activity are kept as the desktop app pushed them: the
// apitype values are their stored form.

// SetRoster replaces a channel's roster, keeping the first
// Options.MaxRoster members.
func (s *Store) SetRoster(ch string, members []apitype.Member) error {
	if ch == "" {
		return fmt.Errorf("store: set roster: channel must be set")
	}
	if len(members) > s.opts.MaxRoster {
		members = members[:s.opts.MaxRoster]
	}
	if members == nil {
		members = []apitype.Member{}
	}
	v, err := json.Marshal(members)
	if err != nil {
		return fmt.Errorf("store: set roster of channel %q: %w", ch, err)
	}
	err = s.update(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketRoster).Put([]byte(ch), v)
	})
	if err != nil {
		return fmt.Errorf("store: set roster of channel %q: %w", ch, err)
	}
	return nil
}

// Roster returns a channel's roster; none pushed yet gives nil.
func (s *Store) Roster(ch string) ([]apitype.Member, error) {
	var out []apitype.Member
	err := s.view(func(tx *bolt.Tx) error {
		if ch == "" {
			return nil
		}
		v := tx.Bucket(bucketRoster).Get([]byte(ch))
		if v == nil {
			return nil
		}
		return json.Unmarshal(v, &out)
	})
	if err != nil {
		return nil, fmt.Errorf("store: roster of channel %q: %w", ch, err)
	}
	return out, nil
}

// AddActivity appends items to a project's activity and keeps the newest
// Options.MaxActivity by At (ties in insertion order).
func (s *Store) AddActivity(project string, items []apitype.Activity) error {
	if project == "" {
		return fmt.Errorf("store: add activity: project must be set")
	}
	if len(items) == 0 {
		return nil
	}
	err := s.update(func(tx *bolt.Tx) error {
		b, err := tx.Bucket(bucketActivity).CreateBucketIfNotExists([]byte(project))
		if err != nil {
			return err
		}
		for _, it := range items {
			seq, err := b.NextSequence()
			if err != nil {
				return err
			}
			v, err := json.Marshal(it)
			if err != nil {
				return err
			}
			if err := b.Put(append(timeKey(it.At), u64(seq)...), v); err != nil {
				return err
			}
		}
		// Count with a cursor: Bucket.Stats does not see this
		// transaction's unwritten nodes.
		n := 0
		c := b.Cursor()
		for k, _ := c.First(); k != nil; k, _ = c.Next() {
			n++
		}
		var doomed [][]byte
		for k, _ := c.First(); k != nil && n-len(doomed) > s.opts.MaxActivity; k, _ = c.Next() {
			doomed = append(doomed, bytes.Clone(k))
		}
		for _, k := range doomed {
			if err := b.Delete(k); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("store: add activity to project %q: %w", project, err)
	}
	return nil
}

// Activity returns a project's newest n items (all kept when n <= 0),
// newest first.
func (s *Store) Activity(project string, n int) ([]apitype.Activity, error) {
	var out []apitype.Activity
	err := s.view(func(tx *bolt.Tx) error {
		if project == "" {
			return nil
		}
		b := tx.Bucket(bucketActivity).Bucket([]byte(project))
		if b == nil {
			return nil
		}
		c := b.Cursor()
		for k, v := c.Last(); k != nil && (n <= 0 || len(out) < n); k, v = c.Prev() {
			var a apitype.Activity
			if err := json.Unmarshal(v, &a); err != nil {
				return fmt.Errorf("item %x: %w", k, err)
			}
			out = append(out, a)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("store: activity of project %q: %w", project, err)
	}
	return out, nil
}

// SetProject maps a channel to the project whose activity its agents see;
// "" removes the mapping.
func (s *Store) SetProject(ch, project string) error {
	if ch == "" {
		return fmt.Errorf("store: set project: channel must be set")
	}
	err := s.update(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketProjects)
		if project == "" {
			return b.Delete([]byte(ch))
		}
		return b.Put([]byte(ch), []byte(project))
	})
	if err != nil {
		return fmt.Errorf("store: set project of channel %q: %w", ch, err)
	}
	return nil
}

// Project returns the project a channel is mapped to, or the channel id
// itself when none was pushed.
func (s *Store) Project(ch string) (string, error) {
	project := ch
	err := s.view(func(tx *bolt.Tx) error {
		if v := tx.Bucket(bucketProjects).Get([]byte(ch)); v != nil {
			project = string(v)
		}
		return nil
	})
	if err != nil {
		return "", fmt.Errorf("store: project of channel %q: %w", ch, err)
	}
	return project, nil
}
