package main

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
)

// Every command in the table is described, listed in residentd's usage
// under its group (or, hidden, not at all), answers --help with its own
// usage and exit 0, and refuses an unknown flag with exit 2 before it does
// anything.
func TestCommandTable(t *testing.T) {
	top := usage()
	clientGroup := strings.Index(top, "\nClient (talks to the daemon's socket):\n")
	if !strings.Contains(top, "\nDaemon:\n") || clientGroup < 0 {
		t.Fatalf("usage lacks its groups:\n%s", top)
	}
	seen := map[string]bool{}
	for _, c := range commands {
		t.Run(c.name, func(t *testing.T) {
			if c.name == "" || seen[c.name] {
				t.Fatalf("command %+v: no name, or a name used twice", c)
			}
			seen[c.name] = true
			if c.short == "" || strings.Contains(c.short, "\n") {
				t.Fatalf("summary %q: want one line", c.short)
			}
			if ways := btoi(c.run != nil) + btoi(c.flags != nil) + btoi(c.main != nil); ways != 1 {
				t.Errorf("run, flags and main: %d of them set, want one", ways)
			}
			at := strings.Index(top, fmt.Sprintf("\n  %-12s%s", c.name, strings.Fields(c.short)[0]))
			switch {
			case c.hidden && at >= 0:
				t.Errorf("hidden, but usage lists it:\n%s", top)
			case !c.hidden && at < 0:
				t.Errorf("usage does not list it:\n%s", top)
			case !c.hidden && (at > clientGroup) != c.client:
				t.Errorf("usage lists it in the wrong group (client %v):\n%s", c.client, top)
			}

			var out, errOut bytes.Buffer
			code := run([]string{c.name, "--help"}, strings.NewReader(""), &out, &errOut)
			help, want := out.String(), "Usage: residentd "+c.synopsis+"\n\nFlags:\n"
			if c.main != nil {
				// It parses its own command line: the flag package's help.
				help, want = errOut.String(), "Usage of "+c.name+":\n"
			} else if !strings.HasPrefix(c.synopsis, c.name+" ") {
				t.Errorf("synopsis %q does not start with the command", c.synopsis)
			}
			if code != exitOK || !strings.HasPrefix(help, want) {
				t.Errorf("--help: exit %d, %q; want exit 0 and %q", code, help, want)
			}
			if c.client && !strings.Contains(help, "-socket") {
				t.Errorf("--help of a client command lacks --socket: %q", help)
			}

			out.Reset()
			errOut.Reset()
			code = run([]string{c.name, "--no-such-flag"}, strings.NewReader(""), &out, &errOut)
			if code != exitUsage || !strings.Contains(errOut.String(), "-no-such-flag") {
				t.Errorf("an unknown flag: exit %d, stderr %q; want exit 2 naming it", code, errOut.String())
			}
			if c.main == nil && errOut.String() != fmt.Sprintf("residentd: usage: %s flag provided but not defined: -no-such-flag (see residentd %[1]s --help)\n", c.name) {
				t.Errorf("an unknown flag: stderr %q", errOut.String())
			}
		})
	}
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}
