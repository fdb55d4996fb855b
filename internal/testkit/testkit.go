// Package testkit is what the tests of every package share: a TestMain
// that lets the test binary double as the built-in ACP agent (and as any
// other child a package's tests need), the path of that binary, one
// bounded poll for conditions outside the process, and a filesystem of its
// own a test can fill. Only tests import it.
package testkit

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/residentd/residentd/apitype"
	"github.com/residentd/residentd/internal/agent"
)

// AgentEnv, set to 1 in a child's environment, makes the test binary run
// as the built-in ACP agent on stdio instead of running tests.
const AgentEnv = "RESIDENTD_TEST_AGENT"

// Role is another child the test binary can be: when Env is set in its
// environment, Main runs instead of the tests and its result is the exit
// code.
type Role struct {
	Env  string
	Main func() int
}

// Main is a package's TestMain: the agent, one of roles, or the tests.
func Main(m *testing.M, roles ...Role) {
	Dispatch(roles...)
	os.Exit(m.Run())
}

// Dispatch runs the role the environment asks for and exits; it returns
// when the binary is to run tests. For a TestMain that wraps m.Run.
// Roles come first: a child of the agent (its MCP server) inherits the
// agent's environment too. Before them, a child InSmallFS started mounts
// its filesystem.
func Dispatch(roles ...Role) {
	mountSmallFS()
	for _, r := range roles {
		if os.Getenv(r.Env) != "" {
			os.Exit(r.Main())
		}
	}
	if os.Getenv(AgentEnv) == "1" {
		os.Exit(agent.Main(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
	}
}

// Exe is the test binary, which Main lets run as the agent.
func Exe(t testing.TB) string {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	return exe
}

// Recv receives from ch, failing the test when nothing comes within d;
// what names what was awaited.
func Recv[T any](t testing.TB, ch <-chan T, d time.Duration, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(d):
		t.Fatalf("no %s within %v", what, d)
		var zero T
		return zero
	}
}

// ReadFile is the contents of the file at path; a failure ends the test.
func ReadFile(t testing.TB, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// ShortDir is a new directory under the system's temporary directory,
// removed when the test ends: short enough for a Unix socket's path, which
// the test's own TempDir may not be.
func ShortDir(t testing.TB) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "rd")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// StartPiped starts cmd with a pipe to its stdin and one from its stdout;
// a failure ends the test. The caller waits for cmd.
func StartPiped(t testing.TB, cmd *exec.Cmd) (stdin io.WriteCloser, stdout io.ReadCloser) {
	t.Helper()
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err = cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	return stdin, stdout
}

// AgentEnviron is the environment entry that makes Exe the agent.
func AgentEnviron() string { return AgentEnv + "=1" }

// WaitFor polls cond for up to d and fails the test with what() when it
// never holds. It is for conditions outside the process (a process
// disappearing, a file appearing) that send no signal; anything in the
// process has a channel to wait on instead.
func WaitFor(t testing.TB, d time.Duration, cond func() bool, what func() string) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("after %s: %s", d, what())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Waiting is a what() for WaitFor that names the condition.
func Waiting(format string, args ...any) func() string {
	return func() string { return "timed out waiting for " + fmt.Sprintf(format, args...) }
}

// DecodesAsUnmarshal checks that one apitype.LineDecoder, kept across
// lines (twice over), accepts and refuses each line exactly as
// json.Unmarshal does into a T, and decodes the same value, whatever came
// before it.
func DecodesAsUnmarshal[T any](t testing.TB, lines []string) {
	t.Helper()
	var d apitype.LineDecoder
	for round := range 2 {
		for i, l := range lines {
			var got, want T
			gerr := d.Decode([]byte(l), &got)
			werr := json.Unmarshal([]byte(l), &want)
			if (gerr == nil) != (werr == nil) {
				t.Fatalf("round %d line %d: decode err %v, Unmarshal err %v", round, i, gerr, werr)
			}
			if werr == nil && !reflect.DeepEqual(got, want) {
				t.Fatalf("round %d line %d: decoded %+v, Unmarshal %+v", round, i, got, want)
			}
		}
	}
}

// Records are the lines of the built-in agent's record file (its
// --record) whose method is one of methods (all when none), each decoded
// into a T, in the order the agent wrote them; none while the file does
// not exist yet. A last line the agent is still writing (no newline yet)
// is left for the next read.
func Records[T any](t testing.TB, path string, methods ...string) []T {
	t.Helper()
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []T
	r := bufio.NewReaderSize(f, 1<<20)
	for {
		line, err := r.ReadBytes('\n')
		if err != nil {
			return out // EOF, after a partial line or none
		}
		var head struct{ Method string }
		if err := json.Unmarshal(line, &head); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		if len(methods) > 0 && !slices.Contains(methods, head.Method) {
			continue
		}
		var rec T
		if err := json.Unmarshal(line, &rec); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		out = append(out, rec)
	}
}

// AddCounts adds every int field of from to the same field of to: the
// totals of a test's runs, as each run's counts struct comes in.
func AddCounts[T any](to *T, from T) {
	dst, src := reflect.ValueOf(to).Elem(), reflect.ValueOf(from)
	for i := range dst.NumField() {
		if f := dst.Field(i); f.Kind() == reflect.Int {
			f.SetInt(f.Int() + src.Field(i).Int())
		}
	}
}
