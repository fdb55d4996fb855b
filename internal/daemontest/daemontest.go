// Package daemontest runs a real daemon for tests of the packages above it
// (api, tools, client, interop, sim): a bbolt file in the test's directory
// and the bindings the test configures (the built-in agent is this test
// binary re-executed, see testkit), with its channel data beside it. Tests
// serve its API themselves (api.NewServer with Turns, Sessions and Channel
// from here), so the api package's own tests can use it too. It is test
// support: only tests import it.
package daemontest

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/residentd/residentd/apitype"
	"github.com/residentd/residentd/internal/config"
	"github.com/residentd/residentd/internal/daemon"
	"github.com/residentd/residentd/internal/inbox"
	"github.com/residentd/residentd/internal/metrics"
	"github.com/residentd/residentd/internal/store"
)

// Builtin is the built-in agent bound as id, run as this test binary, with
// its session state under dir.
func Builtin(id, dir string) (config.Binding, error) {
	exe, err := os.Executable()
	if err != nil {
		return config.Binding{}, err
	}
	b := config.Builtin(exe, filepath.Join(dir, "agent-"+id))
	b.ID, b.Env = id, map[string]string{"RESIDENTD_TEST_AGENT": "1"}
	return b, nil
}

// FileLoader is a daemon's Options.Reload for a config file: it reads path,
// puts its state in stateDir, sets the defaults and validates, as serve
// does.
func FileLoader(path, stateDir string) func() (*config.Config, error) {
	return func() (*config.Config, error) {
		c, err := config.Load(path)
		if err != nil {
			return nil, err
		}
		if c.StateDir == "" {
			c.StateDir = stateDir
		}
		c.SetDefaults()
		return c, c.Validate()
	}
}

// Options are the daemon's options a test may set; Config, Store and
// Metrics are the harness's. An empty Log is a no-op logger.
type Options = daemon.Options

// Daemon is a daemon, its store and its channel data.
type Daemon struct {
	*daemon.Daemon
	Config  *config.Config
	Store   *store.Store
	Metrics *metrics.Metrics
	Inbox   *inbox.Inbox

	opts Options
}

// Start opens the store in cfg.StateDir and starts a daemon on it. cfg gets
// its defaults and is validated. Close stops it.
func Start(cfg *config.Config, o Options) (*Daemon, error) {
	cfg.SetDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	h := &Daemon{Config: cfg, opts: o}
	if err := h.open(); err != nil {
		return nil, err
	}
	return h, nil
}

// New is Start for a test: a failure ends it, and Close runs at its end.
func New(t testing.TB, cfg *config.Config, o Options) *Daemon {
	t.Helper()
	h, err := Start(cfg, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := h.Close(); err != nil {
			t.Error(err)
		}
	})
	return h
}

func (h *Daemon) open() error {
	st, err := store.Open(filepath.Join(h.Config.StateDir, "residentd.db"), store.Options{})
	if err != nil {
		return err
	}
	o := h.opts
	o.Config, o.Store, o.Metrics = h.Config, st, metrics.New("test", nil)
	d, err := daemon.New(o)
	if err != nil {
		st.Close()
		return err
	}
	h.Daemon, h.Store, h.Metrics, h.Inbox = d, st, o.Metrics, inbox.New(st, o.Metrics, h.Config.Attachments)
	return nil
}

// Restart stops the daemon and starts a new one on the same store, as a
// daemon restart would. Not for a served daemon.
func (h *Daemon) Restart() error {
	if err := h.Close(); err != nil {
		return err
	}
	return h.open()
}

// Close stops the daemon and its agents and closes the store. Idempotent.
func (h *Daemon) Close() error {
	var errs []error
	if h.Daemon != nil {
		h.Daemon.Close(5 * time.Second)
		h.Daemon = nil
	}
	if h.Store != nil {
		if err := h.Store.Close(); err != nil {
			errs = append(errs, err)
		}
		h.Store = nil
	}
	return errors.Join(errs...)
}

// Result is what one turn streamed.
type Result struct {
	Start, Done apitype.Event
	Updates     []apitype.Event // updates, permission and budget events
	Queued      []apitype.Event
	Err         error
}

// Turn runs one turn in process (Daemon.Turn) and collects its events.
func (h *Daemon) Turn(ctx context.Context, req apitype.TurnRequest) Result {
	var r Result
	var mu sync.Mutex
	done, err := h.Daemon.Turn(ctx, req, func(ev apitype.Event) {
		mu.Lock()
		defer mu.Unlock()
		switch ev.Event {
		case apitype.EventStarted:
			r.Start = ev
		case apitype.EventQueued:
			r.Queued = append(r.Queued, ev)
		default:
			r.Updates = append(r.Updates, ev)
		}
	})
	mu.Lock()
	defer mu.Unlock()
	r.Done, r.Err = done, err
	return r
}
