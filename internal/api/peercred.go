//go:build linux || darwin

package api

import "net"

// peerCred returns the uid and pid of the process at the other end of c,
// as they were when it connected.
func peerCred(c net.Conn) (uid, pid int, err error) {
	uc, ok := c.(*net.UnixConn)
	if !ok {
		return -1, -1, errNotUnix
	}
	raw, err := uc.SyscallConn()
	if err != nil {
		return -1, -1, err
	}
	var cerr error
	if err := raw.Control(func(fd uintptr) {
		uid, pid, cerr = sockCred(int(fd))
	}); err != nil {
		return -1, -1, err
	}
	if cerr != nil {
		return -1, -1, cerr
	}
	return uid, pid, nil
}
