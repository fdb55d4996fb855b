package sim

import (
	"fmt"

	"github.com/tiktoken-go/tokenizer"
)

// Tokens counts cl100k_base tokens, encoding each distinct string once:
// tokenizing is the whole cost of the measurement.
type Tokens struct {
	codec tokenizer.Codec
	ids   map[string][]uint
}

// NewTokens loads the embedded cl100k_base encoding (no network).
func NewTokens() (*Tokens, error) {
	c, err := tokenizer.Get(tokenizer.Cl100kBase)
	if err != nil {
		return nil, fmt.Errorf("sim: load cl100k_base: %w", err)
	}
	return &Tokens{codec: c, ids: map[string][]uint{}}, nil
}

// encode returns the tokens of s; callers must not modify the slice.
func (t *Tokens) encode(s string) []uint {
	if ids, ok := t.ids[s]; ok {
		return ids
	}
	// Encoding valid UTF-8 text with cl100k_base does not fail.
	ids, _, _ := t.codec.Encode(s)
	t.ids[s] = ids
	return ids
}

func (t *Tokens) decode(ids []uint) string {
	s, _ := t.codec.Decode(ids)
	return s
}

// Count returns the number of tokens of s.
func (t *Tokens) Count(s string) int { return len(t.encode(s)) }

// lcp is the length of the longest common prefix of a and b.
func lcp(a, b []uint) int {
	n := min(len(a), len(b))
	for i := 0; i < n; i++ {
		if a[i] != b[i] {
			return i
		}
	}
	return n
}
