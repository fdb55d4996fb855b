package client_test

import (
	"testing"

	"github.com/residentd/residentd/internal/deptest"
)

// The client must stay light: another module importing it gets the API's
// types and the standard library, never the daemon, its store or its SDKs.
func TestClientDependencies(t *testing.T) {
	deptest.DepChecker{
		NonStd:   "client imports nothing of the daemon: other modules import it and get the API's types (apitype) and the standard library only",
		GoodDeps: []string{deptest.Module + "/apitype"},
	}.Check(t)
}
