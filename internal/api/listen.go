package api

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"syscall"
	"time"
)

// ErrSocketInUse means another live process serves the socket path.
var ErrSocketInUse = errors.New("api: socket is in use by a live process")

// Listen binds the Unix socket at path: its directory is created 0700 (and
// must be ours), a live socket is refused, a stale one is removed, and the
// socket file is made 0600 whatever the umask.
func Listen(path string) (net.Listener, error) {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("api: create socket dir %s: %w", dir, err)
	}
	fi, err := os.Stat(dir)
	if err != nil {
		return nil, fmt.Errorf("api: socket dir %s: %w", dir, err)
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok && int(st.Uid) != os.Getuid() {
		return nil, fmt.Errorf("api: socket dir %s belongs to uid %d, not us (%d); choose another --socket", dir, st.Uid, os.Getuid())
	}
	if fi.Mode().Perm() != 0o700 {
		if err := os.Chmod(dir, 0o700); err != nil {
			return nil, fmt.Errorf("api: chmod socket dir %s: %w", dir, err)
		}
	}
	if fi, err := os.Lstat(path); err == nil {
		if fi.Mode()&os.ModeSocket == 0 {
			return nil, fmt.Errorf("api: %s exists and is not a socket; remove it or choose another --socket", path)
		}
		d := net.Dialer{Timeout: time.Second}
		if c, err := d.DialContext(context.Background(), "unix", path); err == nil {
			c.Close()
			return nil, fmt.Errorf("%w: %s; stop the other residentd or choose another --socket", ErrSocketInUse, path)
		}
		// Nobody answers: a stale socket from a process that died.
		if err := os.Remove(path); err != nil {
			return nil, fmt.Errorf("api: remove stale socket %s: %w", path, err)
		}
	}
	ln, err := net.Listen("unix", path)
	if err != nil {
		return nil, fmt.Errorf("api: listen on %s: %w", path, err)
	}
	// The directory is 0700, so the moment between bind and chmod exposes
	// nothing to other users.
	if err := os.Chmod(path, 0o600); err != nil {
		ln.Close()
		return nil, fmt.Errorf("api: chmod socket %s: %w", path, err)
	}
	ln.(*net.UnixListener).SetUnlinkOnClose(true)
	return ln, nil
}
