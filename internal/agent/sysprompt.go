// The built-in agent's system prompt (--system-prompt): it advertises
// sessionCapabilities.systemPrompt at initialize, as claude-agent-acp 0.101
// and codex-acp 2.6 do, and takes the systemPrompt a session request
// carries. The SDK has no field for either, so the writer adds the
// capability to the initialize answer and a reader in front of the SDK
// reads the system prompt off the session requests.

package agent

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"strings"
	"sync"
)

// systemPrompt is the system prompt of the sessions this process opened
// or reopened: the newest session request's (a process serves one
// session).
type systemPrompt struct {
	mu   sync.Mutex
	text string
	set  bool // a session request carried one
}

func (s *systemPrompt) get() (string, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.text, s.set
}

// sessionRequest is what the reader reads of a session request.
type sessionRequest struct {
	Method string `json:"method"`
	Params struct {
		SystemPrompt *struct {
			Mode    string `json:"mode"`
			Content []struct {
				Type string `json:"type"`
				Text string `json:"text"`
			} `json:"content"`
		} `json:"systemPrompt"`
	} `json:"params"`
}

// readSystemPrompts passes stdin on through a pipe, line by line, taking
// the system prompt of each session request before the SDK reads it. Its
// goroutine ends with stdin.
func (s *systemPrompt) readSystemPrompts(stdin io.Reader) io.Reader {
	pr, pw := io.Pipe()
	go func() {
		br := bufio.NewReaderSize(stdin, 64<<10)
		for {
			line, err := br.ReadBytes('\n')
			if bytes.Contains(line, []byte(`"systemPrompt"`)) {
				s.take(line)
			}
			if len(line) > 0 {
				if _, werr := pw.Write(line); werr != nil {
					return
				}
			}
			if err != nil {
				_ = pw.CloseWithError(err)
				return
			}
		}
	}()
	return pr
}

func (s *systemPrompt) take(line []byte) {
	var req sessionRequest
	if json.Unmarshal(line, &req) != nil || req.Params.SystemPrompt == nil || !strings.HasPrefix(req.Method, "session/") {
		return
	}
	var parts []string
	for _, c := range req.Params.SystemPrompt.Content {
		parts = append(parts, c.Text)
	}
	s.mu.Lock()
	s.text, s.set = strings.Join(parts, "\n\n"), true
	s.mu.Unlock()
}

// advertised is p with sessionCapabilities.systemPrompt added when p is the
// initialize answer and the agent takes a system prompt (l.mu held).
func (l *lockedWriter) advertised(p []byte) []byte {
	key := []byte(`"sessionCapabilities":{`)
	if !l.systemPrompt || !bytes.Contains(p, []byte(`"agentCapabilities"`)) {
		return p
	}
	i := bytes.Index(p, key)
	if i < 0 {
		return p
	}
	at := i + len(key)
	extra := `"systemPrompt":{}`
	if p[at] != '}' {
		extra += ","
	}
	out := make([]byte, 0, len(p)+len(extra))
	out = append(out, p[:at]...)
	out = append(out, extra...)
	return append(out, p[at:]...)
}

// systemSummary is what the reply adds with --system-prompt: whether the
// session's system prompt starts with the framing.
func (b *builtin) systemSummary() string {
	text, ok := b.sys.get()
	if ok && b.opts.framing != "" && strings.HasPrefix(text, b.opts.framing) {
		return " system=yes"
	}
	return " system=no"
}
