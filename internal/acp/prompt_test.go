package acp

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	sdk "github.com/coder/acp-go-sdk"
)

// sdkLine is a session/prompt request as the SDK writes it: its params
// marshalled, in its JSON-RPC envelope (the SDK's anyMessage, same fields
// in the same order), marshalled, then a newline.
func sdkLine(t *testing.T, id uint64, req sdk.PromptRequest) []byte {
	t.Helper()
	params, err := json.Marshal(req)
	if err != nil {
		t.Fatal(err)
	}
	idRaw, _ := json.Marshal(id)
	msg := struct {
		JSONRPC string           `json:"jsonrpc"`
		ID      *json.RawMessage `json:"id,omitempty"`
		Method  string           `json:"method,omitempty"`
		Params  json.RawMessage  `json:"params,omitempty"`
	}{"2.0", (*json.RawMessage)(&idRaw), sdk.AgentMethodSessionPrompt, params}
	b, err := json.Marshal(msg)
	if err != nil {
		t.Fatal(err)
	}
	return append(b, '\n')
}

// TestPromptLineAsSDK: the prompt line written here is the SDK's, byte for
// byte, for text of every kind, with and without _meta, with attachment
// blocks.
func TestPromptLineAsSDK(t *testing.T) {
	size, mt := 12, "application/pdf"
	link := sdk.ResourceLinkBlock("spec.pdf", "file:///tmp/spec.pdf")
	link.ResourceLink.MimeType, link.ResourceLink.Size = &mt, &size
	texts := []string{"", "hello", "@agent <b>&</b> \"quoted\" \\ \n\t\r\b\f \x00\x1f\x7f é 日本 \u2028\u2029 😀", "bad \xff\xfe utf8 \xe2\x80", strings.Repeat("long line ", 1000)}
	metas := []map[string]any{nil, {}, {"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", "tracestate": "a=<b>"}}
	for i, text := range texts {
		for j, meta := range metas {
			for k, blocks := range [][]sdk.ContentBlock{
				{sdk.TextBlock(text)},
				{sdk.TextBlock(text), sdk.TextBlock("Attachment of message m1"), link, sdk.ImageBlock("aGk=", "image/png")},
			} {
				id := uint64(promptIDBase + i + 1)
				got, err := promptLine(nil, id, "sess-"+text[:min(len(text), 8)], blocks, meta)
				if err != nil {
					t.Fatal(err)
				}
				want := sdkLine(t, id, sdk.PromptRequest{Meta: meta, SessionId: sdk.SessionId("sess-" + text[:min(len(text), 8)]), Prompt: blocks})
				if !bytes.Equal(got, want) {
					t.Fatalf("text %d meta %d blocks %d:\n got %s\nwant %s", i, j, k, got, want)
				}
			}
		}
	}
}

// TestParseID: only a plain decimal id of this package's range is taken
// for one of its prompts.
func TestParseID(t *testing.T) {
	for raw, want := range map[string]uint64{
		"1125899906842625":     promptIDBase + 1,
		"1125899906842624":     promptIDBase,
		"1125899906842623":     0,
		"7":                    0,
		`"1125899906842625"`:   0,
		"1125899906842625.0":   0,
		"-1125899906842625":    0,
		"":                     0,
		"null":                 0,
		"99999999999999999999": 0,
	} {
		if got := parseID([]byte(raw)); got != want {
			t.Errorf("parseID(%s) = %d, want %d", raw, got, want)
		}
	}
}

// TestTakeAnswer: the pump takes the answer to a prompt sent here (a
// result, an error, one that quotes session/update, one it cannot decode
// whole) and leaves every other line to the SDK.
func TestTakeAnswer(t *testing.T) {
	a := &Agent{prompts: map[uint64]waiting{}}
	id := uint64(promptIDBase + 1)
	ids := "1125899906842625"
	for i, c := range []struct {
		line  string
		taken bool
		check func(promptAnswer) bool
	}{
		{`{"jsonrpc":"2.0","id":7,"result":{"stopReason":"end_turn"}}`, false, nil},
		{`{"jsonrpc":"2.0","id":` + ids + `,"method":"fs/read_text_file","params":{}}`, false, nil},
		{`{"jsonrpc":"2.0","id":"` + ids + `","result":{"stopReason":"end_turn"}}`, false, nil},
		{`{"jsonrpc":"2.0","id":` + ids + `,"result":{"stopReason":"end_turn","usage":{"inputTokens":3,"outputTokens":4,"totalTokens":7}}}`, true, func(p promptAnswer) bool {
			return p.err == nil && p.resp.StopReason == "end_turn" && p.resp.Usage != nil && p.resp.Usage.OutputTokens == 4
		}},
		{`{"jsonrpc":"2.0","id":` + ids + `,"error":{"code":-32603,"message":"builtin: induced failure"}}`, true, func(p promptAnswer) bool {
			re, ok := p.err.(*sdk.RequestError)
			return ok && re.Code == -32603 && re.Message == "builtin: induced failure"
		}},
		{`{"jsonrpc":"2.0","id":` + ids + `,"result":{"stopReason":"end_turn","_meta":{"note":"session/update"}}}`, true, func(p promptAnswer) bool {
			return p.err == nil && p.resp.StopReason == "end_turn" && p.resp.Meta["note"] == "session/update"
		}},
		{`{"jsonrpc":"2.0","id":` + ids + `,"result":{"stopReason":5}}`, true, func(p promptAnswer) bool {
			re, ok := p.err.(*sdk.RequestError)
			return ok && re.Code == -32603
		}},
		{`{"jsonrpc":"2.0","id":` + ids + `,"result":null}`, true, func(p promptAnswer) bool { return p.err == nil && p.resp.StopReason == "" }},
	} {
		ch, r := make(chan promptAnswer, 1), &route{}
		a.awaitAnswer(id, waiting{ch: ch, r: r})
		if got := a.dispatch([]byte(c.line + "\n")); got != c.taken {
			t.Fatalf("line %d: taken %v, want %v", i, got, c.taken)
		}
		if !c.taken {
			a.forgetAnswer(id)
			continue
		}
		select {
		case p := <-ch:
			if !c.check(p) {
				t.Fatalf("line %d: answer %+v (err %v)", i, p.resp, p.err)
			}
		default:
			t.Fatalf("line %d: taken, not delivered", i)
		}
		// Marked on the pump, before its next line: an update after the
		// answer goes to no turn, whenever the prompt's caller runs.
		if !r.answered {
			t.Fatalf("line %d: answered, but its route is not marked so", i)
		}
		if a.promptsN.Load() != 0 {
			t.Fatalf("line %d: %d prompts still wait", i, a.promptsN.Load())
		}
	}
	// While a prompt waits, an answer to an earlier one that gave up is
	// taken too, and goes nowhere (with none waiting the SDK reads it, and
	// logs an answer it did not ask for).
	a.awaitAnswer(id+1, waiting{ch: make(chan promptAnswer, 1), r: &route{}})
	if !a.dispatch([]byte(`{"jsonrpc":"2.0","id":` + ids + `,"result":{"stopReason":"end_turn"}}`)) {
		t.Fatal("a late answer to a prompt sent here went to the SDK")
	}
}
