// The built-in agent's forms: [[elicit:NAME]] asks the client to fill in
// one (ACP's elicitation/create, form mode) and reports the answer as a
// thought.

package agent

import (
	"bytes"
	"context"
	"encoding/json"
	"sort"
	"strings"

	acp "github.com/coder/acp-go-sdk"
)

// elicitDirective makes the agent ask for a form named NAME (ElicitForm's
// fields), waiting for the answer.
var elicitDirective = lazyRegexp(`\[\[elicit:([a-z0-9_-]+)\]\]`)

// ElicitForm is the form [[elicit:NAME]] requests: an environment to pick
// (required), a replica count from 1 to 10, a confirmation (required) and
// a free note.
const ElicitForm = `{"type":"object","title":"builtin form","properties":{` +
	`"env":{"type":"string","title":"Environment","enum":["staging","production"]},` +
	`"replicas":{"type":"integer","minimum":1,"maximum":10},` +
	`"confirm":{"type":"boolean","title":"Go ahead?"},` +
	`"note":{"type":"string","maxLength":200}},` +
	`"required":["env","confirm"]}`

// elicit asks for the form of every [[elicit:NAME]] of text, one after the
// other, and reports each answer as "elicit NAME ok: ACTION {content}".
func (b *builtin) elicit(ctx context.Context, id, text string) {
	for _, m := range elicitDirective().FindAllStringSubmatch(text, -1) {
		var schema acp.UnstableElicitationSchema
		if err := json.Unmarshal([]byte(ElicitForm), &schema); err != nil {
			b.thought(ctx, id, "elicit "+m[1], "", err)
			continue
		}
		b.out.scope(id)
		resp, err := b.conn.UnstableCreateElicitation(ctx, acp.UnstableCreateElicitationRequest{Form: &acp.UnstableCreateElicitationForm{
			Mode: "form", Message: "builtin asks: " + m[1], RequestedSchema: schema,
		}})
		b.thought(ctx, id, "elicit "+m[1], elicitOutcome(resp), err)
	}
}

// elicitOutcome is an answer as the thought reports it: the action, and
// an accept's content with its keys sorted.
func elicitOutcome(resp acp.UnstableCreateElicitationResponse) string {
	switch {
	case resp.Accept != nil:
		keys := make([]string, 0, len(resp.Accept.Content))
		for k := range resp.Accept.Content {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		parts := make([]string, len(keys))
		for i, k := range keys {
			v, _ := json.Marshal(resp.Accept.Content[k])
			parts[i] = k + "=" + string(v)
		}
		return "accept " + strings.Join(parts, " ")
	case resp.Decline != nil:
		return "decline"
	case resp.Cancel != nil:
		return "cancel"
	}
	return "unknown"
}

// scope names the session of the next elicitation request written: the
// SDK's typed request has no field for the session scope the schema
// requires (sessionId), so the writer adds it to the line.
func (l *lockedWriter) scope(session string) {
	l.mu.Lock()
	l.elicitFor = session
	l.mu.Unlock()
}

// scoped is p with the session scope added, when p is an elicitation
// request without one (l.mu held).
func (l *lockedWriter) scoped(p []byte) []byte {
	if l.elicitFor == "" || !bytes.Contains(p, []byte(`"method":"elicitation/create"`)) || bytes.Contains(p, []byte(`"sessionId"`)) {
		return p
	}
	key := []byte(`"params":{`)
	i := bytes.Index(p, key)
	if i < 0 {
		return p
	}
	sid, _ := json.Marshal(l.elicitFor)
	at := i + len(key)
	out := make([]byte, 0, len(p)+len(sid)+16)
	out = append(out, p[:at]...)
	out = append(out, `"sessionId":`...)
	out = append(out, sid...)
	out = append(out, ',')
	return append(out, p[at:]...)
}
