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

type simFlags struct {
	p                      sim.ChannelParams
	prefix, evictAt, limit int
	out, writeCh, readCh   string
	json, keep             bool
	team                   teamFlags
}

// teamFlags are sim --team's: the team's days and what is printed.
type teamFlags struct {
	on                bool
	seeds             int
	trace, writeTrace string
}

func (f *simFlags) bind(fs *flag.FlagSet) {
	p := &f.p
	*p = sim.DefaultChannelParams()
	fs.Uint64Var(&p.Seed, "seed", p.Seed, "seed of the generated channel (same seed, same table)")
	fs.IntVar(&p.Messages, "messages", p.Messages, "messages in the channel")
	fs.IntVar(&p.People, "people", p.People, "people posting (besides the agent)")
	fs.IntVar(&p.Mentions, "mentions", p.Mentions, "messages that mention the agent")
	fs.IntVar(&p.Long, "long", p.Long, "log pastes longer than --max-chars")
	fs.IntVar(&p.GapMin, "gap-min", p.GapMin, "fewest messages between two mentions")
	fs.IntVar(&p.GapMax, "gap-max", p.GapMax, "most messages between two mentions")
	fs.IntVar(&p.GapMedian, "gap-median", p.GapMedian, "median messages between two mentions")
	fs.IntVar(&f.prefix, "prefix-tokens", 2120, "tokens of the modeled system prompt + 20 tool definitions")
	fs.IntVar(&f.evictAt, "evict-at", 15, "mention before which the eviction runs restart the daemon (0: no eviction runs)")
	fs.IntVar(&f.limit, "limit", 12, "channel lines shown per mention")
	fs.IntVar(&p.MaxChars, "max-chars", p.MaxChars, "characters kept of a message body")
	fs.StringVar(&f.out, "out", "", "write per-turn rows to FILE (.json for JSON, otherwise CSV)")
	fs.BoolVar(&f.json, "json", false, "print one JSON object keyed by strategy instead of the table")
	fs.StringVar(&f.writeCh, "write-channel", "", "write the channel as JSON lines to FILE")
	fs.StringVar(&f.readCh, "channel", "", "read the channel from FILE (JSON lines) instead of generating it")
	fs.BoolVar(&f.keep, "keep", false, "keep the state directory (agent records, bbolt files) and print its path")
	fs.BoolVar(&f.team.on, "team", false, "replay a team's two working days through the pool under each residency policy instead")
	fs.IntVar(&f.team.seeds, "seeds", 10, "with --team: generated days played (seeds 1..N); the figures are their means")
	fs.StringVar(&f.team.trace, "trace", "", "with --team: play the mentions of FILE (TIME CHANNEL [BINDING] a line) instead")
	fs.StringVar(&f.team.writeTrace, "write-trace", "", "with --team: write the first seed's mentions to FILE in the trace format")
}

// runSim reproduces the token measurement through the real daemon: it
// generates (or reads) a channel, plays it to one binding per strategy with
// the built-in agent recording what it receives, and prints the table.
func runSim(ctx context.Context, e *cmdEnv, f *simFlags) error {
	if f.team.on {
		return runTeamSim(e, f)
	}
	p, stdout, stderr := f.p, e.stdout, e.stderr
	var msgs []sim.Message
	var err error
	if f.readCh != "" {
		file, err := os.Open(f.readCh)
		if err != nil {
			return fmt.Errorf("sim: %w", err)
		}
		msgs, err = sim.ReadChannel(file)
		file.Close()
		if err != nil {
			return err
		}
	} else if msgs, err = sim.Generate(p); err != nil {
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	if f.writeCh != "" {
		if err := writeFile(f.writeCh, func(w io.Writer) error { return sim.WriteChannel(w, msgs) }); err != nil {
			return err
		}
	}

	self, err := os.Executable()
	if err != nil {
		return fmt.Errorf("sim: find the residentd binary for the built-in agent: %w", err)
	}
	dir := "" // sim.Run makes (and removes) a temporary one
	if f.keep {
		if dir, err = os.MkdirTemp("", "residentd-sim-"); err != nil {
			return err
		}
		fmt.Fprintln(stderr, "sim: state kept in", dir)
	}
	r, err := sim.Run(ctx, sim.Options{
		SourceChannel: f.readCh == "" && p == sim.DefaultChannelParams(),
		Messages:      msgs, PrefixTokens: f.prefix, EvictAt: f.evictAt, Limit: f.limit, MaxChars: p.MaxChars,
		AgentCommand: self, AgentArgs: []string{"agent"}, Dir: dir, Progress: stderr,
	})
	if err != nil {
		return err
	}
	if f.out != "" {
		write := r.WriteRowsCSV
		if strings.EqualFold(filepath.Ext(f.out), ".json") {
			write = r.WriteRowsJSON
		}
		if err := writeFile(f.out, write); err != nil {
			return err
		}
	}
	if f.json {
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

// runTeamSim is sim --team: the residency policies on a team's days, in
// virtual time through the real pool, priced by the provider's cache.
func runTeamSim(e *cmdEnv, f *simFlags) error {
	o := sim.TeamOptions{Params: sim.DefaultTeamParams(), Model: sim.DefaultTeamModel()}
	if f.team.trace != "" {
		file, err := os.Open(f.team.trace)
		if err != nil {
			return fmt.Errorf("sim: %w", err)
		}
		o.Trace, err = sim.ReadTrace(file, o.Params.Binding)
		file.Close()
		if err != nil {
			return err
		}
	} else {
		if f.team.seeds < 1 {
			return fmt.Errorf("%w: --seeds %d: at least 1", errUsage, f.team.seeds)
		}
		for s := 1; s <= f.team.seeds; s++ {
			o.Seeds = append(o.Seeds, uint64(s))
		}
	}
	if f.team.writeTrace != "" {
		ms := o.Trace
		if ms == nil {
			var err error
			if ms, err = sim.GenerateTeam(o.Params, o.Seeds[0]); err != nil {
				return err
			}
		}
		if err := writeFile(f.team.writeTrace, func(w io.Writer) error { return sim.WriteTrace(w, ms) }); err != nil {
			return err
		}
	}
	r, err := sim.RunTeam(o)
	if err != nil {
		return err
	}
	if f.json {
		return r.WriteJSON(e.stdout)
	}
	return r.WriteMarkdown(e.stdout)
}
