package main

import (
	"os"
	"strconv"
	"testing"

	"github.com/residentd/residentd/internal/testkit"
)

// TestMain lets the test binary double as the residentd binary: with
// RESIDENTD_TEST_MAIN=1 it runs the command line it was given, so tests
// drive a real `residentd serve` child (whose built-in agent is this binary
// again, as `residentd agent`) without a separate build.
func TestMain(m *testing.M) {
	// The escapee first: it is started from an agent, whose environment
	// holds RESIDENTD_TEST_MAIN too.
	testkit.Main(m, testkit.EscapeRole, testkit.Role{Env: "RESIDENTD_TEST_MAIN", Main: func() int {
		// Socket activation needs LISTEN_PID to be the daemon's own pid,
		// which the test cannot know before the fork.
		if os.Getenv("RESIDENTD_TEST_LISTEN_PID") == "1" {
			os.Unsetenv("RESIDENTD_TEST_LISTEN_PID")
			os.Setenv("LISTEN_PID", strconv.Itoa(os.Getpid()))
		}
		return run(os.Args[1:], os.Stdin, os.Stdout, os.Stderr)
	}})
}
