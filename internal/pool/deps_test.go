package pool_test

import (
	"testing"

	"github.com/residentd/residentd/internal/deptest"
)

// The pool knows nothing of ACP: it consumes a Spawner and a Session,
// which the keeper implements.
func TestPoolKnowsNothingOfACP(t *testing.T) {
	const why = "the pool knows nothing of ACP or of agent processes: it consumes a Spawner and a Session, which resident implements"
	deptest.DepChecker{
		BadDeps: map[string]string{
			deptest.Module + "/internal/acp":      why,
			"github.com/coder/acp-go-sdk/...":     why,
			deptest.Module + "/internal/child":    why,
			deptest.Module + "/internal/resident": why,
		},
	}.Check(t)
}
