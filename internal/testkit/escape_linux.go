//go:build linux

package testkit

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/residentd/residentd/apitype"
)

func escapeMain() int {
	dir := os.Getenv("ESCAPE_DIR")
	if os.Getenv(EscapeEnv) == "b" {
		return escapeB(dir)
	}
	if err := escapeA(dir); err != nil {
		_ = writeFifo(filepath.Join(dir, "ready"), "error "+err.Error())
		return 1
	}
	return 0
}

func escapeA(dir string) error {
	if where := os.Getenv("ESCAPE_CGROUP"); where != "" {
		if err := moveSelf(where); err != nil {
			return err
		}
	}
	if os.Getenv("ESCAPE_SHED_LIMIT") == "1" {
		// Any value below the mark's range will do; 2^40 µs is 12 days.
		if err := unix.Setrlimit(unix.RLIMIT_RTTIME, &unix.Rlimit{Cur: 1 << 40, Max: 1 << 40}); err != nil {
			return fmt.Errorf("lower RLIMIT_RTTIME: %w", err)
		}
	}
	if _, err := unix.Setsid(); err != nil {
		return fmt.Errorf("setsid: %w", err)
	}
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	cmd := exec.Command(exe)
	cmd.Env = []string{EscapeEnv + "=b", "ESCAPE_DIR=" + dir, "ESCAPE_FIRST=" + strconv.Itoa(os.Getpid())}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start the second stage: %w", err)
	}
	// Not waited for: this stage exits and the second is an orphan.
	return nil
}

// moveSelf moves this process to the cgroup where names, relative to its
// own cgroup v2 cgroup.
func moveSelf(where string) error {
	mount, cur, err := ownCgroup()
	if err != nil {
		return err
	}
	var dir string
	switch where {
	case "sibling":
		dir = filepath.Join(mount, filepath.Dir(cur), "escaped-"+strconv.Itoa(os.Getpid()))
		if err := os.Mkdir(dir, 0o755); err != nil {
			return fmt.Errorf("make a cgroup beside the agent's: %w", err)
		}
	case "out":
		dir = filepath.Join(mount, filepath.Dir(filepath.Dir(cur)))
	default:
		return fmt.Errorf("ESCAPE_CGROUP %q", where)
	}
	if err := os.WriteFile(filepath.Join(dir, "cgroup.procs"), []byte("0"), 0); err != nil {
		return fmt.Errorf("move from cgroup %s to %s: %w", cur, dir, err)
	}
	if _, now, err := ownCgroup(); err != nil || filepath.Join(mount, now) != dir {
		return fmt.Errorf("moved to %s, now in %s (%v)", dir, now, err)
	}
	return nil
}

// ownCgroup is the cgroup v2 mount point and this process's cgroup below it.
func ownCgroup() (mount, path string, err error) {
	mi, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return "", "", err
	}
	for _, line := range strings.Split(string(mi), "\n") {
		pre, post, ok := strings.Cut(line, " - ")
		if f := strings.Fields(pre); ok && len(f) >= 5 && strings.HasPrefix(post, "cgroup2 ") {
			mount = f[4]
		}
	}
	b, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return "", "", err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if p, ok := strings.CutPrefix(line, "0::"); ok {
			path = p
		}
	}
	if mount == "" || path == "" {
		return "", "", errors.New("no cgroup v2 cgroup")
	}
	return mount, path, nil
}

func escapeB(dir string) int {
	// Ready once the first stage has exited and this one is an orphan.
	first, _ := strconv.Atoi(os.Getenv("ESCAPE_FIRST"))
	if fd, err := unix.PidfdOpen(first, 0); err == nil {
		// Still the parent, so the pidfd is the first stage's.
		if os.Getppid() == first {
			fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
			for {
				if _, err := unix.Poll(fds, -1); err != unix.EINTR {
					break
				}
			}
		}
		unix.Close(fd)
	}
	if err := writeFifo(filepath.Join(dir, "ready"), "pid "+strconv.Itoa(os.Getpid())); err != nil {
		return 1
	}
	for {
		f, err := os.Open(filepath.Join(dir, "cmd"))
		if err != nil {
			return 1
		}
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			_ = writeFifo(filepath.Join(dir, "out"), probeRuns(sc.Text()))
		}
		f.Close()
	}
}

// probeRuns is the status and error code of GET /v1/runs on sock.
func probeRuns(sock string) string {
	hc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", sock)
	}}}
	resp, err := hc.Get("http://residentd/v1/runs")
	if err != nil {
		return "error " + err.Error()
	}
	defer resp.Body.Close()
	var e apitype.ErrorBody
	_ = json.NewDecoder(resp.Body).Decode(&e)
	return strings.TrimSpace(fmt.Sprintf("%d %s", resp.StatusCode, e.Error.Code))
}

// writeFifo opens the fifo at path (waiting for its reader) and writes line.
func writeFifo(path, line string) error {
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	_, err = f.WriteString(line + "\n")
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// Escape is the test's side of one escapee (EscapeRole): its directory of
// fifos.
type Escape struct {
	Dir string
}

// NewEscape makes an escapee's directory and fifos, removed at the test's
// end, when whatever still runs of the escapee is killed.
func NewEscape(t testing.TB) *Escape {
	t.Helper()
	e, err := MakeEscape(ShortDir(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Kill() })
	return e
}

// Kill SIGKILLs every process whose environment names the escapee's
// directory (its stages, and the agent that started it), however far it
// got, and returns how many.
func (e *Escape) Kill() int {
	want := []byte("\x00ESCAPE_DIR=" + e.Dir + "\x00")
	ents, _ := os.ReadDir("/proc")
	n := 0
	for _, ent := range ents {
		pid, err := strconv.Atoi(ent.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		env, err := os.ReadFile("/proc/" + ent.Name() + "/environ")
		if err == nil && bytes.Contains(append([]byte{0}, env...), want) && unix.Kill(pid, unix.SIGKILL) == nil {
			n++
		}
	}
	return n
}

// MakeEscape makes an escapee's fifos in dir, for a child role of a test
// that has no testing.T.
func MakeEscape(dir string) (*Escape, error) {
	for _, name := range []string{"ready", "cmd", "out"} {
		if err := unix.Mkfifo(filepath.Join(dir, name), 0o600); err != nil {
			return nil, err
		}
	}
	return &Escape{Dir: dir}, nil
}

// Env is what the escapee's first stage needs in its environment, by
// name: its directory, where to move (ESCAPE_CGROUP) and whether to shed
// the rlimit mark. An agent's script starts it as
// `RESIDENTD_TEST_ESCAPE=a "$exe"`.
func (e *Escape) Env(where string, shedLimit bool) map[string]string {
	env := map[string]string{"ESCAPE_DIR": e.Dir, "ESCAPE_CGROUP": where}
	if shedLimit {
		env["ESCAPE_SHED_LIMIT"] = "1"
	}
	return env
}

// Wait waits up to d for the escapee's second stage and returns its pid,
// or the error its first stage reported.
func (e *Escape) Wait(d time.Duration) (int, error) {
	line, err := readFifo(filepath.Join(e.Dir, "ready"), d)
	if err != nil {
		return 0, err
	}
	if msg, ok := strings.CutPrefix(line, "error "); ok {
		return 0, errors.New(msg)
	}
	pid, err := strconv.Atoi(strings.TrimPrefix(line, "pid "))
	if err != nil {
		return 0, fmt.Errorf("escapee said %q", line)
	}
	return pid, nil
}

// Probe has the escapee send GET /v1/runs to sock and returns its
// status and error code ("403 agent_forbidden").
func (e *Escape) Probe(t testing.TB, sock string) string {
	t.Helper()
	sent := make(chan error, 1)
	go func() { sent <- writeFifo(filepath.Join(e.Dir, "cmd"), sock) }()
	if err := Recv(t, sent, 30*time.Second, "the escapee reading its command"); err != nil {
		t.Fatal(err)
	}
	line, err := readFifo(filepath.Join(e.Dir, "out"), 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	return line
}

// readFifo reads one line from the fifo at path, waiting up to d for its
// writer. On a timeout the blocked open is released.
func readFifo(path string, d time.Duration) (string, error) {
	type result struct {
		b   []byte
		err error
	}
	got := make(chan result, 1)
	go func() {
		b, err := os.ReadFile(path)
		got <- result{b, err}
	}()
	select {
	case r := <-got:
		return strings.TrimSpace(string(r.b)), r.err
	case <-time.After(d):
		// A writer of our own lets the blocked reader's open return.
		if f, err := os.OpenFile(path, os.O_WRONLY|unix.O_NONBLOCK, 0); err == nil {
			f.Close()
		}
		<-got
		return "", fmt.Errorf("nothing on %s within %v", path, d)
	}
}
