// Package service owns residentd's life as an OS service: the sd_notify and
// socket-activation protocols, and installing the systemd units or launchd plist.
package service

import (
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"time"
)

// ErrNotifySocket reports a NOTIFY_SOCKET value that is not a usable address.
var ErrNotifySocket = errors.New("service: bad NOTIFY_SOCKET")

// Notify sends state (e.g. "READY=1") to the service manager at $NOTIFY_SOCKET.
// Without NOTIFY_SOCKET it does nothing and reports sent=false, so callers
// need not know whether they run under systemd.
func Notify(state string) (sent bool, err error) {
	return notify(os.Getenv("NOTIFY_SOCKET"), state)
}

func notify(socket, state string) (bool, error) {
	if socket == "" {
		return false, nil
	}
	// A leading '@' names a Linux abstract socket; Go's net package maps it to
	// the leading NUL the kernel expects. Anything else must be a path.
	if socket[0] != '@' && socket[0] != '/' {
		return false, fmt.Errorf("%w: %q is neither an absolute path nor an abstract name", ErrNotifySocket, socket)
	}
	conn, err := net.DialUnix("unixgram", nil, &net.UnixAddr{Name: socket, Net: "unixgram"})
	if err != nil {
		return false, fmt.Errorf("service: notify %q: dial %q: %w", state, socket, err)
	}
	defer conn.Close()
	if _, err := conn.Write([]byte(state)); err != nil {
		return false, fmt.Errorf("service: notify %q: write to %q: %w", state, socket, err)
	}
	return true, nil
}

// Ready tells the manager startup is complete (Type=notify waits for it).
func Ready() (bool, error) { return Notify("READY=1") }

// Reloading tells the manager a config reload has begun; Ready must
// follow when it is done (Type=notify-reload waits for both). The
// monotonic time lets systemd 253 and later match it to the reload it
// asked for; older managers ignore it.
func Reloading() (bool, error) {
	return Notify(fmt.Sprintf("RELOADING=1\nMONOTONIC_USEC=%d", monotonicUsec()))
}

// Stopping tells the manager a clean shutdown has begun.
func Stopping() (bool, error) { return Notify("STOPPING=1") }

// Status sets the one-line status shown by `systemctl status`.
func Status(s string) (bool, error) { return Notify("STATUS=" + s) }

// Watchdog is the keep-alive ping for WatchdogSec=.
func Watchdog() (bool, error) { return Notify("WATCHDOG=1") }

// WatchdogInterval returns the manager's watchdog timeout for this process
// (ok=false when no watchdog is set or it is meant for another pid). Ping at
// half of it, as sd_watchdog_enabled(3) advises.
func WatchdogInterval() (time.Duration, bool) {
	return watchdogInterval(os.Getenv, os.Getpid())
}

func watchdogInterval(getenv func(string) string, pid int) (time.Duration, bool) {
	usec, err := strconv.ParseInt(getenv("WATCHDOG_USEC"), 10, 64)
	if err != nil || usec <= 0 {
		return 0, false
	}
	if p := getenv("WATCHDOG_PID"); p != "" {
		if n, err := strconv.Atoi(p); err != nil || n != pid {
			return 0, false
		}
	}
	return time.Duration(usec) * time.Microsecond, true
}
