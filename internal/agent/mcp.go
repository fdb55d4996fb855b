package agent

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"time"
	"unicode/utf8"

	acp "github.com/coder/acp-go-sdk"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// truncationMarker is the tail of a cut context line; seeing it makes the
// built-in agent fetch the full message the way a real agent would.
const truncationMarker = "channel_history has the full message"

// historyTimeout bounds the agent's whole MCP round trip.
const historyTimeout = 30 * time.Second

// fetchHistory connects to the first stdio MCP server of the session, calls
// channel_history (in the mention's thread when it names one) and reports
// "history=<rows> full=<runes of the longest body>", or "history=error" with
// the reason as a thought.
func (b *builtin) fetchHistory(ctx context.Context, id, prompt string, raw json.RawMessage) string {
	var servers []acp.McpServer
	if err := json.Unmarshal(raw, &servers); err != nil {
		return ""
	}
	var srv *acp.McpServerStdio
	for _, s := range servers {
		if s.Stdio != nil {
			srv = s.Stdio
			break
		}
	}
	if srv == nil {
		return ""
	}
	rows, full, err := callHistory(ctx, srv, threadOf(prompt))
	if err != nil {
		b.thought(ctx, id, "channel_history", "", err)
		return "history=error"
	}
	return fmt.Sprintf("history=%d full=%d", rows, full)
}

func callHistory(ctx context.Context, srv *acp.McpServerStdio, thread string) (rows, full int, err error) {
	ctx, cancel := context.WithTimeout(ctx, historyTimeout)
	defer cancel()
	cmd := exec.Command(srv.Command, srv.Args...)
	cmd.Env = os.Environ()
	for _, e := range srv.Env {
		cmd.Env = append(cmd.Env, e.Name+"="+e.Value)
	}
	client := mcp.NewClient(&mcp.Implementation{Name: "residentd-builtin", Version: "1"}, nil)
	cs, err := client.Connect(ctx, &mcp.CommandTransport{Command: cmd}, nil)
	if err != nil {
		return 0, 0, fmt.Errorf("connect to MCP server %q: %w", srv.Name, err)
	}
	defer cs.Close()
	args := map[string]any{}
	if thread != "" {
		args["thread_root_id"] = thread
	}
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "channel_history", Arguments: args})
	if err != nil {
		return 0, 0, fmt.Errorf("call channel_history: %w", err)
	}
	if res.IsError {
		var msg []string
		for _, c := range res.Content {
			if t, ok := c.(*mcp.TextContent); ok {
				msg = append(msg, t.Text)
			}
		}
		return 0, 0, fmt.Errorf("channel_history failed: %s", strings.Join(msg, " "))
	}
	data, err := json.Marshal(res.StructuredContent)
	if err != nil {
		return 0, 0, err
	}
	var page struct {
		Messages []struct {
			Body string `json:"body"`
		} `json:"messages"`
	}
	if err := json.Unmarshal(data, &page); err != nil {
		return 0, 0, fmt.Errorf("channel_history output: %w", err)
	}
	for _, m := range page.Messages {
		full = max(full, utf8.RuneCountInString(m.Body))
	}
	return len(page.Messages), full, nil
}

// threadOf reads thread_root_id from the mention payload line, "" if none.
func threadOf(prompt string) string {
	for _, line := range strings.Split(prompt, "\n") {
		if !strings.HasPrefix(line, `{"channel_id"`) {
			continue
		}
		var p struct {
			Thread *string `json:"thread_root_id"`
		}
		if json.Unmarshal([]byte(line), &p) == nil && p.Thread != nil {
			return *p.Thread
		}
	}
	return ""
}
