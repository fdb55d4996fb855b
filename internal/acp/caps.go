// What residentd tells an agent it understands beyond the SDK's types.

package acp

import (
	"bytes"
	"encoding/json"
	"io"
	"sync"
	"sync/atomic"
)

// SessionCapabilities is clientCapabilities.session as residentd sends it
// at initialize: it handles compaction_update and notice session updates,
// and subagent sessions (their updates reach the parent's run). The pinned
// SDK has no typed field for them, so they are spliced into the
// initialize request's line as it is written.
const SessionCapabilities = `{"compaction":{},"notices":{}}`

// subagentsCapability is clientCapabilities.subagents.
const subagentsCapability = `{}`

// capsWriter writes the SDK's requests to the agent's stdin, adding the
// capabilities above to the initialize request (the SDK writes each
// message with one Write). Every write holds wmu: the prompts this package
// writes itself (writeLine) go between the SDK's messages, never into one.
// Lock order: wmu, then mu; neither is held with Agent.mu or a route's.
type capsWriter struct {
	w    io.Writer
	wmu  sync.Mutex
	mu   sync.Mutex
	done bool // the initialize line went by

	sys sysPrompt // the system prompt the session requests carry (sysprompt.go)
	// offer is the Spec's protocol when it offers v2 (v2.go): the
	// initialize line goes out in v2's shape. v2 is set once the agent
	// answered v2: requests whose shape differs are rewritten.
	offer string
	v2    *atomic.Bool
}

var capsKey = []byte(`"clientCapabilities":{`)

func (c *capsWriter) Write(p []byte) (int, error) {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	c.mu.Lock()
	done := c.done
	c.mu.Unlock()
	if done {
		// The session requests carry the system prompt; over v2 a
		// set_config_option takes v2's shape.
		q := c.sys.add(p)
		changed := len(q) != len(p)
		if c.v2 != nil && c.v2.Load() && bytes.Contains(q, []byte(`"session/set_config_option"`)) {
			q, changed = setOptionLine(q), true
		}
		if changed {
			if _, err := c.w.Write(q); err != nil {
				return 0, err
			}
			return len(p), nil
		}
	}
	if done || !bytes.Contains(p, []byte(`"method":"initialize"`)) {
		return c.w.Write(p)
	}
	if c.offer != "" {
		var req struct {
			ID     json.RawMessage `json:"id"`
			Params struct {
				ClientCapabilities struct {
					Elicitation json.RawMessage `json:"elicitation"`
				} `json:"clientCapabilities"`
			} `json:"params"`
		}
		if err := json.Unmarshal(p, &req); err == nil {
			c.mu.Lock()
			c.done = true
			c.mu.Unlock()
			if _, err := c.w.Write(v2InitLine(req.ID, c.offer, req.Params.ClientCapabilities.Elicitation)); err != nil {
				return 0, err
			}
			return len(p), nil
		}
	}
	i := bytes.Index(p, capsKey)
	if i < 0 {
		return c.w.Write(p)
	}
	c.mu.Lock()
	c.done = true
	c.mu.Unlock()
	at := i + len(capsKey)
	extra := `"session":` + SessionCapabilities + `,"subagents":` + subagentsCapability
	if p[at] != '}' {
		extra += ","
	}
	out := make([]byte, 0, len(p)+len(extra))
	out = append(out, p[:at]...)
	out = append(out, extra...)
	out = append(out, p[at:]...)
	if _, err := c.w.Write(out); err != nil {
		return 0, err
	}
	return len(p), nil
}
