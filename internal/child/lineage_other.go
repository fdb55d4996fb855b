//go:build !linux

package child

// Now is 0 where the process table is not read.
func Now() uint64 { return 0 }

// Agent cannot examine other processes outside Linux: every peer passes as
// not an agent's (OPERATIONS.md says so).
func (l *Lineage) Agent(pid int, notAfter uint64) Verdict { return Verdict{} }
