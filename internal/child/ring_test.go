package child

import "testing"

func TestRing(t *testing.T) {
	for _, tc := range []struct {
		size   int
		writes []string
		want   string
	}{
		{8, []string{"abc", "defgh", "ij", "0123456789xyz"}, "56789xyz"}, // one write larger than the ring
		{4, []string{"ab", "cde"}, "bcde"},                               // the oldest bytes drop first
		{8, []string{"ab", "cd"}, "abcd"},                                // under the bound, all kept
	} {
		r := newRing(tc.size)
		for _, w := range tc.writes {
			if n, err := r.Write([]byte(w)); n != len(w) || err != nil {
				t.Fatalf("Write(%q) = %d, %v", w, n, err)
			}
		}
		if got := r.String(); got != tc.want {
			t.Errorf("ring(%d) after %q = %q, want %q", tc.size, tc.writes, got, tc.want)
		}
	}
}
