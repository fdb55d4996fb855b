package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/residentd/residentd/apitype"
	"github.com/residentd/residentd/client"
	"github.com/residentd/residentd/internal/child"
	"github.com/residentd/residentd/internal/testkit"
)

// The set-up the tests of this package share: the test binary as residentd,
// its children, a daemon serving on a socket of its own, and residentd's
// command line run in this process.

// syncBuffer collects a child's output while the test reads it.
type syncBuffer struct {
	mu      sync.Mutex
	b       bytes.Buffer
	changed chan struct{} // closed and replaced on every write
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.changed != nil {
		close(s.changed)
		s.changed = nil
	}
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// snapshot returns the text so far and a channel closed by the next write.
func (s *syncBuffer) snapshot() (string, <-chan struct{}) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.changed == nil {
		s.changed = make(chan struct{})
	}
	return s.b.String(), s.changed
}

// proc is a residentd child process.
type proc struct {
	cmd  *exec.Cmd
	out  *syncBuffer // stdout and stderr
	done chan struct{}
}

// sockDir is a short directory for sockets (t.TempDir can exceed sun_path).
func sockDir(t *testing.T) string {
	t.Helper()
	d, err := os.MkdirTemp("", "rd")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(d) })
	return d
}

// noConfigHome is a config home that holds nothing.
const noConfigHome = "/nonexistent/residentd-test-config-home"

// childEnv is the test's environment without anything a service manager
// may have addressed to the test process itself.
func childEnv(extra ...string) []string {
	env := child.CleanEnv(os.Environ())
	// No config of the person running the tests: serve reads the default
	// config file when given none.
	return append(append(env, "RESIDENTD_TEST_MAIN=1", "RESIDENTD_SOCKET=", "RESIDENTD_CONFIG=", "XDG_CONFIG_HOME="+noConfigHome), extra...)
}

// startProc starts residentd with args; the test's end stops it.
func startProc(t *testing.T, args []string, env []string, files ...*os.File) *proc {
	t.Helper()
	return startCommand(t, testkit.Exe(t), args, env, files...)
}

// startCommand starts bin (which ends up running residentd) like startProc.
func startCommand(t *testing.T, bin string, args []string, env []string, files ...*os.File) *proc {
	t.Helper()
	p := newProc(bin, args, env)
	p.cmd.ExtraFiles = files
	p.start(t)
	return p
}

// newProc is bin with args, not started: its command can be set further.
func newProc(bin string, args []string, env []string) *proc {
	p := &proc{cmd: exec.Command(bin, args...), out: &syncBuffer{}, done: make(chan struct{})}
	p.cmd.Env = env
	p.cmd.Stdout, p.cmd.Stderr = p.out, p.out
	return p
}

// start starts p; the test's end stops it.
func (p *proc) start(t *testing.T) {
	t.Helper()
	args := p.cmd.Args[1:]
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		p.cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		if p.stop(20*time.Second) != nil {
			t.Errorf("residentd %v did not stop on SIGTERM; killed. Output:\n%s", args, p.out.String())
		}
	})
}

// terminate asks the child to stop, as a service manager does.
func (p *proc) terminate() { p.cmd.Process.Signal(syscall.SIGTERM) }

// stop sends SIGTERM and waits up to d, then SIGKILLs.
func (p *proc) stop(d time.Duration) error {
	select {
	case <-p.done:
		return nil
	default:
	}
	p.terminate()
	select {
	case <-p.done:
		return nil
	case <-time.After(d):
		p.cmd.Process.Kill()
		<-p.done
		return errors.New("killed")
	}
}

// waitOutput waits until the child's output contains every one of want.
// The child's stderr reaches the buffer through a pipe copied by os/exec,
// so a line the daemon wrote before it answered on the socket may not be
// here yet when the answer is.
func (p *proc) waitOutput(t *testing.T, d time.Duration, want ...string) string {
	t.Helper()
	timeout := time.After(d)
	for {
		out, changed := p.out.snapshot()
		missing := ""
		for _, w := range want {
			if !strings.Contains(out, w) {
				missing = w
				break
			}
		}
		if missing == "" {
			return out
		}
		select {
		case <-changed:
		case <-p.done:
			if out = p.out.String(); containsAll(out, want) {
				return out
			}
			t.Fatalf("residentd exited (%v) without printing %q. Output:\n%s", p.cmd.ProcessState, missing, out)
		case <-timeout:
			t.Fatalf("residentd did not print %q within %s. Output:\n%s", missing, d, p.out.String())
		}
	}
}

func containsAll(s string, want []string) bool {
	for _, w := range want {
		if !strings.Contains(s, w) {
			return false
		}
	}
	return true
}

// wait waits for the child to exit by itself (bounded) and returns its code.
func (p *proc) wait(t *testing.T, d time.Duration) int {
	t.Helper()
	select {
	case <-p.done:
		return p.cmd.ProcessState.ExitCode()
	case <-time.After(d):
		t.Fatalf("residentd did not exit within %s. Output:\n%s", d, p.out.String())
		return -1
	}
}

// stopCleanly stops the child as a service manager does and fails the test
// unless it exits 0.
func (p *proc) stopCleanly(t *testing.T) {
	t.Helper()
	if err := p.stop(20 * time.Second); err != nil || p.cmd.ProcessState.ExitCode() != exitOK {
		t.Fatalf("stop: %v, exit %v. Output:\n%s", err, p.cmd.ProcessState, p.out.String())
	}
}

// logLines are the child's JSON log lines, decoded.
func (p *proc) logLines() []map[string]any {
	var lines []map[string]any
	for line := range strings.SplitSeq(p.out.String(), "\n") {
		var e map[string]any
		if json.Unmarshal([]byte(line), &e) == nil {
			lines = append(lines, e)
		}
	}
	return lines
}

// notBound fails the test if a daemon given a socket by its service
// manager bound its --socket path as well.
func notBound(t *testing.T, path string) {
	t.Helper()
	if _, err := os.Lstat(path); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the daemon bound --socket %s although a socket was passed (stat err %v)", path, err)
	}
}

func serveArgs(state, sock string, more ...string) []string {
	return append([]string{"serve", "--state", state, "--socket", sock, "--log-format", "json", "--log-level", "info", "--shutdown-grace", "5s"}, more...)
}

// waitHealthy polls the socket until the daemon answers (it is a separate
// process: there is no in-process signal to wait on) and returns its health.
func waitHealthy(t *testing.T, p *proc, sock string) apitype.Health {
	t.Helper()
	c := &client.Client{Socket: sock}
	defer c.Close()
	deadline := time.Now().Add(30 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		h, err := c.Health(ctx)
		cancel()
		if err == nil {
			return h
		}
		select {
		case <-p.done:
			t.Fatalf("residentd exited (%v) before serving. Output:\n%s", p.cmd.ProcessState, p.out.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("residentd did not answer on %s: %v. Output:\n%s", sock, err, p.out.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// serveOpts say how startDaemon starts `residentd serve`; the zero value
// is the built-in binding alone on a fresh state directory.
type serveOpts struct {
	state  string   // the state directory; "" for a fresh one
	config string   // the config file's text, $EXE the test binary; "" for none
	flags  []string // more serve flags
	env    []string // more environment
}

// daemonProc is a `residentd serve` child that has answered on its socket.
type daemonProc struct {
	*proc
	state, sock string
	args        []string       // its command line, for a next daemon on the same state
	health      apitype.Health // its first answer
}

// startDaemon starts `residentd serve` on a socket of its own and waits
// until it serves.
func startDaemon(t *testing.T, o serveOpts) *daemonProc {
	t.Helper()
	d := &daemonProc{state: o.state, sock: filepath.Join(sockDir(t), "s.sock")}
	if d.state == "" {
		d.state = t.TempDir()
	}
	d.args = serveArgs(d.state, d.sock, o.flags...)
	if o.config != "" {
		d.args = append(d.args, "--config", writeConfig(t, o.config))
	}
	d.proc = startProc(t, d.args, childEnv(o.env...))
	d.health = waitHealthy(t, d.proc, d.sock)
	return d
}

// again starts another daemon with d's command line: d's state and socket.
func (d *daemonProc) again(t *testing.T) *proc {
	t.Helper()
	return startProc(t, d.args, childEnv())
}

// writeConfig writes a config file whose text is config, with every $EXE
// the test binary's path as a JSON string: it runs as residentd and, as
// `residentd agent`, as the built-in agent.
func writeConfig(t *testing.T, config string) string {
	t.Helper()
	exe, err := json.Marshal(testkit.Exe(t))
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), "config.json")
	if err := os.WriteFile(p, []byte(strings.ReplaceAll(config, "$EXE", string(exe))), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// dial is a client of sock, closed at the test's end.
func dial(t *testing.T, sock string) *client.Client {
	c := &client.Client{Socket: sock}
	t.Cleanup(c.Close)
	return c
}

// cli runs residentd's command line in this process against d's socket,
// stdin its standard input, and fails the test unless it exits with code
// and its output holds want. It returns the standard output.
func (d *daemonProc) cli(t *testing.T, stdin string, code int, want string, args ...string) string {
	t.Helper()
	var out, errOut bytes.Buffer
	got := run(append(args, "--socket", d.sock), strings.NewReader(stdin), &out, &errOut)
	if got != code || !strings.Contains(out.String()+errOut.String(), want) {
		t.Fatalf("%q: exit %d, %q %q; want %d and %q", args, got, out.String(), errOut.String(), code, want)
	}
	return out.String()
}

// execCommand runs command name in this process and returns its error, as
// run would report it.
func execCommand(name string, args []string, stdout io.Writer) error {
	return lookup(name).exec(context.Background(), args, strings.NewReader(""), stdout, io.Discard)
}
