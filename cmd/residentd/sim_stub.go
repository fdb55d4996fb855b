package main

import (
	"context"
	"errors"
	"io"
)

func cmdSim(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	return errors.New("sim: not built yet")
}
