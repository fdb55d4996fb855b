package service

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// listenNotify opens a real unixgram socket standing in for the service manager.
func listenNotify(t *testing.T, addr string) *net.UnixConn {
	t.Helper()
	c, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: addr, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func recv(t *testing.T, c *net.UnixConn) string {
	t.Helper()
	// The datagram is already queued when Notify returns; the deadline only
	// turns a bug into a failure instead of a hang.
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	buf := make([]byte, 4096)
	n, _, err := c.ReadFromUnix(buf)
	if err != nil {
		t.Fatal(err)
	}
	return string(buf[:n])
}

func TestNotifyStates(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "n")
	c := listenNotify(t, sock)
	t.Setenv("NOTIFY_SOCKET", sock)

	for _, tc := range []struct {
		send func() (bool, error)
		want string
	}{
		{Ready, "READY=1"},
		{func() (bool, error) { return Status("serving 2 agents") }, "STATUS=serving 2 agents"},
		{Watchdog, "WATCHDOG=1"},
		{Stopping, "STOPPING=1"},
	} {
		sent, err := tc.send()
		if err != nil || !sent {
			t.Fatalf("%s: sent=%v err=%v", tc.want, sent, err)
		}
		if got := recv(t, c); got != tc.want {
			t.Errorf("received %q, want %q", got, tc.want)
		}
	}
}

func TestNotifyAbstract(t *testing.T) {
	name := fmt.Sprintf("@residentd-test-%d-%d", os.Getpid(), time.Now().UnixNano())
	c := listenNotify(t, name)
	sent, err := notify(name, "READY=1")
	if err != nil || !sent {
		t.Fatalf("sent=%v err=%v", sent, err)
	}
	if got := recv(t, c); got != "READY=1" {
		t.Errorf("received %q", got)
	}
}

func TestNotifyWithoutSocket(t *testing.T) {
	t.Setenv("NOTIFY_SOCKET", "")
	sent, err := Ready()
	if sent || err != nil {
		t.Errorf("sent=%v err=%v, want false, nil", sent, err)
	}
}

func TestNotifyErrors(t *testing.T) {
	if _, err := notify("relative/path", "READY=1"); !errors.Is(err, ErrNotifySocket) {
		t.Errorf("relative path: err = %v, want ErrNotifySocket", err)
	}
	sent, err := notify(filepath.Join(t.TempDir(), "absent"), "READY=1")
	if sent || err == nil {
		t.Errorf("absent socket: sent=%v err=%v, want an error", sent, err)
	}
}

func TestWatchdogInterval(t *testing.T) {
	for _, tc := range []struct {
		name   string
		env    map[string]string
		want   time.Duration
		wantOK bool
	}{
		{"unset", nil, 0, false},
		{"usec only", map[string]string{"WATCHDOG_USEC": "30000000"}, 30 * time.Second, true},
		{"our pid", map[string]string{"WATCHDOG_USEC": "500000", "WATCHDOG_PID": "42"}, 500 * time.Millisecond, true},
		{"other pid", map[string]string{"WATCHDOG_USEC": "500000", "WATCHDOG_PID": "43"}, 0, false},
		{"garbage", map[string]string{"WATCHDOG_USEC": "soon"}, 0, false},
		{"zero", map[string]string{"WATCHDOG_USEC": "0"}, 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d, ok := watchdogInterval(func(k string) string { return tc.env[k] }, 42)
			if d != tc.want || ok != tc.wantOK {
				t.Errorf("got %v, %v; want %v, %v", d, ok, tc.want, tc.wantOK)
			}
		})
	}
}

func TestWatchdogIntervalFromEnv(t *testing.T) {
	t.Setenv("WATCHDOG_USEC", "2000000")
	t.Setenv("WATCHDOG_PID", fmt.Sprint(os.Getpid()))
	if d, ok := WatchdogInterval(); !ok || d != 2*time.Second {
		t.Errorf("got %v, %v", d, ok)
	}
}
