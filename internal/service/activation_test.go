package service

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"testing"
)

// dupListenerFD returns a fresh fd for a real unix listener, as systemd
// would pass it.
func dupListenerFD(t *testing.T, l *net.UnixListener) int {
	t.Helper()
	f, err := l.File()
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	fd, err := syscall.Dup(int(f.Fd()))
	if err != nil {
		t.Fatal(err)
	}
	return fd
}

func TestActivatedListenerAccepts(t *testing.T) {
	path := filepath.Join(t.TempDir(), "s")
	orig, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	defer orig.Close()
	fd := dupListenerFD(t, orig)

	env := map[string]string{"LISTEN_PID": "77", "LISTEN_FDS": "1", "LISTEN_FDNAMES": "residentd.socket"}
	ls, names, err := activatedListeners(func(k string) string { return env[k] }, 77, fd)
	if err != nil {
		t.Fatal(err)
	}
	if len(ls) != 1 || !slices.Equal(names, []string{"residentd.socket"}) {
		t.Fatalf("got %d listeners, names %q", len(ls), names)
	}
	l := ls[0]
	defer l.Close()

	// The passed fd was consumed (closed) by activatedListeners.
	if _, err := syscall.Dup(fd); !errors.Is(err, syscall.EBADF) {
		t.Errorf("passed fd %d still open after activation (dup err %v)", fd, err)
	}

	accepted := make(chan error, 1)
	go func() {
		c, err := l.Accept()
		if err != nil {
			accepted <- err
			return
		}
		defer c.Close()
		_, err = c.Write([]byte("hello"))
		accepted <- err
	}()
	c, err := net.Dial("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	got, err := io.ReadAll(io.LimitReader(c, 5))
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != "hello" {
		t.Errorf("read %q through the activated listener", got)
	}
	if err := <-accepted; err != nil {
		t.Fatal(err)
	}
}

func TestActivationNotForUs(t *testing.T) {
	for _, tc := range []struct {
		name string
		env  map[string]string
	}{
		{"no variables", nil},
		{"other pid", map[string]string{"LISTEN_PID": "78", "LISTEN_FDS": "1"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// fd -1 would fail if it were touched.
			ls, _, err := activatedListeners(func(k string) string { return tc.env[k] }, 77, -1)
			if ls != nil || err != nil {
				t.Errorf("got %v, %v; want nil, nil", ls, err)
			}
		})
	}
}

func TestActivationBadEnv(t *testing.T) {
	for _, env := range []map[string]string{
		{"LISTEN_PID": "x", "LISTEN_FDS": "1"},
		{"LISTEN_PID": "77", "LISTEN_FDS": "many"},
		{"LISTEN_PID": "77", "LISTEN_FDS": "-1"},
	} {
		_, _, err := activatedListeners(func(k string) string { return env[k] }, 77, -1)
		if !errors.Is(err, ErrActivation) {
			t.Errorf("%v: err = %v, want ErrActivation", env, err)
		}
	}
}

func TestActivationNotASocket(t *testing.T) {
	f, err := os.CreateTemp(t.TempDir(), "plain")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	fd, err := syscall.Dup(int(f.Fd()))
	if err != nil {
		t.Fatal(err)
	}
	env := map[string]string{"LISTEN_PID": "77", "LISTEN_FDS": "1"}
	if _, _, err := activatedListeners(func(k string) string { return env[k] }, 77, fd); err == nil {
		t.Error("a regular file was accepted as a listener")
	}
}

func TestActivatedListenersUnsetsEnv(t *testing.T) {
	// Aimed at another pid so no fd is touched; the variables must still go.
	t.Setenv("LISTEN_PID", fmt.Sprint(os.Getpid()+1))
	t.Setenv("LISTEN_FDS", "1")
	t.Setenv("LISTEN_FDNAMES", "x")
	ls, err := ActivatedListeners()
	if ls != nil || err != nil {
		t.Fatalf("got %v, %v", ls, err)
	}
	for _, k := range activationVars {
		if v, ok := os.LookupEnv(k); ok {
			t.Errorf("%s=%q still set", k, v)
		}
	}
}
