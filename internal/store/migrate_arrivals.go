package store

import (
	"bytes"
	"cmp"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/residentd/residentd/internal/channel"
	"github.com/residentd/residentd/internal/delivery"
	"github.com/residentd/residentd/internal/session"
)

// legacyWatermark is a watermark as schema version 2 wrote it: every row at
// or before LastAt was seen, and the listed ids.
type legacyWatermark struct {
	Native string    `json:"native"`
	LastAt time.Time `json:"last_at"`
	IDs    []string  `json:"ids"`
}

// arrived is one message as the migration numbers it.
type arrived struct {
	id  string
	seq uint64
	at  time.Time
}

// migrateArrivals (version 3) numbers every stored message in arrival
// order, which for old files is (created_at, id) order, and indexes it by
// arrival; turns each watermark's created_at rule into the arrival number
// that hides exactly the messages the old rule hid; and keeps each stored
// user turn in its compact form (intro and payload, no brief, no block).
func migrateArrivals(tx *bolt.Tx) error {
	timelines := map[string]map[string][]arrived{} // channel -> thread -> messages by seq
	roots := map[string]map[string]arrived{}       // channel -> id -> message, for thread roots
	err := tx.Bucket(bucketChannels).ForEachBucket(func(name []byte) error {
		ch := string(name)
		cb, err := ensureChannelBuckets(tx.Bucket(bucketChannels).Bucket(name))
		if err != nil {
			return fmt.Errorf("channel %q: %w", ch, err)
		}
		tl := map[string][]arrived{}
		byID := map[string]arrived{}
		var mks [][]byte
		if err := cb.msgs.ForEach(func(k, _ []byte) error {
			mks = append(mks, bytes.Clone(k))
			return nil
		}); err != nil {
			return err
		}
		for _, mk := range mks {
			m, err := cb.message(mk)
			if err != nil {
				return fmt.Errorf("channel %q: %w", ch, err)
			}
			if m.Seq, err = cb.nextSeq(); err != nil {
				return err
			}
			if err := cb.write(m, mk); err != nil {
				return fmt.Errorf("channel %q message %q: %w", ch, m.ID, err)
			}
			if err := cb.addTimelineCount(timelineOf(m), 1); err != nil {
				return err
			}
			a := arrived{id: m.ID, seq: m.Seq, at: m.CreatedAt}
			tl[timelineOf(m)] = append(tl[timelineOf(m)], a)
			byID[m.ID] = a
		}
		timelines[ch], roots[ch] = tl, byID
		return nil
	})
	if err != nil {
		return fmt.Errorf("number messages: %w", err)
	}

	wb := tx.Bucket(bucketWatermarks)
	type update struct{ k, v []byte }
	var updates []update
	err = wb.ForEach(func(k, v []byte) error {
		parts, err := splitKey(k, 3)
		if err != nil {
			return fmt.Errorf("watermark key %x: %w", k, err)
		}
		ch, thread := parts[1], parts[2]
		var old legacyWatermark
		if err := json.Unmarshal(v, &old); err != nil {
			return fmt.Errorf("watermark %q: %w", parts[0], err)
		}
		msgs := slices.Clone(timelines[ch][thread])
		if r, ok := roots[ch][thread]; ok && thread != "" {
			msgs = append(msgs, r)
			slices.SortFunc(msgs, func(a, b arrived) int { return cmp.Compare(a.seq, b.seq) })
		}
		nv, err := json.Marshal(convertWatermark(old, msgs))
		if err != nil {
			return err
		}
		updates = append(updates, update{bytes.Clone(k), nv})
		return nil
	})
	if err != nil {
		return fmt.Errorf("convert watermarks: %w", err)
	}
	for _, u := range updates {
		if err := wb.Put(u.k, u.v); err != nil {
			return err
		}
	}
	return compactConversations(tx)
}

// convertWatermark finds the arrival number below which the old rule hid
// every message of the timeline (msgs, in arrival order); messages the old
// rule hid beyond that stay hidden as marks.
func convertWatermark(old legacyWatermark, msgs []arrived) channel.Watermark {
	seen := func(a arrived) bool { return !a.at.After(old.LastAt) || slices.Contains(old.IDs, a.id) }
	w := channel.Watermark{Native: old.Native}
	i := 0
	for ; i < len(msgs) && seen(msgs[i]); i++ {
		w.Seq = msgs[i].seq
	}
	for _, a := range msgs[i:] {
		if seen(a) {
			w.Marks = append(w.Marks, channel.Mark{ID: a.id, Seq: a.seq})
		}
	}
	return w
}

// compactConversations rewrites stored user turns to their compact form.
func compactConversations(tx *bolt.Tx) error {
	convs := tx.Bucket(bucketConversations)
	return convs.ForEachBucket(func(name []byte) error {
		return rewriteUserTurns(convs.Bucket(name).Bucket(keyTurns), func(t *session.Turn) bool {
			text, id, ok := compactTurn(t.Text)
			if ok {
				t.Text, t.MessageID = text, id
			}
			return ok
		})
	})
}

// compactTurn cuts a version-2 stored user turn (intro, payload, "---",
// brief, block) down to intro and payload, and reads the payload's
// message id.
func compactTurn(text string) (string, string, bool) {
	rest, ok := strings.CutPrefix(text, delivery.Intro+"\n")
	if !ok {
		return "", "", false
	}
	payload, _, _ := strings.Cut(rest, "\n")
	var p struct {
		MessageID string `json:"message_id"`
	}
	if json.Unmarshal([]byte(payload), &p) != nil {
		return "", "", false
	}
	return delivery.Intro + "\n" + payload, p.MessageID, true
}
