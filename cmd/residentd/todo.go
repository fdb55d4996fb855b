package main

import (
	"context"
	"errors"
	"io"

	"go.uber.org/zap"

	"github.com/residentd/residentd/internal/config"
	"github.com/residentd/residentd/internal/daemon"
	"github.com/residentd/residentd/internal/store"
)

func cmdSim(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	return errors.New("sim: not built yet")
}
func cmdInstall(args []string, stdout io.Writer, remove bool) error {
	return errors.New("install: not built yet")
}
func mcpServers(cfg *config.Config) daemon.MCPServers { return nil }
func sweepAgents(st *store.Store, log *zap.Logger) {}
