package resident_test

import (
	"testing"

	"github.com/residentd/residentd/internal/deptest"
)

// Dependencies point downwards: the daemon uses the keeper, never the
// other way round. The compiler refuses daemon itself (daemon imports
// resident: a cycle); the rule also keeps out what sits above the daemon.
func TestResidentDoesNotReachDaemon(t *testing.T) {
	const why = "dependencies point downwards: the daemon, and what serves it, use the keeper (resident), not the other way round"
	deptest.DepChecker{
		BadDeps: map[string]string{
			deptest.Module + "/internal/daemon": why,
			deptest.Module + "/internal/api":    why,
			deptest.Module + "/internal/server": why,
		},
	}.Check(t)
}
