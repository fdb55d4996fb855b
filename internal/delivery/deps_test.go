package delivery_test

import (
	"testing"

	"github.com/residentd/residentd/internal/deptest"
)

// Delivery is pure text: of residentd it reaches the channel model and the
// session key, nothing else.
func TestDeliveryIsPure(t *testing.T) {
	deptest.DepChecker{
		BadDeps: map[string]string{
			deptest.Module + "/...": "delivery is pure: of residentd it depends on internal/channel and internal/session only",
		},
		GoodDeps: []string{deptest.Module + "/internal/channel", deptest.Module + "/internal/session"},
	}.Check(t)
}
