//go:build !crashpoints

package daemon

// crashAt is the restart tests' kill switch at each step of a turn; only a
// binary built with -tags crashpoints has it (crash.go).
func crashAt(string) {}
