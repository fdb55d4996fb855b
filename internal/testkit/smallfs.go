package testkit

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"
)

// SmallFSEnv, "<bytes>:<dir>" in a test binary's environment, makes it
// mount a filesystem of that many bytes (a tmpfs) on dir before anything
// else (Dispatch), in the mount namespace InSmallFS started it in; it
// exits with smallFSRefused, saying why, when it cannot. The variable is
// removed once the filesystem is mounted: the test's own children (a
// daemon, its agents) use that one.
const SmallFSEnv = "RESIDENTD_TEST_SMALLFS"

// smallFSRefused is the exit code of a child that could not mount.
const smallFSRefused = 77

// smallFS is the directory this process mounted its small filesystem on:
// set in the child InSmallFS runs, "" in every other process.
var smallFS string

// mountSmallFS mounts the filesystem SmallFSEnv asks for, if any.
func mountSmallFS() {
	v := os.Getenv(SmallFSEnv)
	if v == "" {
		return
	}
	os.Unsetenv(SmallFSEnv)
	size, dir, _ := strings.Cut(v, ":")
	n, err := strconv.ParseInt(size, 10, 64)
	if err == nil {
		err = mountTmpfs(dir, n)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "testkit: no small filesystem: %v\n", err)
		os.Exit(smallFSRefused)
	}
	smallFS = dir
}

// InSmallFS runs the top-level test t again in a child process that has a
// filesystem of size bytes of its own, a tmpfs mounted on a new directory,
// and calls body there with that directory: a disk that can fill up, for
// tests of what a full disk does. The test passes, fails or skips as the
// child does (its output is logged). The child is this test binary in a
// mount namespace of its own, and a user namespace of its own when it is
// not run by root, so nothing outside it sees the mount, and the mount
// goes when the child and its children end. Where the namespaces cannot
// be made or the tmpfs cannot be mounted (not Linux; user namespaces
// turned off or confined, a container without CAP_SYS_ADMIN), the test is
// skipped saying why.
func InSmallFS(t *testing.T, size int64, body func(t *testing.T, dir string)) {
	t.Helper()
	if smallFS != "" {
		body(t, smallFS)
		return
	}
	if strings.Contains(t.Name(), "/") {
		t.Fatal("InSmallFS runs a top-level test only")
	}
	dir := t.TempDir()
	var refused []string
	for _, ns := range namespaces() {
		cmd := exec.Command(Exe(t), "-test.run=^"+regexp.QuoteMeta(t.Name())+"$", "-test.v", "-test.count=1")
		if d, ok := t.Deadline(); ok {
			cmd.Args = append(cmd.Args, "-test.timeout="+time.Until(d).Round(time.Second).String())
		}
		cmd.Env = append(os.Environ(), fmt.Sprintf("%s=%d:%s", SmallFSEnv, size, dir))
		cmd.SysProcAttr = ns.attr
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		err := cmd.Run()
		var exit *exec.ExitError
		switch {
		case errors.As(err, &exit) && exit.ExitCode() == smallFSRefused:
			refused = append(refused, fmt.Sprintf("%s: %s", ns.name, strings.TrimSpace(out.String())))
			continue
		case err != nil && !errors.As(err, &exit):
			refused = append(refused, fmt.Sprintf("%s: %v", ns.name, err))
			continue
		case err != nil:
			t.Fatalf("in a filesystem of %d bytes (%s): %v\n%s", size, ns.name, err, out.String())
		case strings.Contains(out.String(), "--- SKIP: "+t.Name()+" "):
			t.Skipf("skipped in a filesystem of %d bytes (%s):\n%s", size, ns.name, out.String())
		}
		t.Logf("ran in a filesystem of %d bytes (%s):\n%s", size, ns.name, out.String())
		return
	}
	if len(refused) == 0 {
		refused = append(refused, "no mount namespaces on "+runtime.GOOS)
	}
	t.Skipf("skipped: this machine gives a test no filesystem of its own to fill (%s)", strings.Join(refused, "; "))
}
