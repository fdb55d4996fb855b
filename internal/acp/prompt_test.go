package acp

import (
	"bytes"
	"encoding/json"
	"math/rand/v2"
	"strings"
	"testing"
	"unicode/utf8"

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

// TestAppendJSONString: a string is encoded as json.Marshal encodes it,
// whatever its bytes, and a text block's text as the SDK encodes it.
func TestAppendJSONString(t *testing.T) {
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
		if got := appendJSONString([]byte("x"), s, false); !bytes.Equal(got[1:], want) {
			t.Fatalf("%q (valid utf8 %v): got %s, want %s", s, utf8.ValidString(s), got[1:], want)
		}
		// A text block's: the SDK's encoding of a decoded encoding.
		var back string
		if err := json.Unmarshal(want, &back); err != nil {
			t.Fatal(err)
		}
		want, _ = json.Marshal(back)
		if got := appendJSONString(nil, s, true); !bytes.Equal(got, want) {
			t.Fatalf("text %q: got %s, want %s", s, got, want)
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
	a := &Agent{prompts: map[uint64]chan promptAnswer{}}
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
		ch := make(chan promptAnswer, 1)
		a.awaitAnswer(id, ch)
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
		if a.promptsN.Load() != 0 {
			t.Fatalf("line %d: %d prompts still wait", i, a.promptsN.Load())
		}
	}
	// While a prompt waits, an answer to an earlier one that gave up is
	// taken too, and goes nowhere (with none waiting the SDK reads it, and
	// logs an answer it did not ask for).
	a.awaitAnswer(id+1, make(chan promptAnswer, 1))
	if !a.dispatch([]byte(`{"jsonrpc":"2.0","id":` + ids + `,"result":{"stopReason":"end_turn"}}`)) {
		t.Fatal("a late answer to a prompt sent here went to the SDK")
	}
}
