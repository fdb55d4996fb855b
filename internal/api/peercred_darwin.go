package api

import "golang.org/x/sys/unix"

// sockCred reads the credentials of the peer of the Unix socket fd.
func sockCred(fd int) (uid, pid int, err error) {
	cred, err := unix.GetsockoptXucred(fd, unix.SOL_LOCAL, unix.LOCAL_PEERCRED)
	if err != nil {
		return -1, -1, err
	}
	// The pid is not examined outside Linux (child.Lineage).
	return int(cred.Uid), 0, nil
}
