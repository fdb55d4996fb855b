package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"reflect"
	"testing"

	"github.com/residentd/residentd/apitype"
)

// FuzzDecodeTurn feeds arbitrary bodies to the request decoder of POST
// /v1/turns and POST /v1/messages: it must never panic, must classify every
// refusal as a malformed request, and what it accepts must survive a
// re-encode and decode unchanged.
func FuzzDecodeTurn(f *testing.F) {
	for _, s := range []string{
		`{"channel_id":"ch","binding_id":"b-builtin","message_id":"m1","thread_root_id":null,"text":"@agent hi"}`,
		`{"channel_id":"ch","binding_id":"b","text":"x","thread_root_id":"r1","run_id":"run-1","max_recipients":3,"channel_agents":[{"handle":"@a","reachable":true}]}`,
		`{"messages":[{"id":"m1","channel_id":"ch","author":"carla","author_kind":"user","created_at":"2026-12-01T09:00:00Z","body":"hello"}]}`,
		`{"channel_id":"ch","text":"x","extra":1}`,
		`{"channel_id":"ch"} {"trailing":true}`,
		`{"text":"\ud800 lone surrogate \u0000 nul"}`,
		`{"max_recipients":1e400}`,
		`[`, ``, `null`,
		`{"channel_id":"ch","channel_id":"ch2","text":"x"}`,
		`{"Channel_ID":"ch","text":"x"}`,
		`{"chann\u0065l_id":"ch","text":"x"}`,
		`{"channel_agents":[{"handle":"@a","handle":"@b"}],"text":"x"}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		check := func(fresh func() any) {
			v := fresh()
			if err := decodeBytes(data, v); err != nil {
				if !errors.Is(err, errDecode) {
					t.Fatalf("refusal %v is not a malformed-request error", err)
				}
				if status, code := classify(err); status != 400 || code != "bad_request" {
					t.Fatalf("refusal classified %d %s", status, code)
				}
				return
			}
			enc, err := json.Marshal(v)
			if err != nil {
				t.Fatalf("accepted %q but cannot re-encode it: %v", data, err)
			}
			again := fresh()
			if err := decodeBytes(enc, again); err != nil {
				t.Fatalf("accepted %q, re-encoded as %s, refused: %v", data, enc, err)
			}
			enc2, err := json.Marshal(again)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(enc, enc2) {
				t.Fatalf("round trip changed the value:\n%s\n%s", enc, enc2)
			}
		}
		check(func() any { return new(apitype.TurnRequest) })
		check(func() any { return new(apitype.MessagesRequest) })
		// The quick scan only ever spares a walk the walker would pass:
		// what it and the decoder accept, the walker accepts.
		for _, v := range []any{new(apitype.TurnRequest), new(apitype.MessagesRequest)} {
			if quickCheck(data, reflect.TypeOf(v)) && decodeBytes(data, v) == nil {
				if err := walk(data, v); err != nil {
					t.Fatalf("quick scan accepted %q, the walker refuses it: %v", data, err)
				}
			}
		}
	})
}
