package store

import (
	"reflect"
	"testing"
	"time"

	"github.com/residentd/residentd/internal/channel"
	"github.com/residentd/residentd/internal/session"
)

// TestReadingAsStore: a Reading answers as the Store's own reads do, each
// in a transaction of its own, for a key and thread with and without
// records.
func TestReadingAsStore(t *testing.T) {
	s := openTest(t, Options{})
	put(t, s, msg("ch", "r1", 1, ""), msg("ch", "m2", 2, ""), msg("ch", "t1", 3, "r1"), msg("ch", "t2", 4, "r1"))
	k := session.Key{Channel: "ch", Binding: "b"}
	if err := s.FinishTurn(k, Finish{Native: "n1", Turns: []session.Turn{{Role: session.RoleUser, Text: "hi", At: time.Unix(1, 0).UTC()}},
		Staged: map[channel.WatermarkKey]channel.Seen{{Key: k}: {Seq: 2}, {Key: k, Thread: "r1"}: {Seq: 3}}}); err != nil {
		t.Fatal(err)
	}
	pickAll := func(c []channel.Candidate) []int {
		idx := make([]int, len(c))
		for i := range idx {
			idx[i] = i
		}
		return idx
	}
	for _, c := range []struct {
		k      session.Key
		ch, th string
		after  uint64
	}{
		{k, "ch", "", 0}, {k, "ch", "r1", 3}, {session.Key{Channel: "ch", Binding: "other"}, "ch", "", 2}, {session.Key{Channel: "nope", Binding: "b"}, "nope", "", 0},
	} {
		wm, main, err := s.Seen(c.k, c.th)
		conv, cerr := s.Conversation(c.k)
		v, verr := s.Unseen(c.ch, c.th, c.after, nil, []string{"m2", "gone"}, pickAll)
		rerr := s.Read(func(r *Reading) error {
			rwm, rmain, err2 := r.Seen(c.k, c.th)
			rconv, rcerr := r.Conversation(c.k)
			rv, rverr := r.Unseen(c.ch, c.th, c.after, nil, []string{"m2", "gone"}, pickAll)
			if !reflect.DeepEqual(rwm, wm) || !reflect.DeepEqual(rmain, main) || (err2 == nil) != (err == nil) {
				t.Errorf("%+v: Seen %v %v %v, Store %v %v %v", c, rwm, rmain, err2, wm, main, err)
			}
			if !reflect.DeepEqual(rconv, conv) || (rcerr == nil) != (cerr == nil) {
				t.Errorf("%+v: Conversation %v %v, Store %v %v", c, rconv, rcerr, conv, cerr)
			}
			if !reflect.DeepEqual(rv, v) || (rverr == nil) != (verr == nil) {
				t.Errorf("%+v: Unseen %+v %v, Store %+v %v", c, rv, rverr, v, verr)
			}
			return nil
		})
		if rerr != nil {
			t.Fatal(rerr)
		}
	}
}
