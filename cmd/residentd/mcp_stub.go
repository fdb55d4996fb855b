package main

import (
	"github.com/residentd/residentd/internal/config"
	"github.com/residentd/residentd/internal/daemon"
)

func mcpServers(cfg *config.Config) daemon.MCPServers { return nil }
