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
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"go.uber.org/zap"

	"github.com/residentd/residentd/apitype"
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

// Reloader reads the config file again and puts it in force;
// *daemon.Daemon implements it.
type Reloader interface {
	Reload() (apitype.ConfigReload, error)
}

// API is the local API's HTTP server; *api.Server implements it.
type API interface {
	Serve(ln net.Listener) error
	Shutdown(ctx context.Context) error
	Close() error
}

// Prober answers whether the loops the daemon depends on still turn:
// Probe returns nil once a round trip through them came back, and an error
// when one failed or ctx ended first. The watchdog pings the service
// manager only after a probe answered.
type Prober interface {
	Probe(ctx context.Context) error
}

// ProbeFunc is a Prober.
type ProbeFunc func(ctx context.Context) error

// Probe calls f.
func (f ProbeFunc) Probe(ctx context.Context) error { return f(ctx) }

// Server is one daemon's serving setup. Daemon, API and Listener are
// required.
type Server struct {
	Daemon   Daemon
	API      API
	Listener net.Listener // the API's Unix socket (bound or socket-activated)
	// Metrics is served at GET /metrics on MetricsAddr when that is set.
	// An address Run cannot listen on (a port already taken) does not stop
	// the daemon: the error is logged once and reported by Listeners, and
	// the API socket keeps serving (its own GET /metrics included).
	Metrics     http.Handler
	MetricsAddr string
	// MetricsListen opens MetricsAddr; nil is net.Listen("tcp", addr).
	MetricsListen func(addr string) (net.Listener, error)
	// Liveness is probed before every watchdog ping. Nil probes the Daemon
	// when it is a Prober, and otherwise makes a GET /v1/health round trip
	// over Listener, through the API's accept loop and handlers into the
	// daemon's pool.
	Liveness Prober
	// Grace is how long runs in flight may finish after ctx ends; the ones
	// still going then are cancelled and reported shutting_down.
	Grace time.Duration
	Log   *zap.Logger
	// Ready is called once both servers accept (the demo and tests use it).
	Ready func()
	// Config is reloaded on SIGHUP and by Reload (the API's and the CLI's
	// way); nil leaves SIGHUP to its default.
	Config Reloader

	mu        sync.Mutex
	listeners []apitype.Listener
}

// Listeners reports the API and metrics listeners, each failed one with
// its error; it is what GET /v1/health shows.
func (s *Server) Listeners() []apitype.Listener {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]apitype.Listener(nil), s.listeners...)
}

func (s *Server) setListener(l apitype.Listener) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i := range s.listeners {
		if s.listeners[i].Name == l.Name {
			s.listeners[i] = l
			return
		}
	}
	s.listeners = append(s.listeners, l)
}

// Run serves until ctx ends or the API server fails, then shuts down: the
// listeners close (no new connections), the daemon gets Grace to let runs
// finish, streams end with their runs, and everything is stopped before Run
// returns. It returns the error that ended serving, if any.
func (s *Server) Run(ctx context.Context) error {
	log := s.Log
	if log == nil {
		log = zap.NewNop()
	}
	errc := make(chan error, 1)
	if s.Config != nil {
		// A service manager's reload (systemctl reload, kill -HUP) rereads
		// the config; each signal is one reload, after the one before.
		hup := make(chan os.Signal, 1)
		signal.Notify(hup, syscall.SIGHUP)
		hupDone := make(chan struct{})
		defer func() { signal.Stop(hup); <-hupDone }()
		hctx, stopHup := context.WithCancel(ctx)
		defer stopHup()
		go func() {
			defer close(hupDone)
			for {
				select {
				case <-hctx.Done():
					return
				case <-hup:
					log.Info("SIGHUP: reloading the config")
					s.Reload() // it logs its outcome
				}
			}
		}()
	}
	s.setListener(apitype.Listener{Name: "api", Addr: s.Listener.Addr().String()})
	// The metrics listener is opened (or has failed) before the socket
	// answers, so the first health request already reports it.
	metrics, metricsDone := s.serveMetrics(ctx, log)
	go func() {
		if err := s.API.Serve(s.Listener); err != nil {
			errc <- fmt.Errorf("server: api on %s: %w", s.Listener.Addr(), err)
		}
	}()
	service.Ready()
	if s.Ready != nil {
		s.Ready()
	}

	wctx, stopWatchdog := context.WithCancel(ctx)
	watchdogDone := make(chan struct{})
	go func() {
		defer close(watchdogDone)
		s.watchdog(wctx, log)
	}()
	var runErr error
	select {
	case <-ctx.Done():
	case runErr = <-errc:
	}
	stopWatchdog()
	<-watchdogDone
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
		<-metricsDone
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

// Reload reloads the config and tells the service manager: RELOADING=1
// with the monotonic time before, READY=1 after, whatever the outcome (a
// refused file leaves the daemon running on the config in force), and the
// outcome in the status line.
func (s *Server) Reload() (apitype.ConfigReload, error) {
	if s.Config == nil {
		return apitype.ConfigReload{}, errors.New("server: no config to reload")
	}
	service.Reloading()
	out, err := s.Config.Reload()
	if err != nil {
		service.Status("config reload refused: " + err.Error())
	} else {
		service.Status(fmt.Sprintf("config reloaded from %s", out.File))
	}
	service.Ready()
	return out, err
}

// serveMetrics opens MetricsAddr and serves GET /metrics on it. Failing to
// listen, or the listener failing later, is logged once and reported in
// Listeners; the daemon goes on without it. done closes when the server's
// goroutine has returned.
func (s *Server) serveMetrics(ctx context.Context, log *zap.Logger) (srv *http.Server, done <-chan struct{}) {
	if s.MetricsAddr == "" || s.Metrics == nil {
		return nil, nil
	}
	listen := s.MetricsListen
	if listen == nil {
		listen = func(addr string) (net.Listener, error) { return net.Listen("tcp", addr) }
	}
	ln, err := listen(s.MetricsAddr)
	if err != nil {
		s.setListener(apitype.Listener{Name: "metrics", Addr: s.MetricsAddr, Error: err.Error()})
		log.Error("metrics listener not opened; serving on without it (GET /metrics on the socket still works): free the port or pass another --metrics-addr",
			zap.String("addr", s.MetricsAddr), zap.Error(err))
		return nil, nil
	}
	addr := ln.Addr().String()
	s.setListener(apitype.Listener{Name: "metrics", Addr: addr})
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", s.Metrics)
	srv = &http.Server{Handler: loopbackOnly(mux), ReadHeaderTimeout: 10 * time.Second, BaseContext: func(net.Listener) context.Context { return ctx }}
	served := make(chan struct{})
	go func() {
		defer close(served)
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			s.setListener(apitype.Listener{Name: "metrics", Addr: addr, Error: err.Error()})
			log.Error("metrics listener failed; serving on without it", zap.String("addr", addr), zap.Error(err))
		}
	}()
	log.Info("serving metrics", zap.String("addr", addr))
	return srv, served
}

// loopbackOnly serves only requests addressed to a loopback name and not
// sent by a browser. A page a browser loads can reach a loopback port
// under a name of its own that resolves there (DNS rebinding); its
// requests then carry that name as Host, and an Origin.
func loopbackOnly(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.Header.Get("Origin") != "" || r.Header.Get("Sec-Fetch-Site") != "":
			http.Error(w, "requests from browsers are refused: the metrics listener is for a local scraper", http.StatusForbidden)
		case !loopbackHost(r.Host):
			http.Error(w, fmt.Sprintf("Host %q is not a loopback name: use localhost, 127.0.0.1 or [::1]", r.Host), http.StatusForbidden)
		default:
			next.ServeHTTP(w, r)
		}
	})
}

// loopbackHost reports whether a Host header names this machine's
// loopback exactly: localhost, an address of 127.0.0.0/8 or ::1 (in
// brackets with a port), with nothing else but an optional numeric port.
// "127.0.0.1:9090.evil.com" is a name, not a loopback address and a port.
func loopbackHost(hostport string) bool {
	host := hostport
	if h, port, err := net.SplitHostPort(hostport); err == nil {
		if _, err := strconv.ParseUint(port, 10, 16); err != nil {
			return false
		}
		host = h
	} else if strings.HasPrefix(host, "[") && strings.HasSuffix(host, "]") {
		host = host[1 : len(host)-1]
	} else if strings.Contains(host, ":") && net.ParseIP(host) == nil {
		return false
	}
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// watchdog probes the daemon every half watchdog interval (every 10s when
// the manager set none, for the status line) and sends WATCHDOG=1 only
// when the probe has answered. A probe that does not come back holds the
// pings until it does: the manager then restarts a wedged daemon.
func (s *Server) watchdog(ctx context.Context, log *zap.Logger) {
	every := 10 * time.Second
	iv, ping := service.WatchdogInterval()
	if ping {
		every = iv / 2
	}
	probe := s.Liveness
	if probe == nil {
		probe = s.defaultProbe()
	}
	tick := time.NewTicker(every)
	defer tick.Stop()
	var (
		result chan error // the probe out, if any
		since  time.Time  // when it went out
		stuck  bool       // logged that the probe is late
	)
	for {
		select {
		case <-ctx.Done():
			return
		case err := <-result:
			result = nil
			if err != nil {
				log.Warn("liveness probe failed; no watchdog ping", zap.Error(err))
				service.Status("not answering: " + err.Error())
				continue
			}
			if stuck {
				stuck = false
				log.Warn("the daemon answers again; watchdog pings resume", zap.Duration("after", time.Since(since)))
			}
			if ping {
				service.Watchdog()
			}
			service.Status(fmt.Sprintf("%d live, %d busy, %d queued", s.Daemon.Live(), s.Daemon.Busy(), s.Daemon.Queued()))
		case <-tick.C:
			if result != nil {
				if !stuck {
					stuck = true
					log.Error("the daemon's loops do not answer the liveness probe; no watchdog pings until they do", zap.Duration("waiting", time.Since(since)))
				}
				service.Status(fmt.Sprintf("not answering for %s; no watchdog ping", time.Since(since).Round(time.Millisecond)))
				continue
			}
			result, since = make(chan error, 1), time.Now()
			go func(out chan<- error) {
				pctx, cancel := context.WithTimeout(ctx, every)
				defer cancel()
				out <- probe.Probe(pctx)
			}(result)
		}
	}
}

// defaultProbe is the Daemon's own probe when it has one, else a
// GET /v1/health over the API socket.
func (s *Server) defaultProbe() Prober {
	if p, ok := s.Daemon.(Prober); ok {
		return p
	}
	addr := s.Listener.Addr()
	c := &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, addr.Network(), addr.String())
		},
		DisableKeepAlives: true,
	}}
	return ProbeFunc(func(ctx context.Context) error {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://residentd/v1/health", nil)
		if err != nil {
			return err
		}
		resp, err := c.Do(req)
		if err != nil {
			return fmt.Errorf("GET /v1/health on %s: %w", addr, err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("GET /v1/health on %s: %s", addr, resp.Status)
		}
		return nil
	})
}
