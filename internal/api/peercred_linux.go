package api

import "golang.org/x/sys/unix"

// sockCred reads the credentials of the peer of the Unix socket fd.
func sockCred(fd int) (uid, pid int, err error) {
	cred, err := unix.GetsockoptUcred(fd, unix.SOL_SOCKET, unix.SO_PEERCRED)
	if err != nil {
		return -1, -1, err
	}
	return int(cred.Uid), int(cred.Pid), nil
}
