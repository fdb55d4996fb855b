package main

import (
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/residentd/residentd/apitype"
	"github.com/residentd/residentd/internal/testkit"
)

// socketHTTP is an HTTP client for the daemon's socket.
func socketHTTP(sock string) *http.Client {
	return &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", sock)
	}}}
}

// A metrics port already taken does not take the daemon down: the socket
// serves (GET /metrics included), health and status name the failed
// listener, and the log says so once.
func TestServeWithMetricsPortTaken(t *testing.T) {
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	addr := taken.Addr().String()
	p := startDaemon(t, serveOpts{flags: []string{"--metrics-addr", addr}})
	sock, h := p.sock, p.health

	var metrics, api bool
	for _, l := range h.Listeners {
		switch l.Name {
		case "api":
			api = l.Addr == sock && l.Error == ""
		case "metrics":
			metrics = l.Addr == addr && strings.Contains(l.Error, "address already in use")
		}
	}
	if !api || !metrics {
		t.Errorf("health listeners %+v: want the api serving on %s and metrics on %s failed (address already in use)", h.Listeners, sock, addr)
	}

	// The socket does everything, metrics included.
	if _, err := dial(t, sock).Turn(context.Background(), apitype.TurnRequest{Channel: "ch", Binding: "b-builtin", Text: "@agent hello"}, nil); err != nil {
		t.Fatalf("turn with the metrics port taken: %v", err)
	}
	resp, err := socketHTTP(sock).Get("http://residentd/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), "residentd_turns_total") {
		t.Errorf("GET /metrics on the socket: %s\n%.300s", resp.Status, body)
	}

	var out bytes.Buffer
	if err := execCommand("status", []string{"--socket", sock}, &out); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "metrics listener "+addr+" is not serving") || !strings.Contains(out.String(), "address already in use") {
		t.Errorf("status does not report the failed metrics listener:\n%s", out.String())
	}

	p.stopCleanly(t)
	if n := strings.Count(p.out.String(), "metrics listener not opened"); n != 1 {
		t.Errorf("the failed metrics listener was logged %d times, want once:\n%s", n, p.out.String())
	}
}

// systemd-socket-activate binds the socket and starts `residentd serve` on
// the first connection with the listener passed as fd 3, as the socket
// unit does.
func TestSystemdSocketActivate(t *testing.T) {
	tool, err := exec.LookPath("systemd-socket-activate")
	if err != nil {
		t.Skip("systemd-socket-activate is not installed; socket activation through it is not tested")
	}
	dir := sockDir(t)
	sock := filepath.Join(dir, "act.sock")
	unused := filepath.Join(dir, "flag.sock")
	// The tool passes only the variables it is given.
	args := []string{"--listen", sock, "--fdname", "residentd.socket"}
	for _, kv := range childEnv() {
		args = append(args, "--setenv", kv)
	}
	args = append(append(args, testkit.Exe(t)), serveArgs(t.TempDir(), unused)...)
	p := startCommand(t, tool, args, childEnv())
	p.waitOutput(t, 30*time.Second, "Listening on "+sock)

	h := waitHealthy(t, p, sock) // the first connection starts the daemon
	if h.Pid != p.cmd.Process.Pid {
		t.Errorf("health pid %d, want %d: the tool execs the daemon in place", h.Pid, p.cmd.Process.Pid)
	}
	if len(h.Listeners) == 0 || h.Listeners[0].Name != "api" || h.Listeners[0].Addr != sock {
		t.Errorf("health listeners %+v, want the api on %s", h.Listeners, sock)
	}
	p.waitOutput(t, 30*time.Second, "using socket-activated listener")
	notBound(t, unused)
	if _, err := dial(t, sock).Turn(context.Background(), apitype.TurnRequest{Channel: "ch", Binding: "b-builtin", Text: "@agent activated"}, nil); err != nil {
		t.Fatalf("turn over the activated socket: %v", err)
	}

	p.terminate()
	if code := p.wait(t, 20*time.Second); code != exitOK {
		t.Errorf("exit code %d after SIGTERM, want 0. Output:\n%s", code, p.out.String())
	}
	// The socket is the manager's: the daemon leaves it in place.
	if fi, err := os.Lstat(sock); err != nil || fi.Mode()&os.ModeSocket == 0 {
		t.Errorf("the activated socket %s is gone after the daemon stopped (%v)", sock, err)
	}
}

// The TCP metrics listener answers only requests addressed to a loopback
// name and not sent by a browser: a page under a rebinding name reaches
// the port with its own Host, and an Origin.
func TestMetricsListenerLoopbackOnly(t *testing.T) {
	p := startDaemon(t, serveOpts{flags: []string{"--metrics-addr", "127.0.0.1:0"}})
	var addr string
	for _, l := range p.health.Listeners {
		if l.Name == "metrics" && l.Error == "" {
			addr = l.Addr
		}
	}
	if addr == "" {
		t.Fatalf("no metrics listener serving: %+v", p.health.Listeners)
	}
	_, port, _ := net.SplitHostPort(addr)
	get := func(host string, hdr ...string) (int, string) {
		t.Helper()
		req, err := http.NewRequest("GET", "http://"+addr+"/metrics", nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Host = host
		for i := 0; i+1 < len(hdr); i += 2 {
			req.Header.Set(hdr[i], hdr[i+1])
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}
	for _, host := range []string{"127.0.0.1:" + port, "localhost:" + port, "LOCALHOST", "127.8.9.10:" + port, "[::1]:" + port, "[::1]"} {
		if status, body := get(host); status != http.StatusOK || !strings.Contains(body, "residentd_turns_total") {
			t.Errorf("Host %q: %d %.200q, want the metrics", host, status, body)
		}
	}
	for _, host := range []string{"evil.example:" + port, "127.0.0.1.nip.example:" + port, "10.0.0.1:" + port, "localhost.evil.example"} {
		if status, body := get(host); status != http.StatusForbidden || !strings.Contains(body, "not a loopback name") {
			t.Errorf("Host %q: %d %.200q, want 403", host, status, body)
		}
	}
	for _, h := range [][]string{{"Origin", "http://127.0.0.1:" + port}, {"Origin", "null"}, {"Sec-Fetch-Site", "cross-site"}} {
		if status, body := get("127.0.0.1:"+port, h...); status != http.StatusForbidden || !strings.Contains(body, "browsers are refused") {
			t.Errorf("%s %q: %d %.200q, want 403", h[0], h[1], status, body)
		}
	}
}
