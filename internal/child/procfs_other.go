//go:build !linux

package child

import (
	"errors"
	"time"
)

// The process table is read on Linux only: without /proc every pid would
// look absent. macOS identifies a pid by its start time (startStamp).
var errNoProcTable = errors.New("child: the process table is read on Linux only")

func Read(pid int) (Stat, error)   { return Stat{}, errNoProcTable }
func All() ([]Stat, error)         { return nil, errNoProcTable }
func RSS(pid int) (int64, error)   { return 0, errNoProcTable }
func BootTime() (time.Time, error) { return time.Time{}, errNoProcTable }
