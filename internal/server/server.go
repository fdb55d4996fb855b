// Package server owns a running daemon's lifetime: the API listener and an
// optional loopback metrics listener with their HTTP servers, the service
// manager's readiness, watchdog and status, and the shutdown order. The
// daemon, the API and the store are built by the caller; Run serves them
// until its context ends and then stops them in order.
package server

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"go.uber.org/zap"

	"github.com/residentd/residentd/internal/service"
)

// Daemon is what Run supervises; *daemon.Daemon implements it.
type Daemon interface {
	// Close refuses new runs, gives runs in flight grace to finish, then
	// cancels the rest and stops every agent.
	Close(grace time.Duration) error
	Live() int
	Busy() int
	Queued() int
}

// API is the local API's HTTP server; *api.Server implements it.
type API interface {
	Serve(ln net.Listener) error
	Shutdown(ctx context.Context) error
	Close() error
}

// Server is one daemon's serving setup. Every field but Metrics and
// MetricsListener is required.
type Server struct {
	Daemon   Daemon
	API      API
	Listener net.Listener // the API's Unix socket (bound or socket-activated)
	// Metrics, when MetricsListener is set, is served at GET /metrics on it.
	Metrics         http.Handler
	MetricsListener net.Listener
	// Grace is how long runs in flight may finish after ctx ends; the ones
	// still going then are cancelled and reported shutting_down.
	Grace time.Duration
	Log   *zap.Logger
	// Ready is called once both servers accept (the demo and tests use it).
	Ready func()
}

// Run serves until ctx ends or a server fails, then shuts down: the
// listeners close (no new connections), the daemon gets Grace to let runs
// finish, streams end with their runs, and everything is stopped before Run
// returns. It returns the error that ended serving, if any.
func (s *Server) Run(ctx context.Context) error {
	log := s.Log
	if log == nil {
		log = zap.NewNop()
	}
	errc := make(chan error, 2)
	go func() {
		if err := s.API.Serve(s.Listener); err != nil {
			errc <- fmt.Errorf("server: api on %s: %w", s.Listener.Addr(), err)
		}
	}()
	var metrics *http.Server
	if s.MetricsListener != nil {
		mux := http.NewServeMux()
		mux.Handle("GET /metrics", s.Metrics)
		metrics = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second, BaseContext: func(net.Listener) context.Context { return ctx }}
		go func() {
			if err := metrics.Serve(s.MetricsListener); err != nil && !errors.Is(err, http.ErrServerClosed) {
				errc <- fmt.Errorf("server: metrics on %s: %w", s.MetricsListener.Addr(), err)
			}
		}()
		log.Info("serving metrics", zap.String("addr", s.MetricsListener.Addr().String()))
	}
	service.Ready()
	if s.Ready != nil {
		s.Ready()
	}

	// Watchdog pings (when the service manager asks for them) and a status
	// line for systemctl status.
	every := 10 * time.Second
	if iv, ok := service.WatchdogInterval(); ok {
		every = iv / 2
	}
	tick := time.NewTicker(every)
	defer tick.Stop()
	var runErr error
loop:
	for {
		select {
		case <-ctx.Done():
			break loop
		case err := <-errc:
			runErr = err
			break loop
		case <-tick.C:
			service.Watchdog()
			service.Status(fmt.Sprintf("%d live, %d busy, %d queued", s.Daemon.Live(), s.Daemon.Busy(), s.Daemon.Queued()))
		}
	}
	service.Stopping()
	log.Info("stopping", zap.Duration("grace", s.Grace))

	// 1. No new connections; open streams stay until their runs end.
	shut := make(chan struct{})
	sctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		s.API.Shutdown(sctx)
		close(shut)
	}()
	if metrics != nil {
		metrics.Close()
	}
	// 2. Runs in flight get the grace; the rest are cancelled, agents stop.
	if err := s.Daemon.Close(s.Grace); err != nil {
		log.Warn("stopping agents", zap.Error(err))
	}
	// 3. Every run has ended, so every stream has its last line; give the
	// connections a moment to drain, then close what is left.
	select {
	case <-shut:
	case <-time.After(5 * time.Second):
		cancel()
		s.API.Close()
		<-shut
	}
	log.Info("stopped")
	return runErr
}
