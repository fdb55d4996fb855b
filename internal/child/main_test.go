package child

import (
	"testing"

	"github.com/residentd/residentd/internal/testkit"
)

// testRoles are the children the test binary can be (platform files add theirs).
var testRoles []testkit.Role

func TestMain(m *testing.M) { testkit.Main(m, testRoles...) }
