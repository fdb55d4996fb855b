package residency_test

import (
	"testing"

	"github.com/residentd/residentd/internal/deptest"
)

// TestResidencyIsPure: the policy knows nothing of processes, ACP or the
// store: the pool asks it, the sim drives it, the keeper feeds it.
func TestResidencyIsPure(t *testing.T) {
	deptest.DepChecker{
		BadDeps: map[string]string{
			deptest.Module + "/...": "residency is pure: of residentd it depends on internal/session only",
		},
		GoodDeps: []string{deptest.Module + "/internal/session"},
	}.Check(t)
}
