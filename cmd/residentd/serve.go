package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"golang.org/x/term"

	"github.com/residentd/residentd/client"
	"github.com/residentd/residentd/internal/api"
	"github.com/residentd/residentd/internal/child"
	"github.com/residentd/residentd/internal/config"
	"github.com/residentd/residentd/internal/daemon"
	"github.com/residentd/residentd/internal/inbox"
	"github.com/residentd/residentd/internal/metrics"
	"github.com/residentd/residentd/internal/pool"
	"github.com/residentd/residentd/internal/server"
	"github.com/residentd/residentd/internal/service"
	"github.com/residentd/residentd/internal/session"
	"github.com/residentd/residentd/internal/store"
	"github.com/residentd/residentd/internal/tools"
	"github.com/residentd/residentd/internal/tracing"
)

var errLockedState = errors.New("state is locked by another residentd")

// serveFlags is everything `residentd serve` takes from the command line.
type serveFlags struct {
	config      string
	socket      string
	state       string
	logLevel    string
	logFormat   string
	metricsAddr string
	maxLive     int
	idle        time.Duration
	grace       time.Duration
	withClaude  bool
	withCodex   bool
}

func (f *serveFlags) bind(fs *flag.FlagSet) {
	fs.StringVar(&f.config, "config", os.Getenv("RESIDENTD_CONFIG"), "JSON config file (default: $XDG_CONFIG_HOME/residentd/config.json when it exists, as install uses; else none, the built-in agent binding only)")
	fs.StringVar(&f.socket, "socket", "", "Unix socket path (default $XDG_RUNTIME_DIR/residentd/residentd.sock)")
	fs.StringVar(&f.state, "state", "", "state directory for the bbolt file (default $XDG_STATE_HOME/residentd)")
	fs.StringVar(&f.logLevel, "log-level", envOr("RESIDENTD_LOG_LEVEL", "info"), "debug, info, warn or error (env RESIDENTD_LOG_LEVEL)")
	fs.StringVar(&f.logFormat, "log-format", envOr("RESIDENTD_LOG_FORMAT", "auto"), "json, console, or auto (console on a terminal)")
	fs.StringVar(&f.metricsAddr, "metrics-addr", "", "also serve /metrics on this loopback TCP address, e.g. 127.0.0.1:9464")
	fs.IntVar(&f.maxLive, "max-live", 0, "live agent processes at once (default 4)")
	fs.DurationVar(&f.idle, "idle-timeout", 0, "stop an agent idle this long (default 30m)")
	fs.BoolVar(&f.withClaude, "with-claude", false, "also bind claude-agent-acp (on PATH) as b-claude, with a one-hour provider cache")
	fs.BoolVar(&f.withCodex, "with-codex", false, "also bind codex-acp (on PATH) as b-codex; it uses the Codex CLI's own login")
	fs.DurationVar(&f.grace, "shutdown-grace", 10*time.Second, "on SIGTERM, how long runs in flight may finish with their normal result; the rest are cancelled (shutting_down)")
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

// defaultStateDir is $XDG_STATE_HOME/residentd or ~/.local/state/residentd.
func defaultStateDir() string {
	if d := os.Getenv("XDG_STATE_HOME"); d != "" {
		return filepath.Join(d, "residentd")
	}
	if d := os.Getenv("STATE_DIRECTORY"); d != "" { // systemd StateDirectory=
		return d
	}
	home, _ := os.UserHomeDir()
	return filepath.Join(home, ".local", "state", "residentd")
}

// newLogger builds the zap logger: JSON in production, console on a terminal.
func newLogger(level, format string, w zapcore.WriteSyncer, isTerm bool) (*zap.Logger, zap.AtomicLevel, error) {
	lvl, err := zap.ParseAtomicLevel(strings.ToLower(level))
	if err != nil {
		return nil, lvl, fmt.Errorf("%w: --log-level %q: use debug, info, warn or error", errUsage, level)
	}
	var enc zapcore.Encoder
	switch {
	case format == "json" || (format == "auto" && !isTerm):
		ec := zap.NewProductionEncoderConfig()
		ec.EncodeTime = zapcore.ISO8601TimeEncoder
		enc = zapcore.NewJSONEncoder(ec)
	case format == "console" || format == "auto":
		ec := zap.NewDevelopmentEncoderConfig()
		ec.EncodeTime = zapcore.TimeEncoderOfLayout("15:04:05.000")
		enc = zapcore.NewConsoleEncoder(ec)
	default:
		return nil, lvl, fmt.Errorf("%w: --log-format %q: use json, console or auto", errUsage, format)
	}
	return zap.New(zapcore.NewCore(enc, w, lvl)), lvl, nil
}

// defaultConfigFile is the config file serve reads when given none, the
// one install passes to the service when it exists:
// $XDG_CONFIG_HOME/residentd/config.json, or ~/.config/residentd/… when
// that is not set (or not absolute); "" with neither.
func defaultConfigFile() string {
	home, _ := os.UserHomeDir()
	ch := configHome(home)
	if !filepath.IsAbs(ch) {
		return ""
	}
	return configFileIn(ch)
}

// configFileIn is the config file under the config home ch.
func configFileIn(ch string) string { return filepath.Join(ch, "residentd", "config.json") }

// existingDefaultConfig is defaultConfigFile when something is at that
// path, "" when nothing is. What is there is not judged here: a FIFO or a
// dangling link is the load's to refuse, not a reason to pass over it.
func existingDefaultConfig() (string, error) {
	p := defaultConfigFile()
	if p == "" {
		return "", nil
	}
	// ENOTDIR: a file where a folder of the path should be; nothing there.
	if _, err := os.Lstat(p); errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR) {
		return "", nil
	} else if err != nil {
		return "", fmt.Errorf("config %s: %w", p, err)
	}
	return p, nil
}

// loadConfig reads the config file, or builds the built-in default, and
// always makes the built-in binding available; each ready binding (the
// claude-agent-acp one of --with-claude, say) is added unless the file
// defines one of its id.
func loadConfig(path, self, stateDir string, ready ...config.Binding) (*config.Config, error) {
	return loadConfigOver(path, self, stateDir, nil, ready...)
}

// loadConfigOver is loadConfig with over (if not nil) setting what the
// command line says over the file, before the defaults and the checks.
func loadConfigOver(path, self, stateDir string, over func(*config.Config), ready ...config.Binding) (*config.Config, error) {
	cfg := &config.Config{}
	if path != "" {
		c, err := config.Load(path)
		if err != nil {
			return nil, err
		}
		cfg = c
	}
	if cfg.StateDir == "" {
		cfg.StateDir = stateDir
	}
	for _, b := range ready {
		if _, ok := cfg.Binding(b.ID); !ok {
			cfg.Bindings = append(cfg.Bindings, b)
		}
	}
	if _, ok := cfg.Binding("b-builtin"); !ok {
		cfg.Bindings = append(cfg.Bindings, config.Builtin(self, cfg.StateDir))
	}
	if over != nil {
		over(cfg)
	}
	cfg.SetDefaults()
	return cfg, cfg.Validate()
}

func runServe(ctx context.Context, e *cmdEnv, f *serveFlags) error {
	stderr := e.stderr
	isTerm := false
	if fd, ok := stderr.(*os.File); ok {
		isTerm = term.IsTerminal(int(fd.Fd()))
	}
	log, level, err := newLogger(f.logLevel, f.logFormat, zapcore.Lock(zapcore.AddSync(stderr)), isTerm)
	if err != nil {
		return err
	}
	defer log.Sync()
	self, err := os.Executable()
	if err != nil {
		return fmt.Errorf("find own executable: %w", err)
	}
	state := f.state
	if state == "" {
		state = defaultStateDir()
	}
	if f.maxLive < 0 {
		return fmt.Errorf("%w: --max-live %d must not be negative (0 keeps the config's)", errUsage, f.maxLive)
	}
	if f.idle < 0 {
		return fmt.Errorf("%w: --idle-timeout %s must not be negative (0 keeps the config's)", errUsage, f.idle)
	}
	if f.config == "" {
		if f.config, err = existingDefaultConfig(); err != nil {
			return err
		}
		if f.config != "" {
			log.Info("reading the default config file (no --config given)", zap.String("config", f.config))
		}
	}
	if f.config != "" {
		if abs, err := filepath.Abs(f.config); err == nil {
			f.config = abs
		}
	}
	load := func() (*config.Config, error) { return f.load(self, state) }
	cfg, err := load()
	if errors.Is(err, config.ErrInvalid) && f.config != "" {
		return fmt.Errorf("config %s: %w", f.config, err) // the load's own errors name it already
	}
	if err != nil {
		return err
	}
	deps := serveDeps{log: log, level: &level, self: self, metricsAddr: f.metricsAddr, grace: f.grace}
	if f.config != "" {
		// A reload reads the file as this start did, the command line's
		// settings over the file's.
		deps.reload, deps.configFile = load, f.config
	}
	return serve(ctx, cfg, deps)
}

// load reads the config as serve runs it: the file (or the built-in
// default), then the command line's settings over it, checked together
// (--max-live against the file's max_processes).
func (f *serveFlags) load(self, state string) (*config.Config, error) {
	cfg, err := loadConfigOver(f.config, self, state, func(c *config.Config) {
		if f.socket != "" {
			c.Socket = f.socket
		}
		if f.maxLive > 0 {
			c.MaxLive = f.maxLive
		}
		if f.idle > 0 {
			c.IdleTimeout = config.Duration(f.idle)
		}
	}, f.ready()...)
	if err != nil {
		return nil, err
	}
	if cfg.Socket == "" {
		cfg.Socket = client.DefaultSocketPath()
	}
	return cfg, nil
}

// ready is the ready bindings the command line asks for.
func (f *serveFlags) ready() []config.Binding {
	var out []config.Binding
	if f.withClaude {
		out = append(out, config.ClaudeAgentACP())
	}
	if f.withCodex {
		out = append(out, config.CodexACP())
	}
	return out
}

type serveDeps struct {
	log         *zap.Logger
	self        string // this executable: agents run `<self> mcp` for their tools
	level       *zap.AtomicLevel
	metricsAddr string
	grace       time.Duration
	listener    net.Listener                       // pre-bound listener (demo, tests); nil = activated or cfg.Socket
	onEvict     func(k session.Key, r pool.Reason) // demo's report of evictions
	ready       func(*api.Server, *daemon.Daemon)  // called once serving
	reload      func() (*config.Config, error)     // reads the config file again; nil: no file
	configFile  string
}

// serve runs the daemon until ctx ends.
func serve(ctx context.Context, cfg *config.Config, deps serveDeps) error {
	log := deps.log
	// The store's file lock comes first: a second daemon must fail here,
	// before it touches the first one's socket.
	path := filepath.Join(cfg.StateDir, "residentd.db")
	st, err := store.Open(path, store.Options{
		MaxWatermarkIDs: cfg.Context.MaxIDs,
		// A read or write that met a damaged page failed alone; say so
		// once per failure, where an operator looks.
		OnDamage: func(err error) { log.Error("store reported damage", zap.Error(err)) },
		// So is each write a full disk refused (its error names the
		// filesystem and its free space), and the first one stored after.
		OnNoSpace: func(err error) {
			log.Error("state file's disk is full: a write was refused, nothing of it stored", zap.String("path", path), zap.Error(err))
		},
		OnWritable: func(f store.Full) {
			log.Info("state file's disk has room again: a write was stored", zap.String("path", path),
				zap.Int64("refused_writes", f.Refused), zap.Duration("full_for", time.Since(f.Since)))
		},
	})
	if errors.Is(err, store.ErrLocked) {
		return fmt.Errorf("%w: %v", errLockedState, err)
	}
	if err != nil {
		return err
	}
	defer st.Close()
	logChecked(log, st.Checked())

	ln := deps.listener
	if ln == nil {
		lns, err := service.ActivatedListeners()
		if err != nil {
			return err
		}
		if len(lns) > 0 {
			ln = lns[0]
			for _, extra := range lns[1:] {
				extra.Close()
			}
			log.Info("using socket-activated listener", zap.String("addr", ln.Addr().String()))
		} else if ln, err = api.Listen(cfg.Socket); err != nil {
			return err
		}
	}

	// Every agent process gets `residentd mcp` with a capability for its
	// channel, pointed at the socket just bound.
	sock := ln.Addr().String()
	if abs, err := filepath.Abs(sock); err == nil {
		sock = abs
	}
	reg := tools.NewRegistry()
	launcher := &tools.Launcher{Registry: reg, Command: deps.self, Args: []string{"mcp"}, Socket: sock}
	m := metrics.New(version, nil) // the daemon plugs in its pool's gauges
	m.Registry.MustRegister(storeDamage(st))
	// What an agent starts and abandons re-parents here, not to PID 1, so it
	// is found and reaped; serve owns the process, so it decides this.
	adopts := false
	if stopReaper, err := child.Subreaper(log.Named("child")); err != nil {
		log.Warn("not a child subreaper; descendants an agent abandons re-parent to PID 1 and are found by their mark only", zap.Error(err))
	} else {
		adopts = true
		defer stopReaper()
	}
	// Traces go where the standard OTEL_* variables say; none by default.
	tp, err := tracing.FromEnv(ctx, version)
	if err != nil {
		ln.Close()
		return fmt.Errorf("%w: traces: %w", errUsage, err)
	}
	if tp != nil {
		log.Info("tracing runs: OTLP over HTTP", zap.String("endpoint", firstEnv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT")))
		// After the daemon's close (its runs' spans ended): what is left is sent.
		defer func() {
			sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			if err := tp.Shutdown(sctx); err != nil {
				log.Warn("traces not all sent at shutdown", zap.Error(err))
			}
		}()
	}
	d, err := daemon.New(daemon.Options{Config: cfg, Store: st, Metrics: m, Log: log, OnEvict: deps.onEvict, MCP: launcher.Servers, MCPSpare: launcher.Spare, Reload: deps.reload, ConfigFile: deps.configFile,
		Tracer: tp.Tracer()})
	if err != nil {
		ln.Close()
		return err
	}
	if deps.metricsAddr != "" {
		if err := checkLoopback(deps.metricsAddr); err != nil {
			ln.Close()
			d.Close(0)
			return err
		}
	}
	// A metrics address that cannot be opened (a port already taken) is
	// reported in /v1/health and logged; the socket serves on.
	run := &server.Server{Daemon: d, Listener: ln, Metrics: m.Handler(), MetricsAddr: deps.metricsAddr, Grace: deps.grace, Log: log, Config: d}
	srv := api.NewServer(api.ServerOptions{Turns: d, Sessions: d, Channel: inbox.New(st, m, cfg.Attachments), Log: log, Level: deps.level, Metrics: m.Handler(), Version: version, Tools: reg,
		Keepalive: time.Duration(cfg.Runs.Keepalive), Listeners: run.Listeners, Config: run,
		// Agents' trees may use only their tools (OPERATIONS.md).
		Agents: &child.Lineage{Self: os.Getpid(), Cgroups: d.Keeper().AgentCgroups(), Adopts: adopts}})
	run.API = srv
	in, gaps := child.ThisFence(d.Keeper().AgentCgroups(), adopts, st.MarkPrefix()).Describe()
	log.Warn("agent fence: in_force tells agents' processes from clients and finds them after a restart; not_covered is what it cannot",
		zap.Strings("in_force", in), zap.Strings("not_covered", gaps))
	cfgFile := deps.configFile
	if cfgFile == "" {
		cfgFile = "none (the built-in binding only)"
	}
	log.Info("serving", zap.String("socket", ln.Addr().String()), zap.String("state", st.Path()), zap.String("config", cfgFile),
		zap.Int("max_live", cfg.MaxLive), zap.Int("bindings", len(cfg.Bindings)), zap.String("version", version))
	if deps.ready != nil {
		run.Ready = func() { deps.ready(srv, d) }
	}
	return run.Run(ctx)
}

// checkLoopback refuses non-loopback metrics addresses: the daemon's API is
// local, and so are its metrics.
func checkLoopback(addr string) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("%w: --metrics-addr %q: %w", errUsage, addr, err)
	}
	if ip := net.ParseIP(host); host != "localhost" && (ip == nil || !ip.IsLoopback()) {
		return fmt.Errorf("%w: --metrics-addr %q must be a loopback address such as 127.0.0.1:9464", errUsage, addr)
	}
	return nil
}

// firstEnv is the first of vars set, or "(default)".
func firstEnv(vars ...string) string {
	for _, v := range vars {
		if s := os.Getenv(v); s != "" {
			return s
		}
	}
	return "(default)"
}
