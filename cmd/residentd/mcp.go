package main

import (
	"context"
	"flag"

	"io"
	"os"

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
	if err := parse(fs, args); err != nil {
		return err
	}
	if err := noArgs(fs); err != nil {
		return err
	}
	cfg.Version = version
	// An unset socket or capability is not fatal: initialize and tools/list
	// still answer, and each tool call says what is missing.
	return tools.ServeIO(ctx, cfg, stdin, stdout)
}
