package service

import (
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"syscall"
)

// ErrActivation reports inconsistent socket-activation variables.
var ErrActivation = errors.New("service: bad socket activation environment")

// listenFDsStart is SD_LISTEN_FDS_START: passed sockets begin at fd 3.
const listenFDsStart = 3

// activationVars are the variables ActivatedListeners consumes and unsets, so
// children (agents) never mistake the daemon's sockets for their own.
var activationVars = []string{"LISTEN_PID", "LISTEN_FDS", "LISTEN_FDNAMES"}

// ActivatedListeners returns the listeners passed by systemd socket
// activation, in LISTEN_FDS order, and unsets the activation variables.
// It returns nil, nil when the process was not socket-activated.
func ActivatedListeners() ([]net.Listener, error) {
	defer func() {
		for _, k := range activationVars {
			os.Unsetenv(k)
		}
	}()
	ls, _, err := activatedListeners(os.Getenv, os.Getpid(), listenFDsStart)
	return ls, err
}

// activatedListeners is ActivatedListeners without the process globals: the
// environment, the pid to match, and the first fd are parameters. It also
// returns the LISTEN_FDNAMES names ("" where none were given).
func activatedListeners(getenv func(string) string, pid, firstFD int) ([]net.Listener, []string, error) {
	pidStr := getenv("LISTEN_PID")
	if pidStr == "" {
		return nil, nil, nil
	}
	lp, err := strconv.Atoi(pidStr)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: LISTEN_PID %q: %w", ErrActivation, pidStr, err)
	}
	if lp != pid {
		// The variables were meant for another process (e.g. inherited); ignore.
		return nil, nil, nil
	}
	nStr := getenv("LISTEN_FDS")
	n, err := strconv.Atoi(nStr)
	if err != nil || n < 0 {
		return nil, nil, fmt.Errorf("%w: LISTEN_FDS %q", ErrActivation, nStr)
	}
	names := make([]string, n)
	if s := getenv("LISTEN_FDNAMES"); s != "" {
		copy(names, strings.Split(s, ":"))
	}
	ls := make([]net.Listener, 0, n)
	for i := range n {
		fd := firstFD + i
		// Keep the sockets out of agent processes.
		syscall.CloseOnExec(fd)
		f := os.NewFile(uintptr(fd), "listen-fd-"+strconv.Itoa(fd))
		l, err := net.FileListener(f)
		// FileListener dups the fd, so ours is closed either way.
		f.Close()
		if err != nil {
			for _, prev := range ls {
				prev.Close()
			}
			return nil, nil, fmt.Errorf("service: activated fd %d (name %q): %w", fd, names[i], err)
		}
		ls = append(ls, l)
	}
	return ls, names, nil
}
