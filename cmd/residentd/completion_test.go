package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/residentd/residentd/internal/testkit"
)

// completionScript is residentd's completion script for shell, written
// to a file.
func completionScript(t *testing.T, shell string) string {
	t.Helper()
	var out, errOut bytes.Buffer
	if code := run([]string{"completion", shell}, nil, &out, &errOut); code != exitOK {
		t.Fatalf("completion %s: exit %d, %s", shell, code, errOut.String())
	}
	path := filepath.Join(t.TempDir(), "residentd."+shell)
	if err := os.WriteFile(path, out.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// shellOrSkip is the path of shell; without it the test skips, but in CI
// (where .ci/run installs bash, zsh and fish) it fails.
func shellOrSkip(t *testing.T, shell string) string {
	t.Helper()
	path, err := exec.LookPath(shell)
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("%s is not installed; CI needs it to check the completion script (.ci/run installs it)", shell)
		}
		t.Skipf("%s is not installed: its completion script is not run here", shell)
	}
	return path
}

// TestCompletionScripts: each shell's script loads in that shell and
// completes every command the usage lists and, after it, its flags.
func TestCompletionScripts(t *testing.T) {
	complete := map[string]func(t *testing.T, script string, words ...string) []string{
		"bash": func(t *testing.T, script string, words ...string) []string {
			cmd := exec.Command(shellOrSkip(t, "bash"), "-c", `source "$0"; COMP_WORDS=("$@"); COMP_CWORD=$(($# - 1)); _residentd; printf '%s\n' "${COMPREPLY[@]}"`, script, "residentd")
			cmd.Args = append(cmd.Args, words...)
			return shellLines(t, cmd)
		},
		"fish": func(t *testing.T, script string, words ...string) []string {
			cmd := exec.Command(shellOrSkip(t, "fish"), "-c", `source $argv[1]; complete -C "$argv[2]"`, script, "residentd "+strings.Join(words, " "))
			var out []string
			for _, l := range shellLines(t, cmd) {
				word, _, _ := strings.Cut(l, "\t")
				out = append(out, word)
			}
			return out
		},
	}
	for shell, complete := range complete {
		t.Run(shell, func(t *testing.T) {
			script := completionScript(t, shell)
			for _, c := range visible(commands) {
				if got := complete(t, script, c.name[:len(c.name)-1]); !slices.Contains(got, c.name) {
					t.Errorf("%q completes to %q, not %s", c.name[:len(c.name)-1], got, c.name)
				}
				got := complete(t, script, c.name, "--")
				for _, f := range completionFlags(c) {
					if !slices.Contains(got, f[0]) {
						t.Errorf("%s -- completes to %q, without %s", c.name, got, f[0])
					}
				}
			}
			if got := complete(t, script, "completion", "z"); !slices.Contains(got, "zsh") {
				t.Errorf("completion z completes to %q", got)
			}
		})
	}
	// zsh's completion cannot run outside an interactive shell: its script
	// must parse, define _residentd, and name every command and flag.
	t.Run("zsh", func(t *testing.T) {
		script := completionScript(t, "zsh")
		out := shellLines(t, exec.Command(shellOrSkip(t, "zsh"), "-c", `autoload -U compinit && compinit -u -d "$1.dump" && source "$1" && whence -w _residentd`, "zsh", script))
		if strings.Join(out, " ") != "_residentd: function" {
			t.Fatalf("sourcing the zsh script: %q", out)
		}
		text := string(testkit.ReadFile(t, script))
		for _, c := range visible(commands) {
			if !strings.Contains(text, "\t\t'"+c.name+":") || !strings.Contains(text, "\t"+c.name+") _arguments") {
				t.Errorf("the zsh script does not complete %s", c.name)
			}
			for _, f := range completionFlags(c) {
				if !strings.Contains(text, "'"+f[0]+"[") {
					t.Errorf("the zsh script does not complete %s %s", c.name, f[0])
				}
			}
		}
	})
	var out, errOut bytes.Buffer
	if code := run([]string{"completion", "tcsh"}, nil, &out, &errOut); code != exitUsage || !strings.Contains(errOut.String(), "bash, zsh and fish") {
		t.Errorf("completion tcsh: exit %d, %q", code, errOut.String())
	}
}

func shellLines(t *testing.T, cmd *exec.Cmd) []string {
	t.Helper()
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s: %v", strings.Join(cmd.Args, " "), err)
	}
	return strings.Fields(string(out))
}
