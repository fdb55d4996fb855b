package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/residentd/residentd/internal/sim"
)

// cmdSim reproduces the token measurement through the real daemon: it
// generates (or reads) a channel, plays it to one binding per strategy with
// the built-in agent recording what it receives, and prints the table.
func cmdSim(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("sim", flag.ContinueOnError)
	fs.SetOutput(stderr)
	p := sim.DefaultChannelParams()
	fs.Uint64Var(&p.Seed, "seed", p.Seed, "seed of the generated channel (same seed, same table)")
	fs.IntVar(&p.Messages, "messages", p.Messages, "messages in the channel")
	fs.IntVar(&p.People, "people", p.People, "people posting (besides the agent)")
	fs.IntVar(&p.Mentions, "mentions", p.Mentions, "messages that mention the agent")
	fs.IntVar(&p.Long, "long", p.Long, "log pastes longer than --max-chars")
	fs.IntVar(&p.GapMin, "gap-min", p.GapMin, "fewest messages between two mentions")
	fs.IntVar(&p.GapMax, "gap-max", p.GapMax, "most messages between two mentions")
	fs.IntVar(&p.GapMedian, "gap-median", p.GapMedian, "median messages between two mentions")
	prefix := fs.Int("prefix-tokens", 2120, "tokens of the modeled system prompt + 20 tool definitions")
	evictAt := fs.Int("evict-at", 15, "mention before which the eviction runs restart the daemon (0: no eviction runs)")
	limit := fs.Int("limit", 12, "channel lines shown per mention")
	fs.IntVar(&p.MaxChars, "max-chars", p.MaxChars, "characters kept of a message body")
	out := fs.String("out", "", "write per-turn rows to FILE (.json for JSON, otherwise CSV)")
	asJSON := fs.Bool("json", false, "print one JSON object keyed by strategy instead of the table")
	writeCh := fs.String("write-channel", "", "write the channel as JSON lines to FILE")
	readCh := fs.String("channel", "", "read the channel from FILE (JSON lines) instead of generating it")
	keep := fs.Bool("keep", false, "keep the state directory (agent records, bbolt files) and print its path")
	if err := parse(fs, args); err != nil {
		return err
	}
	if err := noArgs(fs); err != nil {
		return err
	}

	var msgs []sim.Message
	var err error
	if *readCh != "" {
		f, err := os.Open(*readCh)
		if err != nil {
			return fmt.Errorf("sim: %w", err)
		}
		msgs, err = sim.ReadChannel(f)
		f.Close()
		if err != nil {
			return err
		}
	} else if msgs, err = sim.Generate(p); err != nil {
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	if *writeCh != "" {
		if err := writeFile(*writeCh, func(w io.Writer) error { return sim.WriteChannel(w, msgs) }); err != nil {
			return err
		}
	}

	self, err := os.Executable()
	if err != nil {
		return fmt.Errorf("sim: find the residentd binary for the built-in agent: %w", err)
	}
	dir := "" // sim.Run makes (and removes) a temporary one
	if *keep {
		if dir, err = os.MkdirTemp("", "residentd-sim-"); err != nil {
			return err
		}
		fmt.Fprintln(stderr, "sim: state kept in", dir)
	}
	r, err := sim.Run(ctx, sim.Options{
		SourceChannel: *readCh == "" && p == sim.DefaultChannelParams(),
		Messages:      msgs, PrefixTokens: *prefix, EvictAt: *evictAt, Limit: *limit, MaxChars: p.MaxChars,
		AgentCommand: self, AgentArgs: []string{"agent"}, Dir: dir, Progress: stderr,
	})
	if err != nil {
		return err
	}
	if *out != "" {
		write := r.WriteRowsCSV
		if strings.EqualFold(filepath.Ext(*out), ".json") {
			write = r.WriteRowsJSON
		}
		if err := writeFile(*out, write); err != nil {
			return err
		}
	}
	if *asJSON {
		return r.WriteJSON(stdout)
	}
	return r.WriteMarkdown(stdout)
}

// writeFile writes a file through fn, reporting the close error too.
func writeFile(path string, fn func(io.Writer) error) error {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("sim: %w", err)
	}
	if err := fn(f); err != nil {
		f.Close()
		return fmt.Errorf("sim: write %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("sim: write %s: %w", path, err)
	}
	return nil
}
