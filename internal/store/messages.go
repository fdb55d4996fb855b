package store

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/residentd/residentd/internal/channel"
)

// DefaultHistoryLimit is the page size History uses for a limit <= 0.
const DefaultHistoryLimit = 30

// timelineOf is the timeline a message belongs to: its thread root, or ""
// for the main timeline (a message naming itself as root is a root).
func timelineOf(m channel.Message) string {
	if m.ThreadRoot == m.ID {
		return ""
	}
	return m.ThreadRoot
}

// channelBuckets are one channel's sub-buckets inside one transaction.
type channelBuckets struct {
	ch       *bolt.Bucket
	msgs     *bolt.Bucket
	ids      *bolt.Bucket
	timeline *bolt.Bucket
}

func openChannel(tx *bolt.Tx, ch string) *channelBuckets {
	b := tx.Bucket(bucketChannels).Bucket([]byte(ch))
	if b == nil {
		return nil
	}
	return &channelBuckets{ch: b, msgs: b.Bucket(keyMsgs), ids: b.Bucket(keyIDs), timeline: b.Bucket(keyTimeline)}
}

func createChannel(tx *bolt.Tx, ch string) (*channelBuckets, error) {
	b, err := tx.Bucket(bucketChannels).CreateBucketIfNotExists([]byte(ch))
	if err != nil {
		return nil, err
	}
	cb := &channelBuckets{ch: b}
	for _, sub := range []struct {
		dst  **bolt.Bucket
		name []byte
	}{{&cb.msgs, keyMsgs}, {&cb.ids, keyIDs}, {&cb.timeline, keyTimeline}} {
		if *sub.dst, err = b.CreateBucketIfNotExists(sub.name); err != nil {
			return nil, err
		}
	}
	return cb, nil
}

func (cb *channelBuckets) count() uint64 {
	if v := cb.ch.Get(keyCount); len(v) == 8 {
		return binary.BigEndian.Uint64(v)
	}
	return 0
}

func (cb *channelBuckets) setCount(n uint64) error { return cb.ch.Put(keyCount, u64(n)) }

func (cb *channelBuckets) message(mk []byte) (channel.Message, error) {
	var m channel.Message
	v := cb.msgs.Get(mk)
	if v == nil {
		return m, fmt.Errorf("index points at missing message %x", mk)
	}
	if err := json.Unmarshal(v, &m); err != nil {
		return m, fmt.Errorf("message %x: %w", mk, err)
	}
	return m, nil
}

// put stores m unless its id is already there; it reports whether it wrote.
func (cb *channelBuckets) put(m channel.Message) (bool, error) {
	if cb.ids.Get([]byte(m.ID)) != nil {
		return false, nil
	}
	v, err := json.Marshal(m)
	if err != nil {
		return false, err
	}
	mk := msgKey(m.CreatedAt, m.ID)
	if err := cb.msgs.Put(mk, v); err != nil {
		return false, err
	}
	if err := cb.ids.Put([]byte(m.ID), mk); err != nil {
		return false, err
	}
	if err := cb.timeline.Put(append(joinKey(timelineOf(m)), mk...), nil); err != nil {
		return false, err
	}
	return true, cb.setCount(cb.count() + 1)
}

// trim drops the oldest messages beyond max.
func (cb *channelBuckets) trim(max int) error {
	n := cb.count()
	for ; n > uint64(max); n-- {
		k, _ := cb.msgs.Cursor().First()
		if k == nil {
			break
		}
		mk := bytes.Clone(k)
		m, err := cb.message(mk)
		if err != nil {
			return err
		}
		if err := cb.timeline.Delete(append(joinKey(timelineOf(m)), mk...)); err != nil {
			return err
		}
		if err := cb.ids.Delete([]byte(m.ID)); err != nil {
			return err
		}
		if err := cb.msgs.Delete(mk); err != nil {
			return err
		}
	}
	return cb.setCount(n)
}

// PutMessages stores msgs in one transaction. Every message is validated
// first and nothing is written if one is invalid. A message whose id the
// channel already holds is left as it is and not counted. Each touched
// channel is then trimmed to Options.MaxChannelMessages; a message written
// and dropped by that trim in the same call still counts as added.
func (s *Store) PutMessages(msgs []channel.Message) (added int, err error) {
	for i, m := range msgs {
		if err := m.Validate(); err != nil {
			return 0, fmt.Errorf("store: put messages: message %d of %d (id %q): %w", i, len(msgs), m.ID, err)
		}
	}
	if len(msgs) == 0 {
		return 0, nil
	}
	err = s.db.Update(func(tx *bolt.Tx) error {
		added = 0
		touched := map[string]*channelBuckets{}
		for _, m := range msgs {
			cb := touched[m.Channel]
			if cb == nil {
				var err error
				if cb, err = createChannel(tx, m.Channel); err != nil {
					return fmt.Errorf("channel %q: %w", m.Channel, err)
				}
				touched[m.Channel] = cb
			}
			wrote, err := cb.put(m)
			if err != nil {
				return fmt.Errorf("message %q in channel %q: %w", m.ID, m.Channel, err)
			}
			if wrote {
				added++
			}
		}
		for ch, cb := range touched {
			if err := cb.trim(s.opts.MaxChannelMessages); err != nil {
				return fmt.Errorf("retention of channel %q: %w", ch, err)
			}
		}
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("store: put messages: %w", err)
	}
	return added, nil
}

// Recent returns the newest n messages of a timeline, oldest first, ordered
// by (created_at, id). thread "" is the channel's main timeline (messages
// with no thread root); otherwise the thread's root message and its replies.
// An unknown channel or n <= 0 gives none.
func (s *Store) Recent(ch, thread string, n int) ([]channel.Message, error) {
	if n <= 0 {
		return nil, nil
	}
	var out []channel.Message
	err := s.db.View(func(tx *bolt.Tx) error {
		cb := openChannel(tx, ch)
		if cb == nil {
			return nil
		}
		var err error
		out, _, err = cb.page(thread, nil, n)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("store: recent messages of channel %q thread %q: %w", ch, thread, err)
	}
	return out, nil
}

// History pages a timeline (as Recent) backwards. before is "" (from the
// newest), a message id of the channel, or an RFC 3339 timestamp; the page
// holds up to limit (DefaultHistoryLimit when <= 0) messages strictly older
// than it, oldest first. next is the cursor for the following, older page,
// "" once the start of the timeline is reached. A cursor that is neither a
// known id nor a timestamp is an error wrapping ErrNotFound; an unknown
// channel gives an empty page.
func (s *Store) History(ch, thread string, before string, limit int) (msgs []channel.Message, next string, err error) {
	if limit <= 0 {
		limit = DefaultHistoryLimit
	}
	err = s.db.View(func(tx *bolt.Tx) error {
		cb := openChannel(tx, ch)
		if cb == nil {
			return nil
		}
		var bound []byte
		if before != "" {
			if mk := cb.ids.Get([]byte(before)); mk != nil {
				bound = bytes.Clone(mk)
			} else if t, perr := time.Parse(time.RFC3339, before); perr == nil {
				bound = timeKey(t)
			} else {
				return fmt.Errorf("cursor %q is neither a message id in this channel nor an RFC 3339 timestamp: %w", before, ErrNotFound)
			}
		}
		var more bool
		msgs, more, err = cb.page(thread, bound, limit)
		if err != nil {
			return err
		}
		if more && len(msgs) > 0 {
			next = msgs[0].ID
		}
		return nil
	})
	if err != nil {
		return nil, "", fmt.Errorf("store: history of channel %q thread %q before %q: %w", ch, thread, before, err)
	}
	return msgs, next, nil
}

// page returns up to limit messages of a timeline whose msgs key is below
// bound (nil: no bound), oldest first, and whether older ones remain.
func (cb *channelBuckets) page(thread string, bound []byte, limit int) ([]channel.Message, bool, error) {
	prefix := joinKey(thread)
	var seek []byte
	if bound != nil {
		seek = append(bytes.Clone(prefix), bound...)
	} else {
		seek = successor(prefix)
	}
	c := cb.timeline.Cursor()
	var k []byte
	if seek == nil {
		k, _ = c.Last()
	} else if k, _ = c.Seek(seek); k == nil {
		k, _ = c.Last()
	} else {
		k, _ = c.Prev()
	}
	// Newest first, one extra to learn whether more remain.
	var keys [][]byte
	for ; k != nil && bytes.HasPrefix(k, prefix) && len(keys) <= limit; k, _ = c.Prev() {
		keys = append(keys, bytes.Clone(k[len(prefix):]))
	}
	// A thread's root lives in the main timeline; merge it in.
	if thread != "" {
		if rk := cb.ids.Get([]byte(thread)); rk != nil && (bound == nil || bytes.Compare(rk, bound) < 0) {
			i, found := slices.BinarySearchFunc(keys, rk, func(a, b []byte) int { return bytes.Compare(b, a) })
			if !found {
				keys = slices.Insert(keys, i, bytes.Clone(rk))
			}
		}
	}
	more := len(keys) > limit
	if more {
		keys = keys[:limit]
	}
	out := make([]channel.Message, 0, len(keys))
	for i := len(keys) - 1; i >= 0; i-- {
		m, err := cb.message(keys[i])
		if err != nil {
			return nil, false, err
		}
		out = append(out, m)
	}
	return out, more, nil
}

// HasMessage reports whether channel ch holds message id.
func (s *Store) HasMessage(ch, id string) (bool, error) {
	found := false
	err := s.db.View(func(tx *bolt.Tx) error {
		if cb := openChannel(tx, ch); cb != nil {
			found = cb.ids.Get([]byte(id)) != nil
		}
		return nil
	})
	if err != nil {
		return false, fmt.Errorf("store: look up message %q in channel %q: %w", id, ch, err)
	}
	return found, nil
}

// Channels lists the channels holding messages, in byte order.
func (s *Store) Channels() ([]string, error) {
	var out []string
	err := s.db.View(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketChannels).ForEachBucket(func(name []byte) error {
			out = append(out, string(name))
			return nil
		})
	})
	if err != nil {
		return nil, fmt.Errorf("store: list channels: %w", err)
	}
	return out, nil
}
