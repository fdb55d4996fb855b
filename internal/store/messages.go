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
	"github.com/residentd/residentd/internal/session"
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
	arrivals *bolt.Bucket
	tcounts  *bolt.Bucket
	gone     *bolt.Bucket
	// pushed are the ids this push has written: a second version of one
	// in the same push replaces it in place (see put).
	pushed map[string]bool
	// refs counts the attachments (nil until one was ever pushed); zeroed
	// are the hashes this transaction left without a message.
	refs   *bolt.Bucket
	zeroed []string
}

func openChannel(tx *bolt.Tx, ch string) *channelBuckets {
	b := tx.Bucket(bucketChannels).Bucket([]byte(ch))
	if b == nil {
		return nil
	}
	return &channelBuckets{ch: b, msgs: b.Bucket(keyMsgs), ids: b.Bucket(keyIDs), timeline: b.Bucket(keyTimeline),
		arrivals: b.Bucket(keyArrivals), tcounts: b.Bucket(keyTimelineCounts), gone: b.Bucket(keyGone), refs: tx.Bucket(bucketAttachments)}
}

func createChannel(tx *bolt.Tx, ch string) (*channelBuckets, error) {
	b, err := tx.Bucket(bucketChannels).CreateBucketIfNotExists([]byte(ch))
	if err != nil {
		return nil, err
	}
	cb, err := ensureChannelBuckets(b)
	if err != nil {
		return nil, err
	}
	cb.refs = tx.Bucket(bucketAttachments)
	return cb, nil
}

func ensureChannelBuckets(b *bolt.Bucket) (*channelBuckets, error) {
	cb := &channelBuckets{ch: b}
	for _, sub := range []struct {
		dst  **bolt.Bucket
		name []byte
	}{{&cb.msgs, keyMsgs}, {&cb.ids, keyIDs}, {&cb.timeline, keyTimeline}, {&cb.arrivals, keyArrivals}, {&cb.tcounts, keyTimelineCounts}, {&cb.gone, keyGone}} {
		var err error
		if *sub.dst, err = b.CreateBucketIfNotExists(sub.name); err != nil {
			return nil, err
		}
	}
	return cb, nil
}

func getU64(b *bolt.Bucket, k []byte) uint64 {
	if v := b.Get(k); len(v) == 8 {
		return binary.BigEndian.Uint64(v)
	}
	return 0
}

func (cb *channelBuckets) count() uint64 { return getU64(cb.ch, keyCount) }

func (cb *channelBuckets) setCount(n uint64) error { return cb.ch.Put(keyCount, u64(n)) }

// lastSeq is the channel's newest arrival number.
func (cb *channelBuckets) lastSeq() uint64 { return getU64(cb.ch, keySeq) }

func (cb *channelBuckets) nextSeq() (uint64, error) {
	n := cb.lastSeq() + 1
	return n, cb.ch.Put(keySeq, u64(n))
}

// timelineCount is how many messages a timeline holds (a thread's root, in
// the main timeline, not counted).
func (cb *channelBuckets) timelineCount(thread string) uint64 {
	return getU64(cb.tcounts, joinKey(thread))
}

func (cb *channelBuckets) addTimelineCount(thread string, d int) error {
	n := int64(cb.timelineCount(thread)) + int64(d)
	if n <= 0 {
		return cb.tcounts.Delete(joinKey(thread))
	}
	return cb.tcounts.Put(joinKey(thread), u64(uint64(n)))
}

// lookup returns the msgs key and arrival number of message id.
func (cb *channelBuckets) lookup(id string) (mk []byte, seq uint64, ok bool) {
	v := cb.ids.Get([]byte(id))
	if len(v) < 8 {
		return nil, 0, false
	}
	return v[8:], binary.BigEndian.Uint64(v[:8]), true
}

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

// arrivalKey is m's key in the arrivals index: its timeline, then its seq.
func arrivalKey(m channel.Message) []byte {
	return binary.BigEndian.AppendUint64(joinKey(timelineOf(m)), m.Seq)
}

// arrival is an arrivals index value: what Select needs to decide on a
// message without decoding it. Encoding (since schema version 5): one
// flags byte, the first version's arrival (uint64), then author and
// binding as joinKey parts, then the msgs key.
func arrival(m channel.Message, mk []byte) []byte {
	flags := byte(0)
	if m.Edited {
		flags |= 1
	}
	if m.AuthorKind == channel.KindAgent {
		flags |= 2
	}
	v := binary.BigEndian.AppendUint64([]byte{flags}, m.First)
	v = append(v, joinKey(m.Author, m.BindingID)...)
	return append(v, mk...)
}

func parseArrival(seq uint64, v []byte) (channel.Candidate, []byte, error) {
	if len(v) < 9 {
		return channel.Candidate{}, nil, errBadKey
	}
	c := channel.Candidate{Seq: seq, First: binary.BigEndian.Uint64(v[1:9]), Edited: v[0]&1 != 0, Agent: v[0]&2 != 0}
	parts, rest, err := cutKey(v[9:], 2)
	if err != nil || len(rest) < 8 {
		return c, nil, errBadKey
	}
	c.Author, c.Binding = parts[0], parts[1]
	c.At = keyTime(rest[:8])
	c.ID = string(rest[8:])
	return c, rest, nil
}

// write stores m (whose Seq is set) under mk in every index but the
// timeline count.
func (cb *channelBuckets) write(m channel.Message, mk []byte) error {
	v, err := json.Marshal(m)
	if err != nil {
		return err
	}
	if err := cb.msgs.Put(mk, v); err != nil {
		return err
	}
	if err := cb.ids.Put([]byte(m.ID), append(u64(m.Seq), mk...)); err != nil {
		return err
	}
	if err := cb.timeline.Put(append(joinKey(timelineOf(m)), mk...), nil); err != nil {
		return err
	}
	return cb.arrivals.Put(arrivalKey(m), arrival(m, mk))
}

// putResult says what one pushed message did.
type putResult int

const (
	putDuplicate putResult = iota // same id and body, or a deleted id
	putAdded
	putEdited
)

// put stores m. A known id with the same body is a duplicate; with another
// body it is an edit: the body is replaced, the message marked edited and
// given a new arrival number (so a session that saw it sees it once more),
// and every other field of the first push is kept, its first arrival too.
// Two versions of one id in one push are one message, its last version: the
// later replaces the earlier in place, as no session can have read between
// them. A deleted id stays deleted, and a message at or before what
// retention already dropped (by created_at, id) is not taken back.
func (cb *channelBuckets) put(m channel.Message) (putResult, error) {
	r, err := cb.putVersion(m)
	if err == nil && r != putDuplicate {
		if cb.pushed == nil {
			cb.pushed = map[string]bool{}
		}
		cb.pushed[m.ID] = true
	}
	return r, err
}

func (cb *channelBuckets) putVersion(m channel.Message) (putResult, error) {
	if cb.gone.Get([]byte(m.ID)) != nil {
		return putDuplicate, nil
	}
	if _, _, known := cb.lookup(m.ID); !known {
		// Retention dropped everything up to the floor: a backfill of such
		// a message would come back as news to sessions that saw it.
		if floor := cb.ch.Get(keyFloor); floor != nil && bytes.Compare(msgKey(m.CreatedAt, m.ID), floor) <= 0 {
			return putDuplicate, nil
		}
	}
	if mk, _, ok := cb.lookup(m.ID); ok {
		old, err := cb.message(mk)
		if err != nil {
			return putDuplicate, err
		}
		if old.Body == m.Body {
			return putDuplicate, nil
		}
		if cb.pushed[m.ID] {
			old.Body = m.Body
			v, err := json.Marshal(old)
			if err != nil {
				return putDuplicate, err
			}
			return putEdited, cb.msgs.Put(bytes.Clone(mk), v)
		}
		if err := cb.arrivals.Delete(arrivalKey(old)); err != nil {
			return putDuplicate, err
		}
		old.Body, old.Edited = m.Body, true
		if old.Seq, err = cb.nextSeq(); err != nil {
			return putDuplicate, err
		}
		return putEdited, cb.write(old, bytes.Clone(mk))
	}
	var err error
	m.Edited = false
	if m.Seq, err = cb.nextSeq(); err != nil {
		return putDuplicate, err
	}
	m.First = m.Seq
	if _, err := ref(cb.refs, m.Attachments, 1); err != nil {
		return putDuplicate, err
	}
	if err := cb.write(m, msgKey(m.CreatedAt, m.ID)); err != nil {
		return putDuplicate, err
	}
	if err := cb.addTimelineCount(timelineOf(m), 1); err != nil {
		return putDuplicate, err
	}
	return putAdded, cb.setCount(cb.count() + 1)
}

// remove drops the message under mk from every index.
func (cb *channelBuckets) remove(mk []byte) error {
	m, err := cb.message(mk)
	if err != nil {
		return err
	}
	for _, del := range []struct {
		b *bolt.Bucket
		k []byte
	}{
		{cb.timeline, append(joinKey(timelineOf(m)), mk...)},
		{cb.arrivals, arrivalKey(m)},
		{cb.ids, []byte(m.ID)},
		{cb.msgs, mk},
	} {
		if err := del.b.Delete(del.k); err != nil {
			return err
		}
	}
	if err := cb.addTimelineCount(timelineOf(m), -1); err != nil {
		return err
	}
	zeroed, err := ref(cb.refs, m.Attachments, -1)
	if err != nil {
		return err
	}
	cb.zeroed = append(cb.zeroed, zeroed...)
	if n := cb.count(); n > 0 {
		return cb.setCount(n - 1)
	}
	return nil
}

// trim drops the oldest messages beyond max.
func (cb *channelBuckets) trim(max int) error {
	for cb.count() > uint64(max) {
		k, _ := cb.msgs.Cursor().First()
		if k == nil {
			return cb.setCount(0)
		}
		mk := bytes.Clone(k)
		if err := cb.remove(mk); err != nil {
			return err
		}
		if err := cb.ch.Put(keyFloor, mk); err != nil {
			return err
		}
	}
	return nil
}

// PutResult counts what one push did.
type PutResult struct {
	Added      int // new ids
	Edited     int // known ids with a new body; a second body of an id in the same push too
	Duplicates int // known ids with the same body, deleted ids, messages past retention
}

// PutMessages stores msgs in one transaction. Every message is validated
// first and nothing is written if one is invalid. A message whose id the
// channel already holds is a duplicate when its body is the same and an
// edit when it differs (see put). Each touched channel is then trimmed to
// Options.MaxChannelMessages; a message written and dropped by that trim in
// the same call still counts as added.
func (s *Store) PutMessages(msgs []channel.Message) (PutResult, error) {
	return s.PutMessagesWith(msgs, nil)
}

// PutMessagesWith is PutMessages for messages that carry attachments:
// blobs holds the content of each attachment by its SHA-256 (content the
// store keeps already may be left out). The content is written to the
// attachments folder before the transaction; each new message counts a
// reference to its attachments, and a message that leaves (retention,
// delete) drops them, the content going with its last reference.
func (s *Store) PutMessagesWith(msgs []channel.Message, blobs map[string][]byte) (PutResult, error) {
	for i, m := range msgs {
		if err := m.Validate(); err != nil {
			return PutResult{}, fmt.Errorf("store: put messages: message %d of %d (id %q): %w", i, len(msgs), m.ID, err)
		}
		for j, a := range m.Attachments {
			if !validSum(a.SHA256) {
				return PutResult{}, fmt.Errorf("store: put messages: message %q attachments[%d]: sha256 %q is not a SHA-256: %w", m.ID, j, a.SHA256, channel.ErrInvalidAttachment)
			}
		}
	}
	var res PutResult
	if len(msgs) == 0 {
		return res, nil
	}
	// Pushes and deletes hold amu from their content's write to the removal
	// of what they left unreferenced: a content one push finds unreferenced
	// is never one another push is about to reference.
	s.amu.Lock()
	defer s.amu.Unlock()
	if err := s.writeBlobs(blobs); err != nil {
		return PutResult{}, fmt.Errorf("store: put messages: %w", s.refused(err, 1))
	}
	var zeroed []string
	err := s.update(func(tx *bolt.Tx) error {
		res, zeroed = PutResult{}, nil
		var refs *bolt.Bucket
		if attached(msgs) {
			var err error
			if refs, err = tx.CreateBucketIfNotExists(bucketAttachments); err != nil {
				return fmt.Errorf("attachments: %w", err)
			}
			for _, m := range msgs {
				for _, a := range m.Attachments {
					if _, ok := blobs[a.SHA256]; !ok && refs.Get([]byte(a.SHA256)) == nil {
						return fmt.Errorf("message %q: attachment %s: no content given and none kept: %w", m.ID, a.SHA256, channel.ErrInvalidAttachment)
					}
				}
			}
		}
		touched := map[string]*channelBuckets{}
		for _, m := range msgs {
			cb := touched[m.Channel]
			if cb == nil {
				var err error
				if cb, err = createChannel(tx, m.Channel); err != nil {
					return fmt.Errorf("channel %q: %w", m.Channel, err)
				}
				if refs != nil {
					cb.refs = refs
				}
				touched[m.Channel] = cb
			}
			r, err := cb.put(m)
			if err != nil {
				return fmt.Errorf("message %q in channel %q: %w", m.ID, m.Channel, err)
			}
			switch r {
			case putAdded:
				res.Added++
			case putEdited:
				res.Edited++
			default:
				res.Duplicates++
			}
		}
		for ch, cb := range touched {
			if err := cb.trim(s.opts.MaxChannelMessages); err != nil {
				return fmt.Errorf("retention of channel %q: %w", ch, err)
			}
			zeroed = append(zeroed, cb.zeroed...)
		}
		return nil
	})
	// Content written for a push that failed, or for messages that were
	// duplicates, goes as well as what retention dropped.
	for sum := range blobs {
		zeroed = append(zeroed, sum)
	}
	if derr := s.dropUnreferenced(zeroed); derr != nil && err == nil {
		// The push is stored; the next Open collects what is left.
		return res, fmt.Errorf("store: put messages: stored, but %w", derr)
	}
	if err != nil {
		return PutResult{}, fmt.Errorf("store: put messages: %w", err)
	}
	return res, nil
}

func attached(msgs []channel.Message) bool {
	for _, m := range msgs {
		if len(m.Attachments) > 0 {
			return true
		}
	}
	return false
}

// DeleteMessage deletes message id of channel ch for good: it leaves every
// timeline and channel_history, a stored user turn that answered it keeps
// no trace of its text (a replay into a new process does not carry it), and
// a later push of the same id is ignored.
// An unknown channel or id is an error wrapping ErrNotFound.
func (s *Store) DeleteMessage(ch, id string) error {
	s.amu.Lock()
	defer s.amu.Unlock()
	var zeroed []string
	err := s.update(func(tx *bolt.Tx) error {
		zeroed = nil
		cb := openChannel(tx, ch)
		if cb == nil {
			return fmt.Errorf("no message %q: %w (the channel holds no messages)", id, ErrNotFound)
		}
		mk, _, ok := cb.lookup(id)
		if !ok {
			return fmt.Errorf("no message %q: %w", id, ErrNotFound)
		}
		if err := cb.remove(bytes.Clone(mk)); err != nil {
			return err
		}
		if err := redactTurns(tx, ch, id); err != nil {
			return fmt.Errorf("redact the conversations of channel %q: %w", ch, err)
		}
		zeroed = cb.zeroed
		return cb.gone.Put([]byte(id), nil)
	})
	if err == nil {
		err = s.dropUnreferenced(zeroed)
	}
	if err != nil {
		return fmt.Errorf("store: delete message %q of channel %q: %w", id, ch, err)
	}
	return nil
}

// Unseen reads one timeline for a channel block: every message whose
// current version arrived after after (the watermark's Seq; 0 for all),
// and a thread's root and the messages of also (a watermark's holes) of
// the timeline whatever their arrival, as candidates, handed to pick; the
// messages pick chose (by index) are decoded and returned. Messages that
// arrived at or before after are skipped on their index keys and never
// decoded. View.Known says where each id of known lives (Seq 0: the
// channel does not hold it).
func (s *Store) Unseen(ch, thread string, after uint64, also, known []string, pick func([]channel.Candidate) []int) (channel.View, error) {
	var v channel.View
	err := s.view(func(tx *bolt.Tx) error {
		var err error
		v, err = s.unseen(tx, ch, thread, after, also, known, pick)
		return err
	})
	if err != nil {
		return channel.View{}, fmt.Errorf("store: unseen messages of channel %q thread %q after %d: %w", ch, thread, after, err)
	}
	return v, nil
}

// unseen is Unseen in tx.
func (s *Store) unseen(tx *bolt.Tx, ch, thread string, after uint64, also, known []string, pick func([]channel.Candidate) []int) (channel.View, error) {
	var v channel.View
	cb := openChannel(tx, ch)
	if cb == nil {
		for _, id := range known {
			v.Known = append(v.Known, channel.Known{ID: id})
		}
		pick(nil)
		return v, nil
	}
	for _, id := range known {
		k := channel.Known{ID: id}
		if mk, seq, ok := cb.lookup(id); ok {
			m, err := cb.message(mk)
			if err != nil {
				return v, err
			}
			k.Seq, k.Thread, k.Author = seq, timelineOf(m), m.Author
			if len(m.Attachments) > 0 {
				if v.Attached == nil {
					v.Attached = map[string][]channel.Attachment{}
				}
				v.Attached[id] = s.withPaths(m)
			}
		}
		v.Known = append(v.Known, k)
	}
	v.Seq = cb.lastSeq()
	v.Total = int(cb.timelineCount(thread))
	var (
		cands []channel.Candidate
		keys  [][]byte
	)
	// offer makes message id a candidate whatever its arrival: a thread's
	// root (which may itself be a reply in another thread, its arrival
	// filed under its own timeline), or a hole of this timeline that the
	// scan below does not reach.
	offer := func(id string, root bool) error {
		mk, seq, ok := cb.lookup(id)
		if !ok || !root && (seq > after || id == thread) {
			return nil
		}
		m, err := cb.message(mk)
		if err != nil {
			return err
		}
		if !root && timelineOf(m) != thread {
			return nil
		}
		if root {
			v.Total++
		}
		c, _, err := parseArrival(seq, cb.arrivals.Get(arrivalKey(m)))
		if err != nil {
			return fmt.Errorf("arrival of %q: %w", id, err)
		}
		cands, keys = append(cands, c), append(keys, mk)
		return nil
	}
	if thread != "" {
		if err := offer(thread, true); err != nil {
			return v, err
		}
	}
	for _, id := range also {
		if err := offer(id, false); err != nil {
			return v, err
		}
	}
	prefix := joinKey(thread)
	cur := cb.arrivals.Cursor()
	for k, val := cur.Seek(binary.BigEndian.AppendUint64(bytes.Clone(prefix), after+1)); k != nil && bytes.HasPrefix(k, prefix); k, val = cur.Next() {
		seq := binary.BigEndian.Uint64(k[len(prefix):])
		c, mk, err := parseArrival(seq, val)
		if err != nil {
			return v, fmt.Errorf("arrival %d: %w", seq, err)
		}
		cands, keys = append(cands, c), append(keys, mk)
	}
	v.Candidates = len(cands)
	chosen := pick(cands)
	v.Rows = make([]channel.Message, 0, len(chosen))
	for _, i := range chosen {
		m, err := cb.message(keys[i])
		if err != nil {
			return v, err
		}
		m.Attachments = s.withPaths(m)
		v.Rows = append(v.Rows, m)
	}
	slices.SortFunc(v.Rows, func(a, b channel.Message) int {
		return bytes.Compare(msgKey(a.CreatedAt, a.ID), msgKey(b.CreatedAt, b.ID))
	})
	return v, nil
}

// ThreadKnown reports whether channel ch holds thread root's root message
// or any reply in it.
func (s *Store) ThreadKnown(ch, root string) (bool, error) {
	known := false
	err := s.view(func(tx *bolt.Tx) error {
		if cb := openChannel(tx, ch); cb != nil {
			_, _, ok := cb.lookup(root)
			known = ok || cb.timelineCount(root) > 0
		}
		return nil
	})
	if err != nil {
		return false, fmt.Errorf("store: look up thread %q in channel %q: %w", root, ch, err)
	}
	return known, nil
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
	err := s.view(func(tx *bolt.Tx) error {
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
	err = s.view(func(tx *bolt.Tx) error {
		cb := openChannel(tx, ch)
		if cb == nil {
			return nil
		}
		var bound []byte
		if before != "" {
			if mk, _, ok := cb.lookup(before); ok {
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
		if rk, _, ok := cb.lookup(thread); ok && (bound == nil || bytes.Compare(rk, bound) < 0) {
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
	err := s.view(func(tx *bolt.Tx) error {
		if cb := openChannel(tx, ch); cb != nil {
			_, _, found = cb.lookup(id)
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
	err := s.view(func(tx *bolt.Tx) error {
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

// deletedTurn replaces the text of a stored user turn whose mention was
// deleted.
const deletedTurn = "(The message of this turn was deleted.)"

// redactTurns blanks the user turns of channel ch's conversations that
// answered message id.
func redactTurns(tx *bolt.Tx, ch, id string) error {
	convs := tx.Bucket(bucketConversations)
	prefix := joinKey(ch)
	var keys [][]byte
	c := convs.Cursor()
	for k, v := c.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix); k, v = c.Next() {
		if v == nil { // a key's bucket
			if key, err := convKey(k); err == nil && key.Channel == ch {
				keys = append(keys, bytes.Clone(k))
			}
		}
	}
	for _, k := range keys {
		if err := rewriteUserTurns(convs.Bucket(k).Bucket(keyTurns), func(t *session.Turn) bool {
			if t.MessageID != id {
				return false
			}
			t.Text = deletedTurn
			return true
		}); err != nil {
			return err
		}
	}
	return nil
}

// rewriteUserTurns lets edit change each stored user turn of a turns
// bucket (nil: none) and writes back those it reports changed.
func rewriteUserTurns(turns *bolt.Bucket, edit func(*session.Turn) bool) error {
	if turns == nil {
		return nil
	}
	type update struct{ k, v []byte }
	var updates []update
	// Collected first: writing under a live cursor can skip keys.
	if err := turns.ForEach(func(k, v []byte) error {
		var t session.Turn
		if err := json.Unmarshal(v, &t); err != nil {
			return fmt.Errorf("turn %x: %w", k, err)
		}
		if t.Role != session.RoleUser || !edit(&t) {
			return nil
		}
		nv, err := json.Marshal(t)
		if err != nil {
			return err
		}
		updates = append(updates, update{bytes.Clone(k), nv})
		return nil
	}); err != nil {
		return err
	}
	for _, u := range updates {
		if err := turns.Put(u.k, u.v); err != nil {
			return err
		}
	}
	return nil
}

// Message reads message id of channel ch.
func (s *Store) Message(ch, id string) (channel.Message, bool, error) {
	var m channel.Message
	found := false
	err := s.view(func(tx *bolt.Tx) error {
		cb := openChannel(tx, ch)
		if cb == nil {
			return nil
		}
		mk, _, ok := cb.lookup(id)
		if !ok {
			return nil
		}
		var err error
		m, err = cb.message(mk)
		found = err == nil
		return err
	})
	if err != nil {
		return channel.Message{}, false, fmt.Errorf("store: read message %q in channel %q: %w", id, ch, err)
	}
	return m, found, nil
}
