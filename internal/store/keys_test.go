package store

import (
	"bytes"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestJoinSplitKey(t *testing.T) {
	cases := [][]string{
		{"", ""},
		{"a", "b"},
		{"a\x00b", ""},
		{"", "a\x00b"},
		{strings.Repeat("z", 300), "\xff\xff", "c"},
	}
	seen := map[string]bool{}
	for _, parts := range cases {
		k := joinKey(parts...)
		got, err := splitKey(k, len(parts))
		if err != nil || !slices.Equal(got, parts) {
			t.Errorf("split(join(%q)) = %q, %v", parts, got, err)
		}
		if seen[string(k)] {
			t.Errorf("join(%q) collides", parts)
		}
		seen[string(k)] = true
		if !bytes.HasPrefix(k, joinKey(parts[0])) {
			t.Errorf("join(%q) does not start with join of its first part", parts)
		}
	}
	if _, err := splitKey([]byte{5, 'a'}, 1); err == nil {
		t.Error("short key accepted")
	}
	if _, err := splitKey(joinKey("a", "b"), 1); err == nil {
		t.Error("trailing bytes accepted")
	}
}

func TestTimeKeyOrder(t *testing.T) {
	times := []time.Time{
		time.Date(1, 1, 1, 0, 0, 0, 0, time.UTC),
		time.Date(1960, 1, 1, 0, 0, 0, 0, time.UTC),
		time.Unix(-1, 0),
		time.Unix(0, 0),
		time.Unix(0, 1),
		time.Date(2025, 3, 1, 12, 0, 0, 0, time.FixedZone("x", 3600)),
		time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC),
		time.Date(9999, 1, 1, 0, 0, 0, 0, time.UTC),
	}
	for i := 1; i < len(times); i++ {
		if bytes.Compare(timeKey(times[i-1]), timeKey(times[i])) >= 0 {
			t.Errorf("timeKey(%v) >= timeKey(%v)", times[i-1], times[i])
		}
	}
}

func TestSuccessor(t *testing.T) {
	cases := []struct{ in, want []byte }{
		{[]byte{0}, []byte{1}},
		{[]byte{3, 'a', 0xff}, []byte{3, 'b'}},
		{[]byte{0xff, 0xff}, nil},
	}
	for _, c := range cases {
		if got := successor(c.in); !bytes.Equal(got, c.want) {
			t.Errorf("successor(%x) = %x, want %x", c.in, got, c.want)
		}
	}
}
