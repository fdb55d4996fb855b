package store

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/residentd/residentd/internal/channel"
	"github.com/residentd/residentd/internal/delivery"
	"github.com/residentd/residentd/internal/session"
)

// candidates returns what Unseen offers after seq after, and picks all.
func candidates(t *testing.T, s *Store, ch, thread string, after uint64) ([]channel.Candidate, channel.View) {
	t.Helper()
	var got []channel.Candidate
	v, err := s.Unseen(ch, thread, after, nil, nil, func(c []channel.Candidate) []int {
		got = c
		idx := make([]int, len(c))
		for i := range idx {
			idx[i] = i
		}
		return idx
	})
	if err != nil {
		t.Fatal(err)
	}
	return got, v
}

func candIDs(cs []channel.Candidate) string {
	var out []string
	for _, c := range cs {
		out = append(out, fmt.Sprintf("%s@%d", c.ID, c.Seq))
	}
	return fmt.Sprint(out)
}

// Arrival order, not created_at, decides what is new: a tie and a late
// message with an older created_at are both after the watermark.
func TestUnseenByArrival(t *testing.T) {
	s := openTest(t, Options{})
	put(t, s, msg("ch", "x1", 10, ""), msg("ch", "xm", 10, ""))
	put(t, s, msg("ch", "x2", 10, ""), msg("ch", "x3", 11, ""), msg("ch", "late", 1, ""))
	got, v := candidates(t, s, "ch", "", 2)
	if candIDs(got) != "[x2@3 x3@4 late@5]" || v.Seq != 5 || v.Total != 5 || v.Candidates != 3 {
		t.Fatalf("after 2: %s, view %+v", candIDs(got), v)
	}
	// Rows come back in display order, (created_at, id).
	if fmt.Sprint(ids(v.Rows)) != "[late x2 x3]" {
		t.Fatalf("rows %v", ids(v.Rows))
	}
	if !got[2].At.Equal(t0.Add(time.Second)) || got[0].Author != "ann" {
		t.Fatalf("candidate fields: %+v", got[2])
	}
	// Only what pick chose is decoded.
	v, err := s.Unseen("ch", "", 0, nil, []string{"x1", "q-not-pushed"}, func(c []channel.Candidate) []int { return []int{1} })
	if err != nil || fmt.Sprint(ids(v.Rows)) != "[xm]" || fmt.Sprint(v.Known) != "[{x1 1  ann} {q-not-pushed 0  }]" {
		t.Fatalf("pick one: %v %v known %v", ids(v.Rows), err, v.Known)
	}
	// An unknown channel: nothing, and every known id missing.
	v, err = s.Unseen("nope", "", 0, nil, []string{"a"}, func(c []channel.Candidate) []int { return nil })
	if err != nil || v.Seq != 0 || len(v.Rows) != 0 || fmt.Sprint(v.Known) != "[{a 0  }]" {
		t.Fatalf("unknown channel: %+v %v", v, err)
	}
}

func TestUnseenThread(t *testing.T) {
	s := openTest(t, Options{})
	put(t, s, msg("ch", "r1", 1, ""), msg("ch", "m2", 2, ""), msg("ch", "t1", 3, "r1"), msg("ch", "t2", 4, "r1"))
	// The root is always a candidate of its thread (Select decides whether
	// the session saw it); the main timeline's messages are not.
	got, v := candidates(t, s, "ch", "r1", 3)
	if candIDs(got) != "[r1@1 t2@4]" || v.Total != 3 {
		t.Fatalf("thread after 3: %s total %d", candIDs(got), v.Total)
	}
	if got, _ := candidates(t, s, "ch", "", 0); candIDs(got) != "[r1@1 m2@2]" {
		t.Fatalf("main: %s", candIDs(got))
	}
	for _, tt := range []struct {
		root string
		want bool
	}{{"r1", true}, {"m2", true}, {"orphan", false}} {
		if got, err := s.ThreadKnown("ch", tt.root); got != tt.want || err != nil {
			t.Errorf("ThreadKnown(%q) = %v, %v", tt.root, got, err)
		}
	}
	// Replies whose root was never pushed (or was trimmed) still make a thread.
	put(t, s, msg("ch", "u1", 5, "gone-root"))
	if got, _ := s.ThreadKnown("ch", "gone-root"); !got {
		t.Error("a thread with replies but no root is unknown")
	}
	if got, _ := s.ThreadKnown("other", "r1"); got {
		t.Error("thread known in a channel that does not hold it")
	}
}

func TestEditGetsNewArrival(t *testing.T) {
	s := openTest(t, Options{})
	put(t, s, msg("ch", "m1", 1, ""), msg("ch", "m2", 2, ""))
	e := msg("ch", "m1", 9, "")
	e.Body = "fixed"
	if res, err := s.PutMessages([]channel.Message{e, msg("ch", "m2", 2, "")}); err != nil || res != (PutResult{Edited: 1, Duplicates: 1}) {
		t.Fatalf("edit push = %+v, %v", res, err)
	}
	got, v := candidates(t, s, "ch", "", 2)
	if candIDs(got) != "[m1@3]" || !got[0].Edited || v.Rows[0].Body != "fixed" || !v.Rows[0].Edited {
		t.Fatalf("after edit: %s %+v", candIDs(got), v.Rows)
	}
	// The old arrival is gone from the index, the count unchanged.
	if got, v := candidates(t, s, "ch", "", 0); candIDs(got) != "[m2@2 m1@3]" || v.Total != 2 {
		t.Fatalf("all: %s total %d", candIDs(got), v.Total)
	}
	if err := s.Check(); err != nil {
		t.Fatal(err)
	}
}

func TestDeleteMessage(t *testing.T) {
	s := openTest(t, Options{})
	put(t, s, msg("ch", "m1", 1, ""), msg("ch", "r1", 2, ""), msg("ch", "t1", 3, "r1"))
	if err := s.DeleteMessage("ch", "m1"); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteMessage("ch", "t1"); err != nil {
		t.Fatal(err)
	}
	for _, bad := range [][2]string{{"ch", "m1"}, {"ch", "never"}, {"no-channel", "m1"}} {
		if err := s.DeleteMessage(bad[0], bad[1]); !errors.Is(err, ErrNotFound) {
			t.Errorf("delete %v: %v, want ErrNotFound", bad, err)
		}
	}
	if got, v := candidates(t, s, "ch", "", 0); candIDs(got) != "[r1@2]" || v.Total != 1 {
		t.Fatalf("after delete: %s total %d", candIDs(got), v.Total)
	}
	hist, _, _ := s.History("ch", "", "", 10)
	thread, _, _ := s.History("ch", "r1", "", 10)
	if fmt.Sprint(ids(hist)) != "[r1]" || fmt.Sprint(ids(thread)) != "[r1]" {
		t.Fatalf("history %v thread %v", ids(hist), ids(thread))
	}
	// A deleted id stays deleted: a late push of it is a duplicate.
	if res, _ := s.PutMessages([]channel.Message{msg("ch", "m1", 1, "")}); res != (PutResult{Duplicates: 1}) {
		t.Fatalf("re-push of a deleted id: %+v", res)
	}
	if ok, _ := s.HasMessage("ch", "m1"); ok {
		t.Fatal("deleted message came back")
	}
	if err := s.Check(); err != nil {
		t.Fatal(err)
	}
}

func TestRetentionDropsArrivals(t *testing.T) {
	s := openTest(t, Options{MaxChannelMessages: 2})
	put(t, s, msg("ch", "m1", 1, ""), msg("ch", "m2", 2, ""), msg("ch", "m3", 3, ""))
	if got, v := candidates(t, s, "ch", "", 0); candIDs(got) != "[m2@2 m3@3]" || v.Total != 2 {
		t.Fatalf("after trim: %s total %d", candIDs(got), v.Total)
	}
}

// A version-2 file: messages without arrival numbers, watermarks by
// created_at, full user turns. Version 3 must hide exactly what version 2
// hid, and compact the turns.
func TestMigrationV3FromV2(t *testing.T) {
	k := session.Key{Channel: "ch", Binding: "b"}
	payload := delivery.Payload{ChannelID: "ch", MessageID: "q1", Text: "@agent why?"}
	full := delivery.UserTurn(payload, delivery.DefaultBrief, delivery.HeaderNew+"\n- [user] ann: old line")
	s := openFrom(t, 2, func(tx *bolt.Tx) error {
		chb, err := tx.Bucket(bucketChannels).CreateBucket([]byte("ch"))
		if err != nil {
			return err
		}
		msgs, _ := chb.CreateBucket(keyMsgs)
		idx, _ := chb.CreateBucket(keyIDs)
		tl, _ := chb.CreateBucket(keyTimeline)
		// m3 and m4 tie with m2 on created_at; r1 is a thread root, t1 its reply.
		for _, m := range []channel.Message{msg("ch", "m1", 1, ""), msg("ch", "m2", 2, ""), msg("ch", "m3", 2, ""), msg("ch", "m4", 3, ""), msg("ch", "r1", 4, ""), msg("ch", "t1", 5, "r1")} {
			v, _ := json.Marshal(m)
			mk := msgKey(m.CreatedAt, m.ID)
			if err := msgs.Put(mk, v); err != nil {
				return err
			}
			if err := idx.Put([]byte(m.ID), mk); err != nil {
				return err
			}
			if err := tl.Put(append(joinKey(timelineOf(m)), mk...), nil); err != nil {
				return err
			}
		}
		if err := chb.Put(keyCount, u64(6)); err != nil {
			return err
		}
		wms := map[string]legacyWatermark{
			"":   {Native: "n1", LastAt: t0.Add(2 * time.Second), IDs: []string{"m1", "m2", "m3"}},
			"r1": {Native: "n1", LastAt: t0.Add(4 * time.Second), IDs: []string{"r1"}},
		}
		for thread, w := range wms {
			v, _ := json.Marshal(w)
			if err := tx.Bucket(bucketWatermarks).Put(watermarkKey(channel.WatermarkKey{Key: k, Thread: thread}), v); err != nil {
				return err
			}
		}
		kb, _ := tx.Bucket(bucketConversations).CreateBucket(joinKey(k.Channel, k.Binding))
		turns, _ := kb.CreateBucket(keyTurns)
		for i, turn := range []session.Turn{{Role: session.RoleUser, Text: full, At: t0}, {Role: session.RoleAssistant, Text: "because", At: t0}} {
			v, _ := json.Marshal(turn)
			if err := turns.Put(u64(uint64(i+1)), v); err != nil {
				return err
			}
		}
		return nil
	})
	main, _, _ := s.Watermark(channel.WatermarkKey{Key: k})
	thread, _, _ := s.Watermark(channel.WatermarkKey{Key: k, Thread: "r1"})
	// Arrival follows (created_at, id): m1 1, m2 2, m3 3, m4 4, r1 5, t1 6.
	if main.Native != "n1" || main.Seq != 3 || len(channel.MarkIDs(main.Marks)) != 0 {
		t.Errorf("main watermark = %+v, want seq 3 (m1..m3 seen, m4 not)", main)
	}
	if thread.Seq != 5 || len(channel.MarkIDs(thread.Marks)) != 0 {
		t.Errorf("thread watermark = %+v, want seq 5 (the root seen, t1 not)", thread)
	}
	got, _ := candidates(t, s, "ch", "", main.Seq)
	if candIDs(got) != "[m4@4 r1@5]" {
		t.Errorf("unseen after migration: %s", candIDs(got))
	}
	conv, err := s.Conversation(k)
	if err != nil || len(conv) != 2 {
		t.Fatalf("conversation %v, %v", conv, err)
	}
	if conv[0].Text != delivery.StoredTurn(payload) || conv[0].MessageID != "q1" || conv[1].Text != "because" {
		t.Errorf("turns after migration: %+v", conv)
	}
	// New pushes continue the numbering.
	put(t, s, msg("ch", "m9", 0, ""))
	if got, _ := candidates(t, s, "ch", "", 6); candIDs(got) != "[m9@7]" {
		t.Errorf("after a new push: %s", candIDs(got))
	}
	if err := s.Check(); err != nil {
		t.Fatal(err)
	}
}

func TestConvertWatermarkKeepsStragglers(t *testing.T) {
	msgs := []arrived{{"a", 1, t0}, {"b", 2, t0.Add(time.Second)}, {"c", 3, t0.Add(2 * time.Second)}}
	w := convertWatermark(legacyWatermark{Native: "n", LastAt: t0, IDs: []string{"c"}}, msgs)
	if w.Seq != 1 || !slices.Equal(channel.MarkIDs(w.Marks), []string{"c"}) {
		t.Fatalf("convert = %+v, want seq 1 and c kept hidden", w)
	}
}

// A thread whose root is itself a reply in another thread reads fine.
func TestUnseenNestedThreadRoot(t *testing.T) {
	s := openTest(t, Options{})
	put(t, s, msg("ch", "r", 1, ""), msg("ch", "x", 2, "r"), msg("ch", "y", 3, "x"))
	if ok, err := s.ThreadKnown("ch", "x"); !ok || err != nil {
		t.Fatalf("ThreadKnown x: %v %v", ok, err)
	}
	got, _ := candidates(t, s, "ch", "x", 0)
	if candIDs(got) != "[x@2 y@3]" {
		t.Fatalf("thread x: %s", candIDs(got))
	}
}

// A message retention dropped is not taken back by a backfill: sessions
// that saw it would get it again as news.
func TestTrimmedRepushIsNotNews(t *testing.T) {
	s := openTest(t, Options{MaxChannelMessages: 3})
	put(t, s, msg("ch", "m1", 1, ""), msg("ch", "m2", 2, ""), msg("ch", "m3", 3, ""))
	put(t, s, msg("ch", "m4", 4, "")) // m1 is trimmed
	_, v := candidates(t, s, "ch", "", 0)
	if err := s.DeleteMessage("ch", "m4"); err != nil {
		t.Fatal(err)
	}
	res, err := s.PutMessages([]channel.Message{msg("ch", "m1", 1, ""), msg("ch", "m0", 0, ""), msg("ch", "m5", 5, "")})
	if err != nil || res != (PutResult{Added: 1, Duplicates: 2}) {
		t.Fatalf("backfill past retention: %+v %v", res, err)
	}
	if got, _ := candidates(t, s, "ch", "", v.Seq); candIDs(got) != "[m5@5]" {
		t.Fatalf("after the backfill: %s", candIDs(got))
	}
}

// Deleting a message blanks the stored user turns that answered it.
func TestDeleteRedactsTheConversation(t *testing.T) {
	s := openTest(t, Options{})
	k := session.Key{Channel: "ch", Binding: "b"}
	other := session.Key{Channel: "ch2", Binding: "b"}
	put(t, s, msg("ch", "q1", 1, ""))
	for _, key := range []session.Key{k, other} {
		if err := s.AppendTurns(key, session.Turn{Role: session.RoleUser, Text: "the password is hunter2", MessageID: "q1", At: t0}, session.Turn{Role: session.RoleAssistant, Text: "noted", At: t0}); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.DeleteMessage("ch", "q1"); err != nil {
		t.Fatal(err)
	}
	conv, _ := s.Conversation(k)
	if len(conv) != 2 || conv[0].Text != deletedTurn || conv[0].MessageID != "q1" || conv[1].Text != "noted" {
		t.Fatalf("conversation after delete: %+v", conv)
	}
	// Another channel's conversation is not this message's.
	if conv, _ := s.Conversation(other); conv[0].Text != "the password is hunter2" {
		t.Fatalf("another channel's turn was redacted: %+v", conv)
	}
}

// A watermark's holes are candidates again whatever their arrival, in
// their own timeline only, and never twice.
func TestUnseenOffersHoles(t *testing.T) {
	s := openTest(t, Options{})
	put(t, s, msg("ch", "r1", 1, ""), msg("ch", "h1", 2, ""), msg("ch", "t1", 3, "r1"), msg("ch", "m4", 4, ""), msg("ch", "h5", 5, ""))
	offered := func(thread string, after uint64, also ...string) string {
		t.Helper()
		var got []channel.Candidate
		if _, err := s.Unseen("ch", thread, after, also, nil, func(c []channel.Candidate) []int { got = c; return nil }); err != nil {
			t.Fatal(err)
		}
		return candIDs(got)
	}
	for _, tt := range []struct {
		thread string
		after  uint64
		also   []string
		want   string
	}{
		{"", 4, []string{"h1"}, "[h1@2 h5@5]"},
		{"", 4, []string{"h5"}, "[h5@5]"},              // after the prefix: the scan has it once
		{"", 4, []string{"t1", "gone"}, "[h5@5]"},      // another timeline's, or not held
		{"r1", 3, []string{"t1", "h1"}, "[r1@1 t1@3]"}, // the thread's own hole beside its root
		{"r1", 3, []string{"r1"}, "[r1@1]"},            // the root is offered once
	} {
		if got := offered(tt.thread, tt.after, tt.also...); got != tt.want {
			t.Errorf("thread %q after %d also %v: %s, want %s", tt.thread, tt.after, tt.also, got, tt.want)
		}
	}
}
