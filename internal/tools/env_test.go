package tools_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	sdk "github.com/coder/acp-go-sdk"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"github.com/residentd/residentd/apitype"
	"github.com/residentd/residentd/client"
	"github.com/residentd/residentd/internal/api"
	"github.com/residentd/residentd/internal/config"
	"github.com/residentd/residentd/internal/daemon"
	"github.com/residentd/residentd/internal/daemontest"
	"github.com/residentd/residentd/internal/session"
	"github.com/residentd/residentd/internal/store"
	"github.com/residentd/residentd/internal/testkit"
	"github.com/residentd/residentd/internal/tools"
)

// TestMain lets the test binary double as `residentd mcp` and as the
// built-in agent, so the end-to-end tests run this repo's code in real child
// processes. The MCP switch comes first: the agent's children inherit
// RESIDENTD_TEST_AGENT.
func TestMain(m *testing.M) {
	testkit.Main(m, testkit.Role{Env: "RESIDENTD_TEST_MCP", Main: func() int {
		if err := tools.ServeIO(context.Background(), tools.ConfigFromEnv(os.Getenv), os.Stdin, os.Stdout); err != nil {
			fmt.Fprintln(os.Stderr, "mcp:", err)
			return 1
		}
		return 0
	}})
}

// env is a daemon with the tool registry on a real socket and bbolt file.
type env struct {
	t      *testing.T
	socket string
	reg    *tools.Registry
	st     *store.Store
	d      *daemon.Daemon
	c      *client.Client

	mu     sync.Mutex
	issued map[session.Key][]string // capability tokens handed out, per key
}

// builtinBinding runs this test binary as the built-in agent.
func builtinBinding(t *testing.T, id, dir string) config.Binding {
	t.Helper()
	b, err := daemontest.Builtin(id, dir)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func newEnv(t *testing.T, bindings ...func(dir string) config.Binding) *env {
	t.Helper()
	return newEnvWith(t, nil, bindings...)
}

// newEnvWith is newEnv whose daemon tells onSpare of every spare process
// as it becomes ready.
func newEnvWith(t *testing.T, onSpare func(binding string, pid int), bindings ...func(dir string) config.Binding) *env {
	t.Helper()
	dir := t.TempDir()
	e := &env{t: t, socket: filepath.Join(testkit.ShortDir(t), "s.sock"), reg: tools.NewRegistry(), issued: map[session.Key][]string{}}

	cfg := &config.Config{StateDir: dir, AgentGrace: config.Duration(2 * time.Second)}
	for _, b := range bindings {
		cfg.Bindings = append(cfg.Bindings, b(dir))
	}
	if len(cfg.Bindings) == 0 {
		cfg.Bindings = []config.Binding{builtinBinding(t, "b-builtin", dir)}
	}
	l := &tools.Launcher{Registry: e.reg, Command: testkit.Exe(t), Args: []string{"mcp"}, Env: []string{"RESIDENTD_TEST_MCP=1"}, Socket: e.socket}
	hook := func(k session.Key, b config.Binding) ([]sdk.McpServer, func()) {
		servers, release := l.Servers(k, b)
		for _, s := range servers {
			for _, v := range s.Stdio.Env {
				if v.Name == tools.EnvCapability {
					e.mu.Lock()
					e.issued[k] = append(e.issued[k], v.Value)
					e.mu.Unlock()
				}
			}
		}
		return servers, release
	}
	// A spare's session opened ahead: its capability counts as the key's
	// once a turn binds it.
	spareHook := func(b config.Binding) ([]sdk.McpServer, func(session.Key) error, func()) {
		servers, bind, release := l.Spare(b)
		if bind == nil {
			return servers, nil, release
		}
		var token string
		for _, s := range servers {
			for _, v := range s.Stdio.Env {
				if v.Name == tools.EnvCapability {
					token = v.Value
				}
			}
		}
		return servers, func(k session.Key) error {
			if err := bind(k); err != nil {
				return err
			}
			e.mu.Lock()
			e.issued[k] = append(e.issued[k], token)
			e.mu.Unlock()
			return nil
		}, release
	}
	log := zaptest.NewLogger(t, zaptest.Level(zap.WarnLevel))
	h := daemontest.New(t, cfg, daemontest.Options{Log: log, MCP: hook, MCPSpare: spareHook, OnSpare: onSpare})
	e.st, e.d = h.Store, h.Daemon
	ln, err := api.Listen(e.socket)
	if err != nil {
		t.Fatal(err)
	}
	srv := api.NewServer(api.ServerOptions{Turns: h, Sessions: h, Channel: h.Inbox, Log: log, Tools: e.reg})
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	e.c = &client.Client{Socket: e.socket}
	t.Cleanup(func() {
		e.c.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		srv.Shutdown(ctx)
		<-served
		h.Close()
	})
	return e
}

// issue hands out a capability for ch, as the daemon does at spawn.
func (e *env) issue(ch string) string {
	e.t.Helper()
	tok, err := e.reg.Issue(tools.Scope{Channel: ch})
	if err != nil {
		e.t.Fatal(err)
	}
	return tok
}

func (e *env) tokens(k session.Key) []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]string(nil), e.issued[k]...)
}

var base = time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)

// msg is a user message of ch posted i seconds after base.
func msg(ch, id string, i int, body string) apitype.Message {
	return apitype.Message{ID: id, Channel: ch, Author: "aiko", AuthorKind: apitype.AuthorUser, CreatedAt: base.Add(time.Duration(i) * time.Second), Body: body}
}

func (e *env) put(msgs ...apitype.Message) {
	e.t.Helper()
	if _, err := e.c.PutMessages(context.Background(), msgs); err != nil {
		e.t.Fatal(err)
	}
}

// connect runs the MCP server for cfg in process and returns a client
// session on it.
func connect(t *testing.T, cfg tools.Config) *mcp.ClientSession {
	t.Helper()
	ctx := context.Background()
	st, ct := mcp.NewInMemoryTransports()
	ss, err := tools.NewServer(cfg).Connect(ctx, st, nil)
	if err != nil {
		t.Fatal(err)
	}
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "1"}, nil).Connect(ctx, ct, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cs.Close()
		ss.Wait()
	})
	return cs
}

// call calls a tool and returns its result, failing on protocol errors.
func call(t *testing.T, cs *mcp.ClientSession, name string, args map[string]any) *mcp.CallToolResult {
	t.Helper()
	res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: name, Arguments: args})
	if err != nil {
		t.Fatalf("%s(%v): %v", name, args, err)
	}
	return res
}

func text(res *mcp.CallToolResult) string {
	var parts []string
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			parts = append(parts, tc.Text)
		}
	}
	return strings.Join(parts, "\n")
}

// structured decodes a successful result's structured output into out.
func structured(t *testing.T, res *mcp.CallToolResult, out any) {
	t.Helper()
	if res.IsError {
		t.Fatalf("tool error: %s", text(res))
	}
	data, err := json.Marshal(res.StructuredContent)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(data, out); err != nil {
		t.Fatalf("structured output %s: %v", data, err)
	}
}

// history calls channel_history and decodes the page.
func history(t *testing.T, cs *mcp.ClientSession, args map[string]any) (apitype.HistoryPage, string) {
	t.Helper()
	res := call(t, cs, tools.ToolHistory, args)
	var p apitype.HistoryPage
	structured(t, res, &p)
	return p, text(res)
}
