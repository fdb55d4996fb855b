package e2e

import (
	"context"
	"encoding/json"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/residentd/residentd/apitype"
)

// reloads reads residentd_config_reloads_total{result} from the daemon's
// metrics.
func (n *node) reloads(result string) string {
	n.t.Helper()
	text, err := n.c.Metrics(context.Background())
	if err != nil {
		n.t.Fatal(err)
	}
	for _, l := range strings.Split(text, "\n") {
		if v, ok := strings.CutPrefix(l, `residentd_config_reloads_total{result="`+result+`"} `); ok {
			return v
		}
	}
	n.t.Fatalf("no reloads{%s} in the metrics", result)
	return ""
}

// notifySocket listens where a service manager would ($NOTIFY_SOCKET) and
// returns the daemon's messages as they arrive.
func notifySocket(t *testing.T, dir string) (string, <-chan string) {
	path := filepath.Join(dir, "notify.sock")
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: path, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	msgs := make(chan string, 64)
	go func() {
		defer close(msgs)
		buf := make([]byte, 4096)
		for {
			n, err := conn.Read(buf)
			if err != nil {
				return
			}
			msgs <- string(buf[:n])
		}
	}()
	t.Cleanup(func() { conn.Close() })
	return path, msgs
}

// expect reads the manager's messages, skipping status lines, until one
// starting with prefix (bounded).
func expect(t *testing.T, msgs <-chan string, prefix string) string {
	t.Helper()
	timeout := time.After(20 * time.Second)
	for {
		select {
		case m, ok := <-msgs:
			if !ok {
				t.Fatalf("notify socket closed waiting for %q", prefix)
			}
			if strings.HasPrefix(m, prefix) {
				return m
			}
			if !strings.HasPrefix(m, "STATUS=") && !strings.HasPrefix(m, "WATCHDOG=") {
				t.Fatalf("the manager got %q waiting for %q", m, prefix)
			}
		case <-timeout:
			t.Fatalf("the manager never got %q", prefix)
		}
	}
}

// reloadedBySIGHUP sends SIGHUP and waits for the reload's notifications,
// as systemd (Type=notify-reload) does: RELOADING=1 with the monotonic
// time, then READY=1.
func (n *node) reloadedBySIGHUP(msgs <-chan string) {
	n.t.Helper()
	if err := n.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		n.t.Fatal(err)
	}
	m := expect(n.t, msgs, "RELOADING=1")
	if !regexp.MustCompile(`^RELOADING=1\nMONOTONIC_USEC=[1-9][0-9]*$`).MatchString(m) {
		n.t.Fatalf("reload notification %q, want RELOADING=1 and MONOTONIC_USEC", m)
	}
	expect(n.t, msgs, "READY=1")
}

// TestSIGHUPReloads: SIGHUP to a real `residentd serve --config` reloads
// the file: an added binding serves, the unchanged built-in binding keeps
// its warm process; a broken file is refused and the daemon serves on;
// `residentd reload` says why and exits 1, and reloads a good file.
func TestSIGHUPReloads(t *testing.T) {
	n := newNode(t)
	file := filepath.Join(n.state, "config.json")
	write := func(bindings ...map[string]any) {
		t.Helper()
		data, err := json.Marshal(map[string]any{"bindings": bindings})
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(file, data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	two := map[string]any{"id": "b-two", "handle": "@two", "command": bin, "args": []string{"agent"}, "resident": true}
	write(two)
	sock, msgs := notifySocket(t, filepath.Dir(filepath.Dir(n.sock)))
	n.env = append(n.env, "NOTIFY_SOCKET="+sock)
	n.start("--config", file)
	expect(t, msgs, "READY=1")
	turn := func(binding, id string) apitype.Event {
		t.Helper()
		var started apitype.Event
		_, err := n.c.Turn(context.Background(), apitype.TurnRequest{Channel: "ch", Binding: binding, MessageID: id, Text: "@agent " + id}, func(ev apitype.Event) {
			if ev.Event == apitype.EventStarted {
				started = ev
			}
		})
		if err != nil {
			t.Fatalf("turn %s on %s: %v", id, binding, err)
		}
		return started
	}
	s1 := turn("b-builtin", "m1")

	three := map[string]any{"id": "b-three", "handle": "@three", "command": bin, "args": []string{"agent"}, "resident": true}
	write(two, three)
	n.reloadedBySIGHUP(msgs)
	if got := n.reloads("applied"); got != "1" {
		t.Fatalf("reloads{applied} = %s after SIGHUP", got)
	}
	turn("b-three", "m2")
	if s2 := turn("b-builtin", "m3"); s2.Pid != s1.Pid {
		t.Fatalf("the unchanged built-in binding's process: pid %d after SIGHUP, was %d", s2.Pid, s1.Pid)
	}

	if err := os.WriteFile(file, []byte(`{"bindings": [{"id": "b-two"}]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	n.reloadedBySIGHUP(msgs) // a refused file ends the reload too
	if got := n.reloads("refused"); got != "1" {
		t.Fatalf("reloads{refused} = %s after SIGHUP with a broken file", got)
	}
	turn("b-three", "m4") // the config in force still has it

	out, err := exec.Command(bin, "reload", "--socket", n.sock).CombinedOutput()
	if code := exitCode(err); code != 1 || !strings.Contains(string(out), `binding "b-two" has no command`) || !strings.Contains(string(out), "invalid_config") {
		t.Fatalf("residentd reload of a broken file: exit %d, %q; want 1 and the reason", code, out)
	}
	write(two)
	out, err = exec.Command(bin, "reload", "--socket", n.sock).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "b-three") || !strings.Contains(string(out), "removed") || !strings.Contains(string(out), "b-builtin") {
		t.Fatalf("residentd reload: %v, %q", err, out)
	}
	if _, err := n.c.Turn(context.Background(), apitype.TurnRequest{Channel: "ch", Binding: "b-three", Text: "@agent gone"}, nil); err == nil || !strings.Contains(err.Error(), "unknown_binding") {
		t.Fatalf("a turn of the removed binding: %v, want unknown_binding", err)
	}
	if err := n.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := n.cmd.Wait(); err != nil {
		t.Fatalf("daemon exit after SIGTERM: %v", err)
	}
}

func exitCode(err error) int {
	if err == nil {
		return 0
	}
	if ee, ok := err.(*exec.ExitError); ok {
		return ee.ExitCode()
	}
	return -1
}
