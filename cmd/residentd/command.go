package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/residentd/residentd/client"
)

// A command is one subcommand: what residentd's usage and its --help say of
// it, the flags and arguments it takes, and what it does with them.
// Parsing, --help, usage errors and the daemon's client are exec's.
type command struct {
	name     string
	synopsis string // its usage line after "residentd ": flags and arguments
	short    string // its one-line summary in residentd's usage
	hidden   bool   // not in residentd's usage: run by the daemon, for agents
	// client commands talk to the daemon's socket: they take --socket, and
	// run gets a client for it.
	client bool
	args   nargs // positional arguments; none unless said
	// flags binds the command's flags on a fresh flag set and returns what
	// runs with them once parsed; a command without flags of its own has
	// run instead.
	flags func(*flag.FlagSet) runFunc
	run   runFunc
	// main is for a command that parses its own command line (agent).
	main func(args []string, stdin io.Reader, stdout, stderr io.Writer) int
}

// runFunc runs a command whose command line is parsed.
type runFunc func(ctx context.Context, e *cmdEnv) error

// cmdEnv is what a command runs with.
type cmdEnv struct {
	args   []string // the positional arguments
	stdin  io.Reader
	stdout io.Writer
	stderr io.Writer
	client *client.Client // client commands only
	table  []*command     // every command (the completion scripts are made from it)
}

// nargs is how many positional arguments a command takes; max < 0 is any
// number (the command's run checks them).
type nargs struct{ min, max int }

var anyArgs = nargs{0, -1}

// errSynopsis is returned by a run for arguments it cannot use: exec makes
// it a usage error that shows the command's synopsis.
var errSynopsis = errors.New("arguments do not fit the synopsis")

// withFlags binds a command's flags into a fresh F and runs it with them.
func withFlags[F any](bind func(*F, *flag.FlagSet), run func(context.Context, *cmdEnv, *F) error) func(*flag.FlagSet) runFunc {
	return func(fs *flag.FlagSet) runFunc {
		f := new(F)
		bind(f, fs)
		return func(ctx context.Context, e *cmdEnv) error { return run(ctx, e, f) }
	}
}

// jsonFlag binds --json, saying what it prints.
func jsonFlag(what string) func(*bool, *flag.FlagSet) {
	return func(asJSON *bool, fs *flag.FlagSet) { fs.BoolVar(asJSON, "json", false, what) }
}

// exec parses args as c's command line and runs c.
func (c *command) exec(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet(c.name, flag.ContinueOnError)
	var sock *string
	if c.client {
		sock = bindSocket(fs)
	}
	run := c.run
	if c.flags != nil {
		run = c.flags(fs)
	}
	if err := c.parse(fs, args); err != nil {
		return err
	}
	if err := c.checkArgs(fs.Args()); err != nil {
		return err
	}
	e := &cmdEnv{args: fs.Args(), stdin: stdin, stdout: stdout, stderr: stderr, table: commands}
	if c.client {
		e.client = &client.Client{Socket: *sock}
		defer e.client.Close()
	}
	err := run(ctx, e)
	if errors.Is(err, errSynopsis) {
		return fmt.Errorf("%w: residentd %s", errUsage, c.synopsis)
	}
	return err
}

// checkArgs refuses a count of positional arguments c does not take.
func (c *command) checkArgs(args []string) error {
	switch n := len(args); {
	case c.args.max == 0 && n > 0:
		return fmt.Errorf("%w: %s takes no arguments, got %q (see residentd %s --help)", errUsage, c.name, strings.Join(args, " "), c.name)
	case n < c.args.min || (c.args.max >= 0 && n > c.args.max):
		return fmt.Errorf("%w: residentd %s", errUsage, c.synopsis)
	}
	return nil
}

// helpError asks run to print a command's help on stdout and exit 0.
type helpError struct{ text string }

func (e *helpError) Error() string { return e.text }

// help renders c's usage: the synopsis, then the flags.
func (c *command) help(fs *flag.FlagSet) string {
	var b bytes.Buffer
	fmt.Fprintf(&b, "Usage: residentd %s\n\nFlags:\n", c.synopsis)
	out := fs.Output()
	fs.SetOutput(&b)
	fs.PrintDefaults()
	fs.SetOutput(out)
	return b.String()
}

// parse parses a command's arguments. Flags may come before, between or
// after the positional arguments ("mention hello --channel ch" works); "--"
// ends the flags, for text that starts with a dash. -h and --help return a
// helpError.
func (c *command) parse(fs *flag.FlagSet, args []string) error {
	fs.SetOutput(new(bytes.Buffer)) // errors are reported once, by run
	var positional []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return &helpError{c.help(fs)}
			}
			return fmt.Errorf("%w: %s %v (see residentd %s --help)", errUsage, c.name, err, c.name)
		}
		rest := fs.Args()
		if len(rest) == 0 {
			break
		}
		// fs.Parse stops at the first positional argument, or after "--".
		if len(args) > len(rest) && args[len(args)-len(rest)-1] == "--" {
			positional = append(positional, rest...)
			break
		}
		positional = append(positional, rest[0])
		args = rest[1:]
	}
	// Re-parse the positionals alone so fs.Args returns them.
	return fs.Parse(append([]string{"--"}, positional...))
}
