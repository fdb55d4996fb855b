package channel_test

import (
	"testing"

	"github.com/residentd/residentd/internal/deptest"
)

// The channel model is pure: of residentd it reaches the session key,
// nothing else.
func TestChannelIsPure(t *testing.T) {
	deptest.DepChecker{
		BadDeps: map[string]string{
			deptest.Module + "/...": "channel is pure: of residentd it depends on internal/session only",
		},
		GoodDeps: []string{deptest.Module + "/internal/session"},
	}.Check(t)
}
