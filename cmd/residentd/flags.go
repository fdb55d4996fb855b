package main

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"strings"
)

// synopses are each command's usage line: its flags and its positional
// arguments, shown by "residentd <command> --help".
var synopses = map[string]string{
	"serve":     "serve [flags]",
	"demo":      "demo [flags]",
	"sim":       "sim [flags]",
	"install":   "install [flags]",
	"uninstall": "uninstall [flags]",
	"repair":    "repair [--check] [--config FILE] [--state DIR] [FILE]   (the daemon must be stopped)",
	"mcp":       "mcp [flags]",
	"mention":   "mention --channel ID [--binding ID] [flags] TEXT...",
	"push":      "push [flags] < messages.ndjson   (one apitype.Message JSON object per line)",
	"sessions":  "sessions [flags]",
	"status":    "status [flags]",
	"runs":      "runs [flags]",
	"attach":    "attach [flags] RUN_ID",
	"answer":    "answer [flags] RUN_ID REQUEST_ID OPTION_ID",
	"fresh":     "fresh --channel ID [--binding ID] [--thread ROOT] [flags]",
	"options":   "options --channel ID [--binding ID] [--clear] [flags] [ID=VALUE...]",
	"budgets":   "budgets [flags]",
	"cancel":    "cancel [flags] RUN_ID",
	"delete":    "delete [flags] CHANNEL_ID MESSAGE_ID",
	"health":    "health [flags]",
	"version":   "version [flags]",
	"log-level": "log-level [flags] [debug|info|warn|error]",
	"reload":    "reload [--json] [flags]",
}

// helpError asks run to print a command's help on stdout and exit 0.
type helpError struct{ text string }

func (e *helpError) Error() string { return e.text }

// help renders fs's usage: the synopsis, then the flags.
func help(fs *flag.FlagSet) string {
	var b bytes.Buffer
	fmt.Fprintf(&b, "Usage: residentd %s\n\nFlags:\n", synopses[fs.Name()])
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
func parse(fs *flag.FlagSet, args []string) error {
	fs.SetOutput(new(bytes.Buffer)) // errors are reported once, by run
	var positional []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return &helpError{help(fs)}
			}
			return fmt.Errorf("%w: %s %v (see residentd %s --help)", errUsage, fs.Name(), err, fs.Name())
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

// noArgs refuses positional arguments for commands that take none.
func noArgs(fs *flag.FlagSet) error {
	if fs.NArg() > 0 {
		return fmt.Errorf("%w: %s takes no arguments, got %q (see residentd %s --help)", errUsage, fs.Name(), strings.Join(fs.Args(), " "), fs.Name())
	}
	return nil
}

// parseNoArgs parses a command that takes flags only.
func parseNoArgs(fs *flag.FlagSet, args []string) error {
	if err := parse(fs, args); err != nil {
		return err
	}
	return noArgs(fs)
}
