package testkit

import (
	"fmt"
	"os"
	"syscall"
)

// namespace is one way to start a child that may mount.
type namespace struct {
	name string
	attr *syscall.SysProcAttr
}

// namespaces are the ways InSmallFS tries, in order: a mount namespace
// (root with CAP_SYS_ADMIN), and a user namespace with one, the test's
// user being root in it (user namespaces allowed to this user).
func namespaces() []namespace {
	var out []namespace
	if os.Geteuid() == 0 {
		out = append(out, namespace{"a mount namespace", &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWNS}})
	}
	return append(out, namespace{"a user and mount namespace", &syscall.SysProcAttr{
		Cloneflags:  syscall.CLONE_NEWUSER | syscall.CLONE_NEWNS,
		UidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getuid(), Size: 1}},
		GidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getgid(), Size: 1}},
	}})
}

// mountTmpfs mounts a tmpfs of size bytes on dir, first making every
// mount of this namespace private so that the new one reaches no other.
func mountTmpfs(dir string, size int64) error {
	if err := syscall.Mount("", "/", "", syscall.MS_REC|syscall.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("make the mounts private: %w", err)
	}
	if err := syscall.Mount("tmpfs", dir, "tmpfs", syscall.MS_NOSUID|syscall.MS_NODEV, fmt.Sprintf("size=%d,mode=0700", size)); err != nil {
		return fmt.Errorf("mount a tmpfs of %d bytes on %s: %w", size, dir, err)
	}
	return nil
}
