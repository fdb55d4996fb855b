package store

import (
	"bytes"
	"encoding/json"
	"path/filepath"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/residentd/residentd/internal/channel"
	"github.com/residentd/residentd/internal/session"
)

// A version-5 file keeps its data and gains the run records.
func TestMigrationV7Runs(t *testing.T) {
	k := session.Key{Channel: "ch", Binding: "b"}
	s := openFrom(t, 5, func(tx *bolt.Tx) error {
		if tx.Bucket(bucketRuns) != nil {
			t.Error("a version-5 file has the runs bucket")
		}
		return setNativeID(tx, k, "n1")
	})
	if v := versionOf(t, s.db); v != SchemaVersion || SchemaVersion != 7 {
		t.Fatalf("version = %d, want %d", v, SchemaVersion)
	}
	if n, _ := s.NativeID(k); n != "n1" {
		t.Fatalf("native id %q after the migration", n)
	}
	if err := s.PutRun(RunRecord{ID: "run-1", Request: json.RawMessage(`{"channel_id":"ch"}`), Created: time.Now()}); err != nil {
		t.Fatal(err)
	}
	if r, ok, err := s.Run("run-1"); err != nil || !ok || string(r.Request) != `{"channel_id":"ch"}` {
		t.Fatalf("run after the migration: %+v %v %v", r, ok, err)
	}
}

// Run records: replaced as the run moves on, ended ones pruned by age and
// count (oldest first), unended ones never; an end rides the turn's
// transaction.
func TestRunRecords(t *testing.T) {
	s, err := Open(filepath.Join(t.TempDir(), "r.db"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	t0 := time.Date(2026, 12, 4, 9, 0, 0, 0, time.UTC)
	rec := RunRecord{ID: "run-a", Request: json.RawMessage(`{}`), Created: t0}
	if err := s.PutRun(rec); err != nil {
		t.Fatal(err)
	}
	rec.Attempt, rec.Running, rec.Events = 1, true, []json.RawMessage{json.RawMessage(`{"event":"started","seq":1}`)}
	if err := s.PutRun(rec); err != nil {
		t.Fatal(err)
	}
	got, ok, err := s.Run("run-a")
	if err != nil || !ok || got.Attempt != 1 || !got.Running || len(got.Events) != 1 || !got.Ended.IsZero() {
		t.Fatalf("run-a: %+v %v %v", got, ok, err)
	}
	if _, ok, _ := s.Run("run-none"); ok {
		t.Fatal("found a run never recorded")
	}
	if err := s.PutRun(RunRecord{}); err == nil {
		t.Fatal("a record without an id was stored")
	}
	// Three ended runs, one a minute; run-a still runs.
	for i, id := range []string{"run-1", "run-2", "run-3"} {
		rec := RunRecord{ID: id, Request: json.RawMessage(`{}`), Created: t0, Attempt: 1, Ended: t0.Add(time.Duration(i) * time.Minute)}
		if err := s.FinishTurn(session.Key{Channel: "ch", Binding: "b"}, Finish{Run: &rec, RunsBefore: t0.Add(-time.Hour), RunsKeep: 10}); err != nil {
			t.Fatal(err)
		}
	}
	// The end of a turn, in its own transaction.
	k := session.Key{Channel: "ch", Binding: "b"}
	before := s.Commits()
	if err := s.FinishTurn(k, Finish{Native: "n1", Staged: map[channel.WatermarkKey]channel.Seen{{Key: k}: {Seq: 1}},
		Run: &RunRecord{ID: "run-4", Request: json.RawMessage(`{}`), Created: t0, Attempt: 1, Ended: t0.Add(3 * time.Minute)}, RunsBefore: t0.Add(-time.Hour), RunsKeep: 10}); err != nil {
		t.Fatal(err)
	}
	if n := s.Commits() - before; n != 1 {
		t.Fatalf("FinishTurn with its run: %d commits", n)
	}
	ids := func() []string {
		runs, err := s.Runs()
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, r := range runs {
			out = append(out, r.ID)
		}
		return out
	}
	if got := ids(); len(got) != 5 {
		t.Fatalf("runs %v", got)
	}
	// By count: two ended kept, the newest.
	if n, err := s.PruneRuns(t0.Add(-time.Hour), 2); err != nil || n != 2 {
		t.Fatalf("prune by count: %d %v", n, err)
	}
	if got := ids(); len(got) != 3 || got[0] != "run-3" || got[1] != "run-4" || got[2] != "run-a" {
		t.Fatalf("after pruning by count: %v", got)
	}
	// By age: ended before 09:03 go; the running one stays.
	if n, err := s.PruneRuns(t0.Add(3*time.Minute), 10); err != nil || n != 1 {
		t.Fatalf("prune by age: %d %v", n, err)
	}
	if got := ids(); len(got) != 2 || got[0] != "run-4" || got[1] != "run-a" {
		t.Fatalf("after pruning by age: %v", got)
	}
}

// TestMarshalRunAsMarshal: a run record is written as json.Marshal writes
// it, byte for byte, and refused where Marshal refuses it.
func TestMarshalRunAsMarshal(t *testing.T) {
	at := time.Date(2026, 3, 4, 5, 6, 7, 890, time.FixedZone("cet", 3600))
	ev := json.RawMessage(`{"event":"update","run_id":"r1","seq":2,"at":"2026-03-04T05:06:07Z","update":{"kind":"agent_message_chunk","text":"a \"quoted\" — reply\n"}}`)
	for i, r := range []RunRecord{
		{ID: "r1", Request: json.RawMessage(`{"channel_id":"ch","text":"hi"}`), Created: at},
		{ID: "r1", Request: json.RawMessage(`{"channel_id":"ch"}`), Created: at, Seq: 18446744073709551615, Attempt: 1, Running: true},
		{ID: "r1", Request: json.RawMessage(`{"channel_id":"ch"}`), Created: at, Attempt: 2, Running: true, Events: []json.RawMessage{ev, ev}},
		{ID: "r\"<1>\xff", Request: json.RawMessage(`{}`), Created: at.UTC(), Attempt: 1, Events: []json.RawMessage{ev}, Ended: at.Add(time.Second)},
		{ID: "r1", Request: json.RawMessage(`{"text":"<b>"}`), Created: at},
		{ID: "r1", Request: json.RawMessage(`{"text": "spaced"}`), Created: at},
		{ID: "r1", Request: json.RawMessage(`{}`), Created: at, Events: []json.RawMessage{json.RawMessage(`{"text":"a & b"}`)}},
		{ID: "r1", Created: at},
		{ID: "r1", Request: json.RawMessage(`{}`), Events: []json.RawMessage{nil}},
		{ID: "r1", Request: json.RawMessage(`{"broken":`), Created: at},
		{ID: "r1", Request: json.RawMessage(`{}`), Created: time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC)},
		{ID: "r1", Request: json.RawMessage(`{}`), Created: at, Ended: time.Date(-5, 1, 1, 0, 0, 0, 0, time.UTC)},
	} {
		want, werr := json.Marshal(&r)
		got, gerr := marshalRun(&r)
		if (gerr == nil) != (werr == nil) || !bytes.Equal(got, want) {
			t.Errorf("record %d:\n got %s (%v)\nwant %s (%v)", i, got, gerr, want, werr)
		}
	}
}

// TestMarshalTurnAsMarshal: a stored turn is written as json.Marshal
// writes it, byte for byte, and refused where Marshal refuses it.
func TestMarshalTurnAsMarshal(t *testing.T) {
	at := time.Date(2026, 3, 4, 5, 6, 7, 890, time.FixedZone("cet", 3600))
	for i, tu := range []session.Turn{
		{Role: session.RoleUser, Text: "hi", At: at},
		{Role: session.RoleUser, Text: "{\"channel\":\"<ch>\"}\n\t— a & b \u2028 \xff", At: at.UTC(), MessageID: "m\"1", MessageSeq: 42, Facts: `{"project":"x"}`},
		{Role: session.RoleAssistant, Text: "", At: time.Time{}},
		{Role: session.RoleUser, Text: "listed", At: at, MessageID: "m1", Answers: []string{"m2", "m3"}},
		{Role: session.RoleAssistant, Text: "x", At: time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC)},
	} {
		want, werr := json.Marshal(&tu)
		got, gerr := marshalTurn(&tu)
		if (gerr == nil) != (werr == nil) || !bytes.Equal(got, want) {
			t.Errorf("turn %d:\n got %s (%v)\nwant %s (%v)", i, got, gerr, want, werr)
		}
	}
}
