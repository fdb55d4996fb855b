package main

import (
	"errors"
	"io"

	"go.uber.org/zap"

	"github.com/residentd/residentd/internal/store"
)

func cmdInstall(args []string, stdout io.Writer, remove bool) error {
	return errors.New("install: not built yet")
}

func sweepAgents(st *store.Store, log *zap.Logger) {}
