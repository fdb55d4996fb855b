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

const usage = `residentd keeps ACP coding-agent sessions warm for a team chat.

Usage: residentd <command> [flags]

Daemon:
  serve       run the daemon (no config needed: the built-in agent is bound)
  demo        start a daemon on a temporary socket and play a scripted channel
  sim         reproduce the token simulation through the real daemon
  install     write the systemd user unit (Linux) or LaunchAgent (macOS)
  uninstall   remove them
  repair      copy what is readable of a damaged state file into a new one

Client (talks to the daemon's socket):
  mention     send a mention and stream the reply (asks you the agent's
              permission requests when the binding's policy is ask)
  runs        list queued, running and recently ended runs
  attach      follow a run again, from the start or after a sequence number
  answer      answer a permission request of a run
  push        push channel messages (JSON lines on stdin; a known id with a
              new body is an edit)
  delete      delete a channel message: no session is shown it again
  sessions    list live sessions (JSON)
  status      show live sessions as a table
  fresh       start a (channel, binding) fresh
  options     show or set a (channel, binding)'s session options (model, mode, …)
  budgets     show the daily budgets and what today has cost
  cancel      cancel a running turn
  health      print the daemon's health
  log-level   show or set the daemon's log level
  version     print this binary's and the daemon's versions

Run "residentd <command> --help" for a command's arguments and flags;
"residentd --version" prints the version.
`

func main() {
	os.Exit(run(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}

func run(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return exitUsage
	}
	cmd, rest := args[0], args[1:]
	if cmd == "agent" {
		// Hidden: the built-in ACP agent speaks ACP on stdio.
		return agent.Main(rest, stdin, stdout, stderr)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	var err error
	switch cmd {
	case "mcp":
		// Hidden: the agent-side MCP server the daemon hands each agent.
		err = cmdMCP(ctx, rest, stdin, stdout, stderr)
	case "serve":
		err = cmdServe(ctx, rest, stderr)
	case "demo":
		err = cmdDemo(ctx, rest, stdout, stderr)
	case "sim":
		err = cmdSim(ctx, rest, stdout, stderr)
	case "install":
		err = cmdInstall(rest, stdout, false)
	case "uninstall":
		err = cmdInstall(rest, stdout, true)
	case "repair":
		err = cmdRepair(ctx, rest, stdout)
	case "mention":
		err = cmdMention(ctx, rest, stdin, stdout)
	case "attach":
		err = cmdAttach(ctx, rest, stdin, stdout)
	case "answer":
		err = cmdAnswer(ctx, rest, stdout)
	case "runs":
		err = cmdRuns(ctx, rest, stdout)
	case "version":
		err = cmdVersion(ctx, rest, stdout)
	case "push":
		err = cmdPush(ctx, rest, stdin, stdout)
	case "delete":
		err = cmdDelete(ctx, rest, stdout)
	case "sessions":
		err = cmdSessions(ctx, rest, stdout)
	case "status":
		err = cmdStatus(ctx, rest, stdout)
	case "fresh":
		err = cmdFresh(ctx, rest, stdout)
	case "options":
		err = cmdOptions(ctx, rest, stdout)
	case "budgets":
		err = cmdBudgets(ctx, rest, stdout)
	case "cancel":
		err = cmdCancel(ctx, rest, stdout)
	case "health":
		err = cmdHealth(ctx, rest, stdout)
	case "reload":
		err = cmdReload(ctx, rest, stdout)
	case "log-level":
		err = cmdLogLevel(ctx, rest, stdout)
	case "help", "-h", "--help":
		fmt.Fprint(stdout, usage)
		return exitOK
	case "--version", "-version":
		fmt.Fprintf(stdout, "residentd %s\n", version)
		return exitOK
	default:
		fmt.Fprintf(stderr, "residentd: unknown command %q\n\n%s", cmd, usage)
		return exitUsage
	}
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
