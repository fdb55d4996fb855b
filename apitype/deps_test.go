package apitype_test

import (
	"testing"

	"github.com/residentd/residentd/internal/deptest"
)

// apitype is every type of the local API, for the daemon and for other
// modules alike: the standard library only.
func TestAPITypeIsStdlibOnly(t *testing.T) {
	deptest.DepChecker{
		NonStd: "apitype imports nothing of the daemon: other modules take the API's types from it with the standard library only",
	}.Check(t)
}
