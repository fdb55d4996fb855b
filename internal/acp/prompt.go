// session/prompt sent and answered without the SDK's request machinery.
//
// The SDK encodes a prompt's text block by marshalling it, decoding that
// into a map and marshalling the map again, and routes the answer through
// its pending-request table and a second decode: on a warm turn that was
// about a tenth of the daemon's allocations. A prompt is written here as
// the SDK would write it (the same JSON, key for key) and its answer is
// taken off the agent's stdout by the pump, which reads every line before
// the SDK does. Its ids are numbers from promptIDBase up, a range the
// SDK's own counter (from 1) never reaches, so the SDK never sees an
// answer it did not ask for and the pump never takes one of the SDK's.

package acp

import (
	"encoding/json"
	"strconv"

	sdk "github.com/coder/acp-go-sdk"

	"github.com/residentd/residentd/internal/jsonenc"
)

// promptIDBase is the first JSON-RPC id of a prompt sent here: below 2^53,
// so an agent in JavaScript keeps it exact.
const promptIDBase = 1 << 50

// promptAnswer is what a session/prompt came back with.
type promptAnswer struct {
	resp sdk.PromptResponse
	err  error
}

// promptReply is a JSON-RPC response line as the pump reads it for a
// prompt sent here; result is decoded as the SDK would decode it.
type promptReply struct {
	ID     json.RawMessage     `json:"id"`
	Method string              `json:"method"`
	Result *sdk.PromptResponse `json:"result"`
	Error  *sdk.RequestError   `json:"error"`
}

// replyID is a response line's id, as far as the pump needs it.
type replyID struct {
	ID     json.RawMessage `json:"id"`
	Method string          `json:"method"`
}

// promptLine is the session/prompt request id for session native with
// blocks and meta, as one line: the SDK's encoding of a PromptRequest (its
// fields in order, a text block as {"text":…,"type":"text"}; any other
// block as the SDK marshals it) in a JSON-RPC request as the SDK sends it.
func promptLine(buf []byte, id uint64, native string, blocks []sdk.ContentBlock, meta map[string]any) ([]byte, error) {
	buf = append(buf, `{"jsonrpc":"2.0","id":`...)
	buf = strconv.AppendUint(buf, id, 10)
	buf = append(buf, `,"method":"session/prompt","params":{`...)
	if len(meta) > 0 {
		m, err := json.Marshal(meta)
		if err != nil {
			return buf, err
		}
		buf = append(buf, `"_meta":`...)
		buf = append(buf, m...)
		buf = append(buf, ',')
	}
	buf = append(buf, `"prompt":[`...)
	for i, b := range blocks {
		if i > 0 {
			buf = append(buf, ',')
		}
		if t := b.Text; t != nil && b.Image == nil && b.Audio == nil && b.ResourceLink == nil && b.Resource == nil {
			buf = append(buf, `{"text":`...)
			buf = jsonenc.AppendSDKText(buf, t.Text)
			buf = append(buf, `,"type":"text"}`...)
			continue
		}
		m, err := json.Marshal(b)
		if err != nil {
			return buf, err
		}
		buf = append(buf, m...)
	}
	buf = append(buf, `],"sessionId":`...)
	buf = jsonenc.AppendString(buf, native)
	return append(buf, "}}\n"...), nil
}

// parseID reads a prompt id of this package from a response's raw id: 0
// for any other id.
func parseID(raw []byte) uint64 {
	if len(raw) == 0 || len(raw) > 19 {
		return 0
	}
	var n uint64
	for _, c := range raw {
		if c < '0' || c > '9' {
			return 0
		}
		n = n*10 + uint64(c-'0')
	}
	if n < promptIDBase {
		return 0
	}
	return n
}

// takeAnswer hands line to the prompt it answers, if it answers one sent
// here, and reports whether it did; every other line goes on to the SDK.
// Only the pump calls it.
func (a *Agent) takeAnswer(line []byte) bool {
	rep := &a.reply
	*rep = promptReply{}
	err := a.lines.Decode(line, rep)
	if err != nil {
		// Not a line this package can read whole: whether it answers a
		// prompt sent here is all that is asked of it.
		var id replyID
		if json.Unmarshal(line, &id) != nil || id.Method != "" {
			return false
		}
		if n := parseID(id.ID); n != 0 {
			a.answer(n, promptAnswer{err: sdk.NewInternalError(map[string]any{"error": err.Error()})})
			return true
		}
		return false
	}
	n := parseID(rep.ID)
	if rep.Method != "" || n == 0 {
		return false
	}
	var ans promptAnswer
	switch {
	case rep.Error != nil:
		ans.err = rep.Error
	case rep.Result != nil:
		ans.resp = *rep.Result
	}
	a.answer(n, ans)
	return true
}

// waiting is a prompt waiting for its answer: where the answer goes, and
// its session's route.
type waiting struct {
	ch chan promptAnswer
	r  *route
}

// answer delivers ans to prompt id, if it still waits (one that gave up
// has gone: its answer goes nowhere). The route is marked answered first,
// on the pump, before the pump reads the next line: what the agent says
// after its answer belongs to no turn (ACP sends a prompt's updates before
// its answer), however soon it comes and however late the prompt's
// caller runs again.
func (a *Agent) answer(id uint64, ans promptAnswer) {
	a.mu.Lock()
	w, ok := a.prompts[id]
	delete(a.prompts, id)
	a.promptsN.Store(int32(len(a.prompts)))
	a.mu.Unlock()
	if !ok {
		return
	}
	w.r.mu.Lock()
	w.r.answered = true
	w.r.mu.Unlock()
	w.ch <- ans // buffered, and only this sends on it
}

// awaitAnswer registers w for the answer to prompt id, before its line is
// written.
func (a *Agent) awaitAnswer(id uint64, w waiting) {
	a.mu.Lock()
	a.prompts[id] = w
	a.promptsN.Store(int32(len(a.prompts)))
	a.mu.Unlock()
}

// forgetAnswer drops the wait for prompt id, answered or not.
func (a *Agent) forgetAnswer(id uint64) {
	a.mu.Lock()
	delete(a.prompts, id)
	a.promptsN.Store(int32(len(a.prompts)))
	a.mu.Unlock()
}

// writeLine writes one whole line to the agent's stdin, between the SDK's
// own messages.
func (c *capsWriter) writeLine(p []byte) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	_, err := c.w.Write(p)
	return err
}
