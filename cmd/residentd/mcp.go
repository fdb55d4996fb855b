package main

import (
	"context"
	"flag"
	"os"

	"github.com/residentd/residentd/internal/tools"
)

// bindMCP binds mcp's flags over what the environment says: the daemon sets
// RESIDENTD_SOCKET and RESIDENTD_CAPABILITY; the flags exist for trying it
// by hand.
func bindMCP(cfg *tools.Config, fs *flag.FlagSet) {
	*cfg = tools.ConfigFromEnv(os.Getenv)
	fs.StringVar(&cfg.Socket, "socket", cfg.Socket, "daemon socket (env "+tools.EnvSocket+")")
	fs.StringVar(&cfg.Capability, "capability", cfg.Capability, "capability token (env "+tools.EnvCapability+")")
}

// runMCP is `residentd mcp`: the stdio MCP server the daemon hands every
// agent process.
func runMCP(ctx context.Context, e *cmdEnv, cfg *tools.Config) error {
	cfg.Version = version
	// An unset socket or capability is not fatal: initialize and tools/list
	// still answer, and each tool call says what is missing.
	return tools.ServeIO(ctx, *cfg, e.stdin, e.stdout)
}
