//go:build !linux && !darwin

package child

import (
	"errors"
	"time"
)

var errNoProcTable = errors.New("child: reading processes is supported on Linux and macOS only")

func Read(pid int) (Stat, error)         { return Stat{}, errNoProcTable }
func All() ([]Stat, error)               { return nil, errNoProcTable }
func RSS(pid int) (int64, error)         { return 0, errNoProcTable }
func BootTime() (time.Time, error)       { return time.Time{}, errNoProcTable }
func startStamp(pid int) (uint64, error) { return 0, errNoProcTable }
