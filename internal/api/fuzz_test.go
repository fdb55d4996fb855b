package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/residentd/residentd/apitype"
)

// FuzzDecodeTurn feeds arbitrary bodies to the request decoder of POST
// /v1/turns and POST /v1/messages: it must never panic, must classify every
// refusal as a malformed request (400 bad_request, or nesting_too_deep
// whenever the body nests deeper than MaxDepth and never for valid JSON
// that does not), and what it accepts
// must survive a re-encode and decode unchanged. The seeds include deep
// nesting, and brackets and escaped quotes inside strings, which do not
// nest.
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
		strings.Repeat("[", MaxDepth) + strings.Repeat("]", MaxDepth),
		strings.Repeat("[", MaxDepth+1) + strings.Repeat("]", MaxDepth+1),
		`{"text":` + strings.Repeat("[", 100_000),
		`{"channel_agents":[{"handle":` + strings.Repeat(`{"a":`, 5000) + `1` + strings.Repeat("}", 5000) + `}]}`,
		`{"text":"` + strings.Repeat("[", 200) + `","channel_id":"ch"}`,
		`{"text":"\"` + strings.Repeat("{", 200) + `"}`,
		`{"messages":[` + strings.Repeat(`[`, MaxDepth) + `]}`,
		`{"channel_id":"ch","channel_id":"ch2","text":"x"}`,
		`{"Channel_ID":"ch","text":"x"}`,
		`{"chann\u0065l_id":"ch","text":"x"}`,
		`{"channel_agents":[{"handle":"@a","handle":"@b"}],"text":"x"}`,
		`{"channel_id":"ch","binding_id":"b","text":"x","traceparent":"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01","tracestate":"app=desktop"}`,
		`{"channel_id":"ch","binding_id":"b","text":"x","traceparent":"","Tracestate":"a=b"}`,
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
				status, code := classify(err)
				switch deep := depth(data) > MaxDepth; {
				case status != 400 || code != "bad_request" && code != "nesting_too_deep":
					t.Fatalf("refusal %v classified %d %s", err, status, code)
				case deep && code != "nesting_too_deep":
					t.Fatalf("a body nested deeper than %d refused as %s: %v", MaxDepth, code, err)
				case !deep && code == "nesting_too_deep" && json.Valid(data):
					// Only a malformed body may look deeper than it is.
					t.Fatalf("valid JSON no deeper than %d refused as too deep: %v", MaxDepth, err)
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

// depth is the deepest nesting of data's first JSON value as encoding/json
// tokenizes it, or MaxDepth+1 when data nests deeper than that before its
// first syntax error: the reference the depth scanner is held to.
func depth(data []byte) int {
	dec := json.NewDecoder(bytes.NewReader(data))
	d, deepest := 0, 0
	for {
		tok, err := dec.Token()
		if err != nil {
			return deepest
		}
		switch tok {
		case json.Delim('['), json.Delim('{'):
			d++
			deepest = max(deepest, d)
			if d > MaxDepth {
				return d
			}
		case json.Delim(']'), json.Delim('}'):
			d--
		}
	}
}
