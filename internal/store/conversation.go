package store

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/residentd/residentd/internal/channel"
	"github.com/residentd/residentd/internal/jsonenc"
	"github.com/residentd/residentd/internal/session"
)

// Conversation returns the key's kept turns, oldest first; none is not an
// error.
func (s *Store) Conversation(k session.Key) ([]session.Turn, error) {
	var out []session.Turn
	err := s.view(func(tx *bolt.Tx) error {
		var err error
		out, err = conversation(tx, k)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("store: conversation of %q: %w", k, err)
	}
	return out, nil
}

// conversation is Conversation in tx.
func conversation(tx *bolt.Tx, k session.Key) ([]session.Turn, error) {
	kb := tx.Bucket(bucketConversations).Bucket(convName(k))
	if kb == nil {
		return nil, nil
	}
	turns := kb.Bucket(keyTurns)
	if turns == nil {
		return nil, nil
	}
	var out []session.Turn
	err := turns.ForEach(func(seq, v []byte) error {
		var t session.Turn
		if err := json.Unmarshal(v, &t); err != nil {
			return fmt.Errorf("turn %d: %w", binary.BigEndian.Uint64(seq), err)
		}
		out = append(out, t)
		return nil
	})
	return out, err
}

// AppendTurns adds turns to the key's conversation in one transaction and
// drops the oldest beyond Options.MaxTurns.
func (s *Store) AppendTurns(k session.Key, turns ...session.Turn) error {
	return s.FinishTurn(k, Finish{Turns: turns})
}

// TurnCommit is a successful turn's Finish for key Key, for the turn's
// lease to commit with its staged watermarks (it is a lease.Committer).
type TurnCommit struct {
	Store  *Store
	Key    session.Key
	Finish Finish // Native and Staged are the lease's
}

// CommitWatermarks stores the turn with the watermarks it staged for
// native session native, in one transaction.
func (c TurnCommit) CommitWatermarks(native string, staged map[channel.WatermarkKey]channel.Seen) error {
	f := c.Finish
	f.Native, f.Staged = native, staged
	return c.Store.FinishTurn(c.Key, f)
}

// Finish is what a successful turn leaves behind.
type Finish struct {
	Turns      []session.Turn                        // the exchange, appended to the key's conversation
	Native     string                                // the native session the turn ran on
	SaveNative bool                                  // Native is new: save it as the key's native id too
	Staged     map[channel.WatermarkKey]channel.Seen // watermarks to move for Native
	Spend      []Spend                               // what the turn cost, for the budgets it counts toward
	// Run, when set, is the turn's run record as it ended: it rides the
	// turn's transaction, with the ended runs pruned to RunsBefore and
	// RunsKeep.
	Run        *RunRecord
	RunsBefore time.Time
	RunsKeep   int
	// Answered are the ended records of the runs the turn answered besides
	// its own (a coalesced list, mentions steered into it): they end in
	// its transaction, so no restart answers one of them again.
	Answered []RunRecord
}

// FinishTurn stores what a successful turn leaves behind in one
// transaction (one fsync pair, shared with concurrent turns): its exchange
// appended to the key's conversation (the oldest beyond Options.MaxTurns
// dropped), the key's native session id when it is new, the watermarks it
// staged moved for that native session, and its cost added to its budgets.
func (s *Store) FinishTurn(k session.Key, f Finish) error {
	if err := k.Check(); err != nil {
		return fmt.Errorf("store: finish turn: %w", err)
	}
	for i, t := range f.Turns {
		if !t.Role.Stored() {
			return fmt.Errorf("store: append turns to %q: turn %d: role must be %q or %q, got %q", k, i, session.RoleUser, session.RoleAssistant, t.Role)
		}
	}
	for wk := range f.Staged {
		if err := wk.Key.Check(); err != nil {
			return fmt.Errorf("store: commit watermark %q: %w", wk, err)
		}
	}
	if f.SaveNative && f.Native == "" {
		return fmt.Errorf("store: finish turn of %q: no native session id to save", k)
	}
	if f.Run != nil {
		if err := f.Run.check(); err != nil {
			return fmt.Errorf("store: finish turn of %q: %w", k, err)
		}
	}
	for _, r := range f.Answered {
		if err := r.check(); err != nil {
			return fmt.Errorf("store: finish turn of %q: %w", k, err)
		}
	}
	if len(f.Turns) == 0 && len(f.Staged) == 0 && !f.SaveNative && len(f.Spend) == 0 && f.Run == nil && len(f.Answered) == 0 {
		return nil
	}
	err := s.update(func(tx *bolt.Tx) error {
		if len(f.Turns) > 0 {
			if err := s.appendTurns(tx, k, f.Turns); err != nil {
				return fmt.Errorf("append turns to %q: %w", k, err)
			}
		}
		if f.SaveNative {
			if err := setNativeID(tx, k, f.Native); err != nil {
				return fmt.Errorf("save native session id of %q: %w", k, err)
			}
		}
		for wk, seen := range f.Staged {
			if _, err := s.commitWatermark(tx, wk, f.Native, seen); err != nil {
				return fmt.Errorf("commit watermark %q: %w", wk, err)
			}
		}
		if len(f.Spend) > 0 {
			if err := addSpend(tx, f.Spend); err != nil {
				return fmt.Errorf("add spending: %w", err)
			}
		}
		for i := range f.Answered {
			if err := putRun(tx, &f.Answered[i]); err != nil {
				return fmt.Errorf("record run %q: %w", f.Answered[i].ID, err)
			}
		}
		if f.Run != nil {
			if err := putRun(tx, f.Run); err != nil {
				return fmt.Errorf("record run %q: %w", f.Run.ID, err)
			}
			if _, err := pruneRuns(tx, f.RunsBefore, f.RunsKeep); err != nil {
				return fmt.Errorf("prune runs: %w", err)
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("store: finish turn of %q: %w", k, err)
	}
	return nil
}

func (s *Store) appendTurns(tx *bolt.Tx, k session.Key, turns []session.Turn) error {
	kb, err := bucketIn(tx.Bucket(bucketConversations), convName(k))
	if err != nil {
		return err
	}
	b, err := bucketIn(kb, keyTurns)
	if err != nil {
		return err
	}
	for i := range turns {
		seq, err := b.NextSequence()
		if err != nil {
			return err
		}
		v, err := marshalTurn(&turns[i])
		if err != nil {
			return err
		}
		if err := b.Put(u64(seq), v); err != nil {
			return err
		}
	}
	// Sequence keys are contiguous (only the oldest are ever deleted),
	// so the count is last - first + 1.
	c := b.Cursor()
	first, _ := c.First()
	last, _ := c.Last()
	n := binary.BigEndian.Uint64(last) - binary.BigEndian.Uint64(first) + 1
	for ; n > uint64(s.opts.MaxTurns); n-- {
		c.First()
		if err := c.Delete(); err != nil {
			return err
		}
	}
	return nil
}

// marshalTurn is json.Marshal(t), byte for byte, without Marshal's
// reflection and its copy of the result (two turns are stored on every
// turn); a time Marshal refuses goes to Marshal, for its error.
func marshalTurn(t *session.Turn) ([]byte, error) {
	if len(t.Answers) > 0 {
		return json.Marshal(t) // a turn that answered several mentions: rare
	}
	b := make([]byte, 0, 128+len(t.Role)+jsonenc.StringLen(t.Text)+len(t.MessageID)+jsonenc.StringLen(t.Facts))
	b = append(b, `{"role":`...)
	b = jsonenc.AppendString(b, string(t.Role))
	b = append(b, `,"text":`...)
	b = jsonenc.AppendString(b, t.Text)
	b = append(b, `,"at":`...)
	b, ok := jsonenc.AppendTime(b, t.At)
	if !ok {
		return json.Marshal(t)
	}
	if t.MessageID != "" {
		b = append(b, `,"message_id":`...)
		b = jsonenc.AppendString(b, t.MessageID)
	}
	if t.MessageSeq != 0 {
		b = append(b, `,"message_seq":`...)
		b = strconv.AppendUint(b, t.MessageSeq, 10)
	}
	if t.Facts != "" {
		b = append(b, `,"facts":`...)
		b = jsonenc.AppendString(b, t.Facts)
	}
	return append(b, '}'), nil
}

// NativeID returns the key's native ACP session id, "" when none is saved.
func (s *Store) NativeID(k session.Key) (string, error) {
	var native string
	err := s.view(func(tx *bolt.Tx) error {
		if kb := tx.Bucket(bucketConversations).Bucket(convName(k)); kb != nil {
			native = string(kb.Get(keyNative))
		}
		return nil
	})
	if err != nil {
		return "", fmt.Errorf("store: native id of %q: %w", k, err)
	}
	return native, nil
}

// SetNativeID saves the key's native ACP session id; "" clears it.
func (s *Store) SetNativeID(k session.Key, native string) error {
	if err := k.Check(); err != nil {
		return fmt.Errorf("store: set native id: %w", err)
	}
	err := s.update(func(tx *bolt.Tx) error { return setNativeID(tx, k, native) })
	if err != nil {
		return fmt.Errorf("store: set native id of %q: %w", k, err)
	}
	return nil
}

func setNativeID(tx *bolt.Tx, k session.Key, native string) error {
	convs := tx.Bucket(bucketConversations)
	name := convName(k)
	if native == "" {
		kb := convs.Bucket(name)
		if kb == nil {
			return nil
		}
		if kb.Bucket(keyTurns) == nil && kb.Get(keyAside) == nil {
			// Nothing else is kept for the key: drop it so Keys stops
			// listing it.
			return convs.DeleteBucket(name)
		}
		return kb.Delete(keyNative)
	}
	kb, err := convs.CreateBucketIfNotExists(name)
	if err != nil {
		return err
	}
	// A set-aside session that is the key's again is no longer aside.
	if err := dropAside(kb, native); err != nil {
		return err
	}
	return kb.Put(keyNative, []byte(native))
}

// Forget starts the key fresh: its conversation, native id and every
// watermark filed under its session key go, in one transaction.
func (s *Store) Forget(k session.Key) error {
	err := s.update(func(tx *bolt.Tx) error {
		convs := tx.Bucket(bucketConversations)
		name := convName(k)
		if convs.Bucket(name) != nil {
			if err := convs.DeleteBucket(name); err != nil {
				return err
			}
		}
		return deleteWatermarksOf(tx, k)
	})
	if err != nil {
		return fmt.Errorf("store: forget %q: %w", k, err)
	}
	return nil
}

// convName is key k's bucket name in the conversations bucket: (channel,
// binding), and the thread after them only for a thread key, so a
// channel's own key is stored as it always was.
func convName(k session.Key) []byte {
	if k.Thread == "" {
		return joinKey(k.Channel, k.Binding)
	}
	return joinKey(k.Channel, k.Binding, k.Thread)
}

// convKey decodes a convName.
func convKey(name []byte) (session.Key, error) {
	parts, rest, err := cutKey(name, 2)
	if err != nil {
		return session.Key{}, err
	}
	k := session.Key{Channel: parts[0], Binding: parts[1]}
	if len(rest) > 0 {
		th, err := splitKey(rest, 1)
		if err != nil {
			return session.Key{}, err
		}
		k.Thread = th[0]
	}
	return k, nil
}

// Keys lists every key with a saved conversation or native id.
func (s *Store) Keys() ([]session.Key, error) {
	var out []session.Key
	err := s.view(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketConversations).ForEachBucket(func(name []byte) error {
			k, err := convKey(name)
			if err != nil {
				return fmt.Errorf("conversation %x: %w", name, err)
			}
			out = append(out, k)
			return nil
		})
	})
	if err != nil {
		return nil, fmt.Errorf("store: list keys: %w", err)
	}
	return out, nil
}

// bucketIn opens parent's bucket name, creating it when it is missing.
// Opening first spares CreateBucketIfNotExists's copy of the name on every
// turn of a key that has its buckets.
func bucketIn(parent *bolt.Bucket, name []byte) (*bolt.Bucket, error) {
	if b := parent.Bucket(name); b != nil {
		return b, nil
	}
	return parent.CreateBucketIfNotExists(name)
}
