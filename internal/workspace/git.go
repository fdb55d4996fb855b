package workspace

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/residentd/residentd/internal/child"
)

// Bounds of one git command.
const (
	// DefaultTimeout bounds a git command that makes, removes or reads a
	// worktree or a branch (a post-checkout hook runs within it).
	DefaultTimeout = 30 * time.Second
	// DefaultStatusTimeout bounds one `git status`: a listing asks it of
	// every worktree.
	DefaultStatusTimeout = 5 * time.Second
	// checkTimeout bounds the check of a binding's dir at config load.
	checkTimeout = 10 * time.Second
)

// gitEnvDropped are the variables that would point git at another
// repository, index or work tree than the one it is run in.
var gitEnvDropped = []string{"GIT_DIR=", "GIT_WORK_TREE=", "GIT_INDEX_FILE=", "GIT_COMMON_DIR=", "GIT_OBJECT_DIRECTORY=",
	"GIT_ALTERNATE_OBJECT_DIRECTORIES=", "GIT_NAMESPACE=", "GIT_CEILING_DIRECTORIES=", "GIT_PREFIX="}

// gitEnv is the daemon's environment for git: no variable that moves its
// repository, no prompt for credentials, messages in English (they are
// parsed and quoted), and no optional lock (status would otherwise
// refresh the index an agent's own git uses).
func gitEnv() []string {
	env := make([]string, 0, len(os.Environ())+3)
	for _, kv := range os.Environ() {
		drop := false
		for _, p := range gitEnvDropped {
			if strings.HasPrefix(kv, p) {
				drop = true
				break
			}
		}
		if !drop {
			env = append(env, kv)
		}
	}
	return append(env, "GIT_TERMINAL_PROMPT=0", "LC_ALL=C", "GIT_OPTIONAL_LOCKS=0")
}

// git runs git with args in dir within timeout (and ctx) and returns its
// output. git runs in a process group of its own, killed whole when the
// time is up (a hook it started included), and is reaped before git
// returns. The error names the command, the folder and what git said.
func git(ctx context.Context, timeout time.Duration, dir string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "git", append([]string{"-C", dir}, args...)...)
	cmd.Env = gitEnv()
	cmd.Stdin = nil
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 2 * time.Second
	err := child.Run(cmd)
	if err != nil {
		what := strings.TrimSpace(errOut.String())
		if ctx.Err() != nil {
			what = fmt.Sprintf("no answer within %s", timeout)
		}
		if errors.Is(err, exec.ErrNotFound) {
			what = "git is not installed (not found on PATH)"
		}
		return out.String(), fmt.Errorf("git %s in %s: %w: %s", strings.Join(args, " "), dir, err, what)
	}
	return out.String(), nil
}

// CheckRepo reports why dir cannot give worktrees: it must be the top
// folder of a git working tree (not a folder inside one, not a bare
// repository) whose HEAD has a commit. The error wraps ErrNotRepository
// and says what to do.
func CheckRepo(dir string) error {
	ctx := context.Background()
	if !filepath.IsAbs(dir) {
		return fmt.Errorf("%w: dir %q must be an absolute path", ErrNotRepository, dir)
	}
	top, err := git(ctx, checkTimeout, dir, "rev-parse", "--show-toplevel")
	if err != nil {
		return fmt.Errorf("%w: %q: %w; run git init there and commit, or use workspace \"shared\"", ErrNotRepository, dir, err)
	}
	top = strings.TrimSpace(top)
	if !sameDir(top, dir) {
		return fmt.Errorf("%w: %q is a folder inside the repository %q, not its top; set dir to %q", ErrNotRepository, dir, top, top)
	}
	if _, err := git(ctx, checkTimeout, dir, "rev-parse", "--verify", "--quiet", "HEAD^{commit}"); err != nil {
		return fmt.Errorf("%w: %q has no commit yet, and a worktree starts at one; commit something first", ErrNotRepository, dir)
	}
	return nil
}

// sameDir reports whether a and b are the same folder, through symlinks.
func sameDir(a, b string) bool {
	ra, err1 := filepath.EvalSymlinks(a)
	rb, err2 := filepath.EvalSymlinks(b)
	return err1 == nil && err2 == nil && ra == rb
}

// status lists what `git status --porcelain` says has changed in the
// worktree at path (two status letters, a space, the path; a rename's
// new path), within timeout.
func status(ctx context.Context, timeout time.Duration, path string) ([]string, error) {
	out, err := git(ctx, timeout, path, "status", "--porcelain=v1", "-z", "--untracked-files=normal")
	if err != nil {
		return nil, err
	}
	var files []string
	fields := strings.Split(out, "\x00")
	for i := 0; i < len(fields); i++ {
		f := fields[i]
		if len(f) < 4 {
			continue
		}
		files = append(files, f)
		if f[0] == 'R' || f[0] == 'C' {
			i++ // the path it was renamed or copied from
		}
	}
	return files, nil
}

// branchExists reports whether repo has the branch.
func branchExists(ctx context.Context, repo, branch string) bool {
	_, err := git(ctx, DefaultTimeout, repo, "rev-parse", "--verify", "--quiet", "refs/heads/"+branch)
	return err == nil
}
