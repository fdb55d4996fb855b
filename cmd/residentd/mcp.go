package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync/atomic"

	"github.com/residentd/residentd/internal/daemon"
	"github.com/residentd/residentd/internal/tools"
)

// cmdMCP is `residentd mcp`: the stdio MCP server the daemon hands every
// agent process. It reads RESIDENTD_SOCKET and RESIDENTD_CAPABILITY, which
// the daemon sets; the flags exist for trying it by hand.
func cmdMCP(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	cfg := tools.ConfigFromEnv(os.Getenv)
	fs := flag.NewFlagSet("mcp", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&cfg.Socket, "socket", cfg.Socket, "daemon socket (env "+tools.EnvSocket+")")
	fs.StringVar(&cfg.Capability, "capability", cfg.Capability, "capability token (env "+tools.EnvCapability+")")
	if err := fs.Parse(args); err != nil {
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("%w: mcp takes no arguments, got %q", errUsage, fs.Args())
	}
	cfg.Version = version
	// An unset socket or capability is not fatal: initialize and tools/list
	// still answer, and each tool call says what is missing.
	return tools.ServeIO(ctx, cfg, stdin, stdout)
}

// mcpWiring gives every agent process `residentd mcp` with a capability for
// its channel. The socket path is set once the listener is bound, which is
// after the daemon is built but before any turn can spawn a process.
type mcpWiring struct {
	reg    *tools.Registry
	socket atomic.Pointer[string]
}

func newMCPWiring(socket string) *mcpWiring {
	w := &mcpWiring{reg: tools.NewRegistry()}
	w.setSocket(socket)
	return w
}

// setSocket records the socket path, made absolute: the MCP server runs in
// the agent's working directory.
func (w *mcpWiring) setSocket(path string) {
	if abs, err := filepath.Abs(path); err == nil && path != "" {
		path = abs
	}
	w.socket.Store(&path)
}

// mcpServers is the daemon's MCP hook; nil (no tools) when the daemon cannot
// name its own executable.
func (w *mcpWiring) mcpServers() daemon.MCPServers {
	self, err := os.Executable()
	if err != nil {
		return nil
	}
	l := &tools.Launcher{Registry: w.reg, Command: self, Args: []string{"mcp"}, Socket: func() string { return *w.socket.Load() }}
	return l.Servers
}
