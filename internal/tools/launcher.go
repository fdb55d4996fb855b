package tools

import (
	"strings"

	sdk "github.com/coder/acp-go-sdk"

	"github.com/residentd/residentd/internal/config"
	"github.com/residentd/residentd/internal/session"
)

// Environment variables `residentd mcp` reads.
const (
	EnvSocket     = "RESIDENTD_SOCKET"
	EnvCapability = "RESIDENTD_CAPABILITY"
)

// ServerName is the MCP server's name in session/new and session/load.
const ServerName = "residentd"

// Launcher describes the stdio MCP server every agent process is given.
type Launcher struct {
	Registry *Registry
	Command  string   // the residentd binary
	Args     []string // default ["mcp"]
	Env      []string // extra KEY=VALUE for the server (tests use it)
	Socket   string   // the daemon's socket path, absolute: the server runs in the agent's directory
}

// Servers issues a capability for k's channel and returns the stdio server
// that carries it, and the release that revokes it once the process is gone.
// It has the shape of daemon.MCPServers. On failure it returns no server: the
// agent then runs without tools rather than not at all.
func (l *Launcher) Servers(k session.Key, _ config.Binding) ([]sdk.McpServer, func()) {
	token, err := l.Registry.Issue(Scope{Channel: k.Channel})
	if err != nil {
		return nil, nil
	}
	return l.server(token), func() { l.Registry.Revoke(token) }
}

// Spare issues an unbound capability for a session opened ahead on a
// spare process, before any key: bind scopes it to the key of the turn that
// takes the session, release revokes it (the session was not taken, or its
// process is gone). The MCP server reaches the daemon only when a tool is
// called, so it starts fine with a capability that reads nothing yet. It
// has the shape of daemon.SpareMCPServers; on failure it returns no
// servers and nil funcs, and the spare opens no session ahead.
func (l *Launcher) Spare(_ config.Binding) ([]sdk.McpServer, func(session.Key) error, func()) {
	token, err := l.Registry.IssueUnbound()
	if err != nil {
		return nil, nil, nil
	}
	bind := func(k session.Key) error { return l.Registry.Bind(token, Scope{Channel: k.Channel}) }
	return l.server(token), bind, func() { l.Registry.Revoke(token) }
}

// server is the stdio MCP server carrying token.
func (l *Launcher) server(token string) []sdk.McpServer {
	args := l.Args
	if args == nil {
		args = []string{"mcp"}
	}
	env := []sdk.EnvVariable{
		{Name: EnvSocket, Value: l.Socket},
		{Name: EnvCapability, Value: token},
	}
	for _, kv := range l.Env {
		if name, val, ok := strings.Cut(kv, "="); ok {
			env = append(env, sdk.EnvVariable{Name: name, Value: val})
		}
	}
	srv := sdk.McpServer{Stdio: &sdk.McpServerStdio{
		Name: ServerName, Command: l.Command, Args: append([]string(nil), args...), Env: env,
	}}
	return []sdk.McpServer{srv}
}
