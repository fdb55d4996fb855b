package jsonenc

import (
	"bytes"
	"encoding/json"
	"math/rand/v2"
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

// TestAppendString: a string is encoded as json.Marshal encodes it,
// whatever its bytes, and a text block's text as the SDK encodes it.
func TestAppendString(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	alphabet := []string{"a", "<", ">", "&", "\"", "\\", "\n", "\x00", "\x1f", "\x7f", "é", "\u2028", "\u2029", "\xff", "\xe2\x80", "😀", "\ufffd"}
	for range 5000 {
		var sb strings.Builder
		for range rng.IntN(20) {
			if rng.IntN(4) == 0 {
				sb.WriteByte(byte(rng.IntN(256)))
				continue
			}
			sb.WriteString(alphabet[rng.IntN(len(alphabet))])
		}
		s := sb.String()
		want, _ := json.Marshal(s)
		if n := StringLen(s); n != len(want) {
			t.Fatalf("StringLen(%q) = %d, want %d", s, n, len(want))
		}
		if got := AppendString([]byte("x"), s); !bytes.Equal(got[1:], want) {
			t.Fatalf("%q (valid utf8 %v): got %s, want %s", s, utf8.ValidString(s), got[1:], want)
		}
		// A text block's: the SDK's encoding of a decoded encoding.
		var back string
		if err := json.Unmarshal(want, &back); err != nil {
			t.Fatal(err)
		}
		want, _ = json.Marshal(back)
		if got := AppendSDKText(nil, s); !bytes.Equal(got, want) {
			t.Fatalf("text %q: got %s, want %s", s, got, want)
		}
	}
}

// TestAppendTime: a time is encoded as json.Marshal encodes it, and one
// Marshal refuses is refused.
func TestAppendTime(t *testing.T) {
	for _, tm := range []time.Time{
		{}, time.Now(), time.Now().UTC(), time.Date(2026, 1, 2, 3, 4, 5, 600, time.FixedZone("x", -7*3600-30*60)),
		time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC), time.Date(-1, 1, 1, 0, 0, 0, 0, time.UTC),
	} {
		want, werr := json.Marshal(tm)
		got, ok := AppendTime([]byte("x"), tm)
		if ok != (werr == nil) || (ok && !bytes.Equal(got[1:], want)) || (!ok && string(got) != "x") {
			t.Errorf("%v: got %s ok %v, want %s err %v", tm, got, ok, want, werr)
		}
	}
}

// TestPlain: raw JSON is plain exactly when json.Marshal writes it as it
// is, and only valid JSON is.
func TestPlain(t *testing.T) {
	for _, raw := range []string{
		`{"a":1}`, `{"a": 1}`, `{"a":"x y"}`, `{"a":"<b>"}`, `{"a":"\u003c"}`, `{"a":"a\"b c"}`, `{"a":"a\\"}`,
		`{"a":"\\" }`, "{\"a\":\"\u2028\"}", `{"a":"—…"}`, `[1,2]`, ` 1`, `1 `, `{"a":}`, `{"a":1`, `"x"`, `null`, `"\"`, "\"\xff\"",
		"{\n\"a\":1}", `{"a":"&"}`, `{"text":"line\nnext"}`,
	} {
		var m []byte
		var err error
		func() {
			defer func() { recover() }()
			m, err = json.Marshal(json.RawMessage(raw))
		}()
		want := err == nil && bytes.Equal(m, []byte(raw))
		if got := Plain([]byte(raw)); got != want {
			t.Errorf("Plain(%s) = %v, want %v (Marshal %s, %v)", raw, got, want, m, err)
		}
	}
}
