package main

import (
	"io"

	"go.uber.org/zap/zapcore"
)

func zapSync(w io.Writer) zapcore.WriteSyncer { return zapcore.Lock(zapcore.AddSync(w)) }
