package elicit_test

import (
	"testing"

	"github.com/residentd/residentd/internal/deptest"
)

// The forms' schema and the answers' check are pure: nothing of residentd,
// so the run, the API and the terminal can all use them.
func TestElicitIsPure(t *testing.T) {
	deptest.DepChecker{
		BadDeps: map[string]string{
			deptest.Module + "/...": "elicit is pure: it depends on nothing of residentd",
		},
	}.Check(t)
}
