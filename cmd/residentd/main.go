// Command residentd keeps coding-agent (ACP) sessions warm for a team-chat
// desktop app. It only wires the internal packages: see docs/ARCHITECTURE.md.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"unicode/utf8"

	"github.com/residentd/residentd/client"
	"github.com/residentd/residentd/internal/agent"
)

// version is set at build time with -ldflags "-X main.version=…".
var version = "dev"

// Exit codes a supervisor or script can tell apart.
const (
	exitOK     = 0
	exitError  = 1
	exitUsage  = 2
	exitLocked = 3 // another daemon holds the state
)

// errUsage marks a command-line mistake.
var errUsage = errors.New("usage")

// commands are residentd's subcommands, in the order its usage lists them.
var commands = []*command{
	{name: "serve", synopsis: "serve [flags]",
		short: "run the daemon (no config needed: the built-in agent is bound)",
		flags: withFlags((*serveFlags).bind, runServe)},
	{name: "demo", synopsis: "demo [flags]", args: anyArgs,
		short: "start a daemon on a temporary socket and play a scripted channel",
		flags: withFlags((*demoFlags).bind, runDemo)},
	{name: "sim", synopsis: "sim [flags]",
		short: "reproduce the token simulation through the real daemon",
		flags: withFlags((*simFlags).bind, runSim)},
	{name: "install", synopsis: "install [flags]",
		short: "write the systemd user unit (Linux) or LaunchAgent (macOS)",
		flags: withFlags((*installFlags).bind, runInstall)},
	{name: "uninstall", synopsis: "uninstall [flags]",
		short: "remove them",
		flags: withFlags((*installFlags).bindUser, runUninstall)},
	{name: "completion", synopsis: "completion bash|zsh|fish", args: nargs{1, 1},
		short: "print a shell completion script for bash, zsh or fish", run: runCompletion},
	{name: "repair", synopsis: "repair [--check] [--config FILE] [--state DIR] [FILE]   (the daemon must be stopped)", args: anyArgs,
		short: "copy what is readable of a damaged state file into a new one",
		flags: withFlags((*repairFlags).bind, runRepair)},

	{name: "mention", synopsis: "mention --channel ID [--binding ID] [flags] TEXT...", client: true, args: anyArgs,
		short: "send a mention and stream the reply (asks you the agent's permission requests when the binding's policy is ask)",
		flags: withFlags((*mentionFlags).bind, runMention)},
	{name: "runs", synopsis: "runs [flags]", client: true,
		short: "list queued, running and recently ended runs",
		flags: withFlags(jsonFlag("print the runs as JSON"), runRuns)},
	{name: "attach", synopsis: "attach [flags] RUN_ID", client: true, args: nargs{1, 1},
		short: "follow a run again, from the start or after a sequence number",
		flags: withFlags((*attachFlags).bind, runAttach)},
	{name: "events", synopsis: "events [--after SEQ] [--json] [flags]", client: true,
		short: "follow the feed of every run's start and end (agent runs too), until interrupted",
		flags: withFlags((*eventsFlags).bind, runEvents)},
	{name: "answer", synopsis: "answer [flags] RUN_ID REQUEST_ID OPTION_ID", client: true, args: nargs{3, 3},
		short: "answer a permission request of a run", run: runAnswer},
	{name: "push", synopsis: "push [flags] < messages.ndjson   (one apitype.Message JSON object per line)", client: true,
		short: "push channel messages (JSON lines on stdin; a known id with a new body is an edit)", run: runPush},
	{name: "delete", synopsis: "delete [flags] CHANNEL_ID MESSAGE_ID", client: true, args: nargs{2, 2},
		short: "delete a channel message: no session is shown it again", run: runDelete},
	{name: "sessions", synopsis: "sessions [flags]", client: true,
		short: "list live sessions (JSON)", run: printsJSON((*client.Client).Sessions)},
	{name: "status", synopsis: "status [flags]", client: true,
		short: "show live sessions as a table", run: runStatus},
	{name: "fresh", synopsis: "fresh --channel ID [--binding ID] [--thread ROOT] [flags]", client: true,
		short: "start a (channel, binding) fresh",
		flags: withFlags((*freshFlags).bind, runFresh)},
	{name: "options", synopsis: "options --channel ID [--binding ID] [--clear] [flags] [ID=VALUE...]", client: true, args: anyArgs,
		short: "show or set a (channel, binding)'s session options (model, mode, …)",
		flags: withFlags((*optionsFlags).bind, runOptions)},
	{name: "budgets", synopsis: "budgets [flags]", client: true,
		short: "show the daily budgets and what today has cost", run: runBudgets},
	{name: "cancel", synopsis: "cancel [flags] RUN_ID", client: true, args: nargs{1, 1},
		short: "cancel a running turn", run: runCancel},
	{name: "health", synopsis: "health [flags]", client: true,
		short: "print the daemon's health", run: printsJSON((*client.Client).Health)},
	{name: "log-level", synopsis: "log-level [flags] [debug|info|warn|error]", client: true, args: nargs{0, 1},
		short: "show or set the daemon's log level", run: runLogLevel},
	{name: "reload", synopsis: "reload [--json] [flags]", client: true,
		short: "read the config file again without a restart (as SIGHUP does)",
		flags: withFlags(jsonFlag("print the daemon's answer as JSON"), runReload)},
	{name: "version", synopsis: "version [flags]", client: true,
		short: "print this binary's and the daemon's versions", run: runVersion},

	// Agents run `residentd agent`; it parses its own command line.
	{name: "agent", hidden: true, main: agent.Main,
		short: "the built-in ACP agent, speaking ACP on stdio"},
	{name: "mcp", synopsis: "mcp [flags]", hidden: true,
		short: "the agent-side MCP server the daemon hands each agent",
		flags: withFlags(bindMCP, runMCP)},
}

// lookup finds a command by name; nil when there is none.
func lookup(name string) *command {
	for _, c := range commands {
		if c.name == name {
			return c
		}
	}
	return nil
}

// usage is residentd's own help: the commands, grouped, from the table.
func usage() string {
	var b strings.Builder
	b.WriteString("residentd keeps ACP coding-agent sessions warm for a team chat.\n\nUsage: residentd <command> [flags]\n")
	for _, g := range []struct {
		title  string
		client bool
	}{{"Daemon:", false}, {"Client (talks to the daemon's socket):", true}} {
		fmt.Fprintf(&b, "\n%s\n", g.title)
		for _, c := range commands {
			if !c.hidden && c.client == g.client {
				b.WriteString(summaryLines(c.name, c.short))
			}
		}
	}
	b.WriteString("\nRun \"residentd <command> --help\" for a command's arguments and flags;\n\"residentd --version\" prints the version.\n")
	return b.String()
}

// summaryLines lists one command in usage: its name, then its summary in
// a column, wrapped within 81 columns (as wide as the options line has
// always been).
func summaryLines(name, short string) string {
	const indent, width = "              ", 81
	var b strings.Builder
	line, sep := fmt.Sprintf("  %-12s", name), ""
	for _, w := range strings.Fields(short) {
		if sep != "" && utf8.RuneCountInString(line+sep+w) > width {
			b.WriteString(line + "\n")
			line, sep = indent, ""
		}
		line += sep + w
		sep = " "
	}
	b.WriteString(line + "\n")
	return b.String()
}

func main() {
	os.Exit(run(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}

func run(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage())
		return exitUsage
	}
	name, rest := args[0], args[1:]
	switch name {
	case "help", "-h", "--help":
		fmt.Fprint(stdout, usage())
		return exitOK
	case "--version", "-version":
		fmt.Fprintf(stdout, "residentd %s\n", version)
		return exitOK
	}
	c := lookup(name)
	if c == nil {
		fmt.Fprintf(stderr, "residentd: unknown command %q\n\n%s", name, usage())
		return exitUsage
	}
	if c.main != nil {
		return c.main(rest, stdin, stdout, stderr)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	err := c.exec(ctx, rest, stdin, stdout, stderr)
	var h *helpError
	if errors.As(err, &h) {
		fmt.Fprint(stdout, h.text)
		return exitOK
	}
	if err == nil {
		return exitOK
	}
	// Errors are printed once, here, with one prefix.
	fmt.Fprintln(stderr, "residentd: "+strings.TrimPrefix(err.Error(), "residentd: "))
	switch {
	case errors.Is(err, errUsage):
		return exitUsage
	case errors.Is(err, errLockedState):
		return exitLocked
	}
	return exitError
}
