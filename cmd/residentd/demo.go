package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/residentd/residentd/apitype"
	"github.com/residentd/residentd/client"
	"github.com/residentd/residentd/internal/api"
	"github.com/residentd/residentd/internal/config"
	"github.com/residentd/residentd/internal/daemon"
	"github.com/residentd/residentd/internal/pool"
	"github.com/residentd/residentd/internal/session"
)

type demoFlags struct{ keep, verbose bool }

func (f *demoFlags) bind(fs *flag.FlagSet) {
	fs.BoolVar(&f.keep, "keep", false, "keep the temporary state directory")
	fs.BoolVar(&f.verbose, "v", false, "print the daemon's logs")
}

// runDemo starts a daemon on a temporary socket with the built-in agent and
// plays a short scripted channel through it over the socket: a cold first
// mention, warm follow-ups, a capacity eviction when a fifth channel
// arrives, and a restored session.
func runDemo(ctx context.Context, e *cmdEnv, f *demoFlags) error {
	stdout, stderr := e.stdout, e.stderr
	dir, err := os.MkdirTemp("", "residentd-demo-")
	if err != nil {
		return err
	}
	if !f.keep {
		defer os.RemoveAll(dir)
	}
	self, err := os.Executable()
	if err != nil {
		return err
	}
	cfg := &config.Config{StateDir: dir, Socket: filepath.Join(dir, "s.sock"), MaxLive: 4}
	cfg.Bindings = []config.Binding{config.Builtin(self, dir)}
	cfg.SetDefaults()
	if err := cfg.Validate(); err != nil {
		return err
	}
	log := zap.NewNop()
	if f.verbose {
		log, _, _ = newLogger("info", "console", zapcore.Lock(zapcore.AddSync(stderr)), true)
	}
	ln, err := api.Listen(cfg.Socket)
	if err != nil {
		return err
	}

	var mu sync.Mutex
	var evictions []string
	ready := make(chan struct{})
	sctx, stop := context.WithCancel(ctx)
	defer stop()
	served := make(chan error, 1)
	go func() {
		served <- serve(sctx, cfg, serveDeps{
			log: log, self: self, grace: 5 * time.Second, listener: ln,
			onEvict: func(k session.Key, r pool.Reason) {
				mu.Lock()
				evictions = append(evictions, fmt.Sprintf("evicted %s (%s)", k, r))
				mu.Unlock()
			},
			ready: func(*api.Server, *daemon.Daemon) { close(ready) },
		})
	}()
	select {
	case <-ready:
	case err := <-served:
		return fmt.Errorf("demo daemon did not start: %w", err)
	}

	c := &client.Client{Socket: cfg.Socket}
	defer c.Close()
	fmt.Fprintf(stdout, "residentd demo: daemon on %s, built-in agent, at most %d live processes\n\n", cfg.Socket, cfg.MaxLive)

	t0 := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
	seq := 0
	post := func(ch, author, body string) string {
		seq++
		id := fmt.Sprintf("m%03d", seq)
		kind := apitype.AuthorUser
		if author == "@agent" {
			kind = apitype.AuthorAgent
		}
		if _, err := c.PutMessages(ctx, []apitype.Message{{ID: id, Channel: ch, Author: author, AuthorKind: kind,
			CreatedAt: t0.Add(time.Duration(seq) * time.Minute), Body: body}}); err != nil {
			fmt.Fprintf(stdout, "push failed: %v\n", err)
		}
		return id
	}
	turnNo := 0
	mention := func(ch, author, text string) error {
		id := post(ch, author, text)
		turnNo++
		done, err := c.Turn(ctx, apitype.TurnRequest{Channel: ch, Binding: "b-builtin", MessageID: id, Text: text}, nil)
		if err != nil {
			return fmt.Errorf("turn %d in %s: %w", turnNo, ch, err)
		}
		ctxLine := "no context block"
		if done.Context != nil && done.Context.Header != "none" {
			ctxLine = fmt.Sprintf("%d lines, %d chars (%s)", done.Context.Lines, done.Context.Chars, done.Context.Header)
		}
		fmt.Fprintf(stdout, "turn %2d  %-12s %-8s  %-30s prompt %5d B  reply: %s\n", turnNo, ch, done.Shape, ctxLine, done.Context.PromptBytes, done.Text)
		post(ch, "@agent", done.Text)
		mu.Lock()
		for _, e := range evictions {
			fmt.Fprintf(stdout, "         %s\n", e)
		}
		evictions = nil
		mu.Unlock()
		return nil
	}

	script := []func() error{
		func() error {
			post("ch-backend", "aiko", "I think the cache key needs the locale, otherwise ja users get en pages")
			post("ch-backend", "ben", "the refund spec failed twice on main this morning")
			return mention("ch-backend", "carla", "@agent why is the refund spec flaky? look at the last runs")
		},
		func() error {
			post("ch-backend", "ben", "it passed on retry, so probably timing")
			return mention("ch-backend", "carla", "@agent find where the webhook retry count is set")
		},
		func() error { return mention("ch-backend", "aiko", "@agent and is it configurable per tenant?") },
		func() error { return mention("ch-frontend", "dev", "@agent the locale switcher flickers on load") },
		func() error { return mention("ch-infra", "erin", "@agent which node pool runs the workers?") },
		func() error { return mention("ch-docs", "aiko", "@agent is the API page up to date?") },
		func() error { return mention("ch-mobile", "ben", "@agent the push token refresh fails on android") },
		func() error {
			post("ch-backend", "ben", "retry count is in config/webhooks.yml, default 5")
			return mention("ch-backend", "carla", "@agent so can we lower it for the refund hook?")
		},
	}
	for _, step := range script {
		if err := step(); err != nil {
			stop()
			<-served
			return err
		}
	}
	fmt.Fprintln(stdout, "\nsessions:")
	if err := runStatus(ctx, &cmdEnv{stdout: stdout, client: c}); err != nil {
		return err
	}
	stop()
	if err := <-served; err != nil {
		return err
	}
	mu.Lock()
	for _, e := range evictions {
		fmt.Fprintf(stdout, "%s\n", e)
	}
	mu.Unlock()
	return nil
}
