package client

import (
	"encoding/json"
	"reflect"
	"testing"

	"github.com/residentd/residentd/apitype"
)

// TestLineDecoderAsUnmarshal: one decoder kept across a stream's lines
// (the scanner's, without their newlines) accepts and refuses each line
// exactly as json.Unmarshal does, and decodes the same event.
func TestLineDecoderAsUnmarshal(t *testing.T) {
	lines := []string{
		`{"event":"started","seq":1,"run_id":"r1","shape":"warm"}`,
		`{"event":"update","seq":2,"update":{"kind":"message","text":"hi \u00e9"}}`,
		`{"event":"update","seq":3} {"event":"done"}`,
		`  {"event":"keepalive"}  `,
		`{"event":"update","seq":4,"update":`,
		`{"event":"done","seq":5,"text":"ok"}`,
		`12`,
		`34`,
		`{"event":"done","seq":6}x`,
		`{"event":"error","seq":7,"code":"agent_failed","message":"m"}`,
		`not json`,
		`{"event":"done","seq":8,"usage":{"input_tokens":3}}`,
	}
	var d apitype.LineDecoder
	for round := range 2 {
		for i, l := range lines {
			var got, want apitype.Event
			gerr := d.Decode([]byte(l), &got)
			werr := json.Unmarshal([]byte(l), &want)
			if (gerr == nil) != (werr == nil) {
				t.Fatalf("round %d line %d: decode err %v, Unmarshal err %v", round, i, gerr, werr)
			}
			if werr == nil && !reflect.DeepEqual(got, want) {
				t.Fatalf("round %d line %d: decoded %+v, Unmarshal %+v", round, i, got, want)
			}
		}
	}
}
