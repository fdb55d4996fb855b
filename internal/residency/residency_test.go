package residency

import (
	"testing"
	"time"

	"github.com/residentd/residentd/internal/session"
)

// The timer policy is the source's: the least recently used idle key goes
// for a new one; a key idle past the timer goes; a working key neither.
func TestTimer(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
	key := func(ch string, used time.Duration, working bool) Key {
		return Key{Key: session.Key{Channel: ch, Binding: "b"}, LastUsed: t0.Add(used), Working: working}
	}
	p := Timer{Idle: 30 * time.Minute}
	idle := []Key{key("a", 10*time.Minute, false), key("b", 0, true), key("c", 5*time.Minute, false)}
	if c := p.Victim(t0.Add(time.Hour), idle); c.Index != 2 || c.Reason == "" {
		t.Fatalf("victim %+v, want c (the least recently used not working)", c)
	}
	if c := p.Victim(t0, []Key{key("b", 0, true)}); c.Index != -1 {
		t.Fatalf("victim %+v among working keys only", c)
	}
	for _, tt := range []struct {
		k    Key
		now  time.Duration
		want bool
	}{
		{key("a", 0, false), 29 * time.Minute, false},
		{key("a", 0, false), 30 * time.Minute, true},
		{key("a", 0, true), 3 * time.Hour, false},
	} {
		if got, why := p.Expire(t0.Add(tt.now), tt.k); got != tt.want || why == "" {
			t.Errorf("Expire at %s: %v %q, want %v", tt.now, got, why, tt.want)
		}
	}
}
