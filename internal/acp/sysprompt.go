// The binding's framing as the session's system prompt. ACP (unstable)
// lets a client send systemPrompt {mode, content} with session/new,
// session/load, session/resume and session/fork when the agent advertises
// sessionCapabilities.systemPrompt (claude-agent-acp 0.101: append and
// override; codex-acp 2.6: append). The pinned SDK knows neither the
// capability nor the field, so the pump reads the capability off the
// initialize answer before the SDK does, and the writer adds the field to
// the session requests' lines as it adds the client capabilities to
// initialize's.

package acp

import (
	"bytes"
	"encoding/json"
	"sync"
)

// sessionMethods are the requests that open a session, and so carry the
// system prompt.
var sessionMethods = [][]byte{[]byte(`"method":"session/new"`), []byte(`"method":"session/load"`), []byte(`"method":"session/resume"`), []byte(`"method":"session/fork"`)}

// sysPrompt is what the writer adds to the session requests: the text
// (Spec.SystemPrompt), once the agent said it takes one.
type sysPrompt struct {
	mu       sync.Mutex
	seen     bool   // the initialize answer went by
	taken    bool   // it advertised sessionCapabilities.systemPrompt
	text     string // Spec.SystemPrompt
	field    []byte // "systemPrompt":{…}, as the writer inserts it
	sessions int    // session requests that carried it
}

// initAnswer is the part of initialize's answer this file reads.
type initAnswer struct {
	Result struct {
		AgentCapabilities struct {
			SessionCapabilities struct {
				SystemPrompt json.RawMessage `json:"systemPrompt"`
			} `json:"sessionCapabilities"`
		} `json:"agentCapabilities"`
	} `json:"result"`
}

// sniffInit reads, once, whether the initialize answer in line advertises
// a system prompt. Only the pump calls it.
func (s *sysPrompt) sniffInit(line []byte) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.seen || !bytes.Contains(line, []byte(`"agentCapabilities"`)) {
		return
	}
	var ans initAnswer
	if json.Unmarshal(line, &ans) != nil {
		return
	}
	s.seen = true
	raw := bytes.TrimSpace(ans.Result.AgentCapabilities.SessionCapabilities.SystemPrompt)
	s.taken = s.text != "" && len(raw) > 0 && !bytes.Equal(raw, []byte("null"))
	if s.taken {
		content, _ := json.Marshal([]map[string]string{{"type": "text", "text": s.text}})
		s.field = append(append([]byte(`"systemPrompt":{"mode":"append","content":`), content...), '}')
	}
}

// add returns p with the system prompt in its params when p opens a
// session and the agent takes one; p itself otherwise.
func (s *sysPrompt) add(p []byte) []byte {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.taken {
		return p
	}
	opens := false
	for _, m := range sessionMethods {
		opens = opens || bytes.Contains(p, m)
	}
	key := []byte(`"params":{`)
	i := bytes.Index(p, key)
	if !opens || i < 0 {
		return p
	}
	s.sessions++
	at := i + len(key)
	out := make([]byte, 0, len(p)+len(s.field)+1)
	out = append(out, p[:at]...)
	out = append(out, s.field...)
	if p[at] != '}' {
		out = append(out, ',')
	}
	return append(out, p[at:]...)
}

// SystemPromptTaken reports whether the agent takes the session's system
// prompt (it advertised sessionCapabilities.systemPrompt) and Spec gave
// one: each session it opens then has Spec.SystemPrompt, and the framing
// stays out of the first turn.
func (a *Agent) SystemPromptTaken() bool {
	if a.in == nil {
		return false
	}
	s := &a.in.sys
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.taken
}
