package store

import (
	"bytes"
	"encoding/json"
	"testing"

	bolt "go.etcd.io/bbolt"

	"github.com/residentd/residentd/internal/channel"
)

// An edit keeps the first version's arrival; two versions of one id in one
// push are one message, its last version, never marked edited.
func TestFirstArrivalAndOnePushOneMessage(t *testing.T) {
	s := openTest(t, Options{})
	put(t, s, msg("ch", "m1", 1, ""))
	e := msg("ch", "m1", 1, "")
	e.Body = "fixed"
	put(t, s, e)
	twice := msg("ch", "m2", 2, "")
	last := twice
	last.Body = "second thoughts"
	res, err := s.PutMessages([]channel.Message{twice, last})
	if err != nil || res != (PutResult{Added: 1, Edited: 1}) {
		t.Fatalf("one push, two versions: %+v, %v", res, err)
	}
	got, v := candidates(t, s, "ch", "", 0)
	if candIDs(got) != "[m1@2 m2@3]" {
		t.Fatalf("candidates %s", candIDs(got))
	}
	if c := got[0]; !c.Edited || c.First != 1 {
		t.Errorf("edited m1: %+v, want edited, first arrival 1", c)
	}
	if c := got[1]; c.Edited || c.First != 3 {
		t.Errorf("m2 pushed twice in one push: %+v, want one unedited message first arriving as 3", c)
	}
	for _, m := range v.Rows {
		if m.ID == "m2" && (m.Body != "second thoughts" || m.Edited || m.First != 3) {
			t.Errorf("m2 stored as %+v", m)
		}
	}
	// A later push of the same body is a duplicate, another body an edit.
	again := last
	again.Body = "third"
	if res, err := s.PutMessages([]channel.Message{last, again}); err != nil || res != (PutResult{Edited: 1, Duplicates: 1}) {
		t.Fatalf("later push: %+v, %v", res, err)
	}
	if got, _ := candidates(t, s, "ch", "", 3); candIDs(got) != "[m2@4]" || !got[0].Edited || got[0].First != 3 {
		t.Fatalf("after a later edit: %s %+v", candIDs(got), got)
	}
	if err := s.Check(); err != nil {
		t.Fatal(err)
	}
}

// legacyArrival is an arrivals value as schema versions 3 and 4 wrote it:
// flags, author and binding, msgs key; no first arrival.
func legacyArrival(m channel.Message, mk []byte) []byte {
	v := arrival(m, mk)
	return append(v[:1:1], v[9:]...) // today's without the 8 bytes of First
}

func TestMigrationV5FirstArrivals(t *testing.T) {
	s := openFrom(t, 4, func(tx *bolt.Tx) error {
		cb, err := createChannel(tx, "ch")
		if err != nil {
			return err
		}
		edited := msg("ch", "m2", 2, "")
		edited.Body, edited.Edited = "fixed", true
		agent := msg("ch", "m3", 3, "")
		agent.Author, agent.AuthorKind, agent.BindingID = "@agent", channel.KindAgent, "b-x"
		for i, m := range []channel.Message{msg("ch", "m1", 1, ""), agent, edited} {
			m.Seq = uint64(i + 1)
			mk := msgKey(m.CreatedAt, m.ID)
			v, _ := json.Marshal(m)
			if bytes.Contains(v, []byte("first_seq")) {
				t.Fatalf("a version-4 message carries first_seq: %s", v)
			}
			for _, put := range []struct {
				b    *bolt.Bucket
				k, v []byte
			}{
				{cb.msgs, mk, v},
				{cb.ids, []byte(m.ID), append(u64(m.Seq), mk...)},
				{cb.timeline, append(joinKey(""), mk...), nil},
				{cb.arrivals, arrivalKey(m), legacyArrival(m, mk)},
			} {
				if err := put.b.Put(put.k, put.v); err != nil {
					return err
				}
			}
			if _, err := cb.nextSeq(); err != nil {
				return err
			}
		}
		if err := cb.addTimelineCount("", 3); err != nil {
			return err
		}
		return cb.setCount(3)
	})
	if v := versionOf(t, s.db); v != SchemaVersion {
		t.Fatalf("version %d after open, want %d", v, SchemaVersion)
	}
	got, v := candidates(t, s, "ch", "", 0)
	if candIDs(got) != "[m1@1 m3@2 m2@3]" {
		t.Fatalf("candidates after the migration: %s", candIDs(got))
	}
	want := map[string]channel.Candidate{
		"m1": {ID: "m1", Seq: 1, First: 1, Author: "ann"},
		"m3": {ID: "m3", Seq: 2, First: 2, Author: "@agent", Binding: "b-x", Agent: true},
		// Edited before the migration: its first arrival was not kept.
		"m2": {ID: "m2", Seq: 3, First: 1, Author: "ann", Edited: true},
	}
	for _, c := range got {
		w := want[c.ID]
		w.At = c.At
		if c != w {
			t.Errorf("candidate %+v, want %+v", c, w)
		}
	}
	for _, m := range v.Rows {
		if m.First != want[m.ID].First {
			t.Errorf("stored %s has first_seq %d, want %d", m.ID, m.First, want[m.ID].First)
		}
	}
	// An edit after the migration keeps the first arrival; a new message
	// numbers on.
	e := msg("ch", "m1", 1, "")
	e.Body = "changed"
	put(t, s, e, msg("ch", "m4", 4, ""))
	if got, _ := candidates(t, s, "ch", "", 3); candIDs(got) != "[m1@4 m4@5]" || got[0].First != 1 || got[1].First != 5 {
		t.Fatalf("after the migration: %s %+v", candIDs(got), got)
	}
	if err := s.Check(); err != nil {
		t.Fatal(err)
	}
}
