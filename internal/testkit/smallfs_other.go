//go:build !linux

package testkit

import (
	"errors"
	"syscall"
)

type namespace struct {
	name string
	attr *syscall.SysProcAttr
}

// namespaces: only Linux gives a process a mount of its own.
func namespaces() []namespace { return nil }

func mountTmpfs(string, int64) error {
	return errors.New("mount namespaces are Linux's")
}
