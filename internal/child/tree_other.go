//go:build !linux

package child

import (
	"errors"
	"syscall"
	"time"

	"go.uber.org/zap"
)

var errNoCgroups = errors.New("child: cgroups and the child subreaper exist on Linux only")

// Cgroups is Linux-only; elsewhere OpenCgroups always fails.
type Cgroups struct {
	Dir         string
	Controllers []string
}

// OpenCgroups is Linux-only.
func OpenCgroups(prefix string, want []string) (*Cgroups, error) { return nil, errNoCgroups }

// Close does nothing.
func (c *Cgroups) Close() error { return nil }

// Procs finds nothing.
func (c *Cgroups) Procs() []int { return nil }

// SweepStrays needs cgroups and other processes' limits: Linux only.
func SweepStrays(prefix string, grace time.Duration) Strays { return Strays{} }

// LimitMarkable: another process's limits cannot be set here.
func LimitMarkable(prefix string) bool { return false }

// Subreaper is Linux-only.
func Subreaper(log *zap.Logger) (stop func(), err error) { return func() {}, errNoCgroups }

type cgroup struct{ dir string }

func (c *Cgroups) newCgroup(Limits) (*cgroup, error) { return nil, errNoCgroups }
func (cg *cgroup) open() (int, error)                { return -1, errNoCgroups }
func (cg *cgroup) signal(syscall.Signal)             {}
func (cg *cgroup) kill() error                       { return errNoCgroups }
func (cg *cgroup) empty() bool                       { return true }
func (cg *cgroup) remove() error                     { return nil }
func (cg *cgroup) memoryCurrent() (int64, error)     { return 0, errNoCgroups }
func (cg *cgroup) oomKilled() bool                   { return false }
func waitEmpty(string, time.Duration) bool           { return true }
func cgroupEmpty(string) bool                        { return true }
func removeCgroup(string) error                      { return nil }

// The environment of another process is not readable here: escaped
// descendants are found on Linux only.
func signalMarked(string, int, syscall.Signal) int { return 0 }
func liveMarked(string) int                        { return 0 }
func markedTrees(string, []string) []Leftover      { return nil }

// setRlimits: another process's limits cannot be set here.
func setRlimits(int, Limits) error   { return nil }
func setLimitMark(int, string) error { return nil }

func unixClose(int) error { return nil }

func cgroup2Mount() (string, error) { return "", errNoCgroups }
