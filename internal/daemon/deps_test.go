package daemon_test

import (
	"testing"

	"github.com/residentd/residentd/internal/deptest"
)

// The daemon runs turns; agent processes are the keeper's. It reaches
// child only through resident, so the rule is on its own imports.
func TestDaemonDoesNotImportChild(t *testing.T) {
	deptest.DepChecker{
		Direct: true,
		BadDeps: map[string]string{
			deptest.Module + "/internal/child": "the daemon does not import child: agent processes are the keeper's (internal/resident), which the daemon uses",
		},
	}.Check(t)
}
