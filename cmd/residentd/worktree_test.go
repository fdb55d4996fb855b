package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/residentd/residentd/internal/testkit"
)

// TestStatusAndFreshShowWorktrees: against a real `residentd serve` with a
// worktree binding, status prints each key's worktree with its branch and
// uncommitted changes, fresh --reset-worktree refuses one with changes
// (exit 1, naming the files) and resets it once they are gone.
func TestStatusAndFreshShowWorktrees(t *testing.T) {
	repo := testkit.GitRepo(t)
	d := startDaemon(t, serveOpts{config: `{"bindings":[{"id":"b-wt","handle":"@agent","command":$EXE,"args":["agent"],
		"env":{"RESIDENTD_TEST_AGENT":"1"},"supervised":true,"resident":true,"dir":"` + repo + `","workspace":"worktree"}]}`})
	cli := func(code int, want string, args ...string) string {
		t.Helper()
		return d.cli(t, "", code, want, args...)
	}
	cli(exitOK, "builtin turn=1", "mention", "--channel", "ch-a", "--binding", "b-wt", "@agent [[write-cwd:notes.txt]]")
	cli(exitOK, "builtin turn=1", "mention", "--channel", "ch-b", "--binding", "b-wt", "@agent look")
	wtA := filepath.Join(d.state, "worktrees", "b-wt", "ch-a")
	status := cli(exitOK, "WORKTREE OF", "status")
	rows := map[string][]string{}
	for _, l := range strings.Split(status, "\n") {
		if f := strings.Fields(l); len(f) == 4 && strings.HasPrefix(f[1], "residentd/") {
			rows[f[0]] = f[1:]
		}
	}
	if a := rows["ch-a/b-wt"]; len(a) != 3 || a[0] != "residentd/b-wt/ch-a" || a[1] != "1" || a[2] != wtA {
		t.Fatalf("status row of ch-a's worktree %q:\n%s", a, status)
	}
	if b := rows["ch-b/b-wt"]; len(b) != 3 || b[1] != "0" {
		t.Fatalf("status row of ch-b's worktree %q:\n%s", b, status)
	}

	cli(exitError, "?? notes.txt", "fresh", "--channel", "ch-a", "--binding", "b-wt", "--reset-worktree")
	if _, err := os.Stat(filepath.Join(wtA, "notes.txt")); err != nil {
		t.Fatalf("the refused reset: %v", err)
	}
	if err := os.Remove(filepath.Join(wtA, "notes.txt")); err != nil {
		t.Fatal(err)
	}
	cli(exitOK, "branch residentd/b-wt/ch-a deleted", "fresh", "--channel", "ch-a", "--binding", "b-wt", "--reset-worktree")
	if _, err := os.Stat(wtA); err == nil {
		t.Fatal("the reset left the folder")
	}
	cli(exitOK, "has no worktree to reset", "fresh", "--channel", "ch-a", "--binding", "b-wt", "--reset-worktree")
}
