package acp

import (
	"context"
	"log/slog"

	"go.uber.org/zap"
)

// zapHandler routes the SDK's slog diagnostics (garbage lines, disconnects)
// into the daemon's zap logger, one level down: they describe the agent,
// not the daemon.
type zapHandler struct {
	log   *zap.Logger
	attrs []zap.Field
}

func newSlog(log *zap.Logger) *slog.Logger {
	return slog.New(&zapHandler{log: log.With(zap.String("component", "acp-sdk"))})
}

func (h *zapHandler) Enabled(context.Context, slog.Level) bool { return true }

func (h *zapHandler) Handle(_ context.Context, rec slog.Record) error {
	fields := append([]zap.Field(nil), h.attrs...)
	rec.Attrs(func(at slog.Attr) bool {
		fields = append(fields, zap.Any(at.Key, at.Value.Any()))
		return true
	})
	if rec.Level >= slog.LevelError {
		h.log.Warn(rec.Message, fields...)
	} else {
		h.log.Debug(rec.Message, fields...)
	}
	return nil
}

func (h *zapHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	n := &zapHandler{log: h.log, attrs: append([]zap.Field(nil), h.attrs...)}
	for _, at := range attrs {
		n.attrs = append(n.attrs, zap.Any(at.Key, at.Value.Any()))
	}
	return n
}

func (h *zapHandler) WithGroup(name string) slog.Handler {
	return &zapHandler{log: h.log.With(zap.Namespace(name)), attrs: h.attrs}
}
