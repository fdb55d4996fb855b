package config

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/residentd/residentd/internal/workspace"
)

// gitRepo is a git repository with one commit, for a worktree binding.
func gitRepo(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "repo")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"init", "-q"}, {"commit", "-q", "--allow-empty", "-m", "first"}} {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		cmd := exec.CommandContext(ctx, "git", append([]string{"-C", dir}, args...)...)
		cmd.Env = append(os.Environ(), "GIT_AUTHOR_NAME=Ann", "GIT_AUTHOR_EMAIL=ann@example.com", "GIT_COMMITTER_NAME=Ann", "GIT_COMMITTER_EMAIL=ann@example.com")
		out, err := cmd.CombinedOutput()
		cancel()
		if err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
	}
	return dir
}

// TestWorkspaceSetting: workspace defaults to shared; worktree needs a dir
// that is a repository's top folder with a commit, and the worktrees'
// folder outside it; each refusal names the binding and what to do.
func TestWorkspaceSetting(t *testing.T) {
	repo := gitRepo(t)
	state := t.TempDir()
	base := func() *Config {
		c := &Config{StateDir: state, Bindings: []Binding{{ID: "b-code", Handle: "@code", Command: "agent", Resident: true, Dir: repo, Workspace: workspace.Worktree}}}
		c.SetDefaults()
		return c
	}
	c := base()
	if err := c.Validate(); err != nil {
		t.Fatalf("a worktree binding of a repository: %v", err)
	}
	if !c.Bindings[0].WorktreeOn() || c.WorktreeRoot() != filepath.Join(state, "worktrees") {
		t.Fatalf("worktree on %v, root %q", c.Bindings[0].WorktreeOn(), c.WorktreeRoot())
	}
	d := &Config{Bindings: []Binding{{ID: "b", Handle: "@b", Command: "agent"}}}
	d.SetDefaults()
	if d.Bindings[0].Workspace != workspace.Shared || d.Bindings[0].WorktreeOn() {
		t.Fatalf("default workspace %q", d.Bindings[0].Workspace)
	}

	notRepo, sub := t.TempDir(), filepath.Join(repo, "sub")
	if err := os.Mkdir(sub, 0o700); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		mut  func(*Config)
		want string
	}{
		{"unknown mode", func(c *Config) { c.Bindings[0].Workspace = "copy" }, `binding "b-code": workspace "copy": use shared or worktree`},
		{"no dir", func(c *Config) { c.Bindings[0].Dir = "" }, `binding "b-code": workspace "worktree" needs dir`},
		{"not a repository", func(c *Config) { c.Bindings[0].Dir = notRepo }, `binding "b-code": workspace "worktree": not a git repository with a commit: "` + notRepo + `"`},
		{"inside a repository", func(c *Config) { c.Bindings[0].Dir = sub }, "not its top; set dir to"},
		{"relative root", func(c *Config) { c.WorkspaceRoot = "worktrees" }, `workspace_root "worktrees" must be an absolute path`},
		{"root inside the repository", func(c *Config) { c.WorkspaceRoot = filepath.Join(repo, ".worktrees") }, "is inside its dir"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := base()
			tc.mut(c)
			err := c.Validate()
			if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Validate = %v, want ErrInvalid saying %q", err, tc.want)
			}
		})
	}
	// A shared binding's dir need be no repository.
	s := base()
	s.Bindings[0].Workspace, s.Bindings[0].Dir = workspace.Shared, notRepo
	if err := s.Validate(); err != nil {
		t.Fatal(err)
	}
}
