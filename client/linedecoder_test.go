package client

import (
	"context"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/residentd/residentd/apitype"
	"github.com/residentd/residentd/internal/testkit"
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
	testkit.DecodesAsUnmarshal[apitype.Event](t, lines)
}

// TestLeanStreamAsWhole: a turn stream read for nobody's callback (its
// started and update events decoded lean) ends in the same event, with
// the same reply, and fails on the same lines, as one read whole.
func TestLeanStreamAsWhole(t *testing.T) {
	const (
		started = `{"event":"started","run_id":"r1","seq":1,"at":"2026-01-02T03:04:05Z","attempt":1,"shape":"warm","native_session":"n1","pid":7}`
		done    = `{"event":"done","run_id":"r1","seq":%d,"shape":"warm","stop_reason":"end_turn","watermark":"none","usage":{"input_tokens":3}}`
	)
	update := func(seq int, kind, text string) string {
		return fmt.Sprintf(`{"event":"update","run_id":"r1","seq":%d,"update":{"kind":%s,"text":%s}}`, seq, kind, text)
	}
	for i, c := range []struct {
		lines []string
		reply string // "" for a stream that fails
	}{
		{reply: "plain esc é \"q\" \\ \n😀 kind escaped bad \ufffd utf8 ", lines: []string{started, update(2, `"agent_message_chunk"`, `"plain "`), update(3, `"agent_thought_chunk"`, `"thinking"`),
			update(4, `"agent_message_chunk"`, `"esc \u00e9 \"q\" \\ \n\ud83d\ude00 "`), update(5, `"agent\u005fmessage_chunk"`, `"kind escaped "`),
			update(6, `"agent_message_chunk"`, "\"bad \xff utf8 \""), update(7, `"agent_message_chunk"`, `null`),
			update(8, `null`, `"no kind"`), fmt.Sprintf(done, 9)}},
		{lines: []string{started, update(2, `5`, `"x"`), fmt.Sprintf(done, 3)}},
		{lines: []string{started, update(2, `"agent_message_chunk"`, `7`), fmt.Sprintf(done, 3)}},
		{lines: []string{`{"event":"started","seq":"1"}`, fmt.Sprintf(done, 2)}},
		{lines: []string{started, `{"event":"update","seq":2,"update":{"kind":"agent_message_chunk","text":"a"}} x`, fmt.Sprintf(done, 3)}},
	} {
		body := strings.Join(c.lines, "\n") + "\n"
		var cl Client
		lean, lerr := cl.readStream(context.Background(), strings.NewReader(body), nil)
		whole, werr := cl.readStream(context.Background(), strings.NewReader(body), func(apitype.Event) {})
		if (lerr == nil) != (werr == nil) || !reflect.DeepEqual(lean, whole) {
			t.Errorf("stream %d: lean %+v (%v), whole %+v (%v)", i, lean, lerr, whole, werr)
		}
		if (lerr == nil) != (c.reply != "") || lean.Text != c.reply {
			t.Errorf("stream %d: reply %q (%v), want %q", i, lean.Text, lerr, c.reply)
		}
	}
}
