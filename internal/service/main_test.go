package service

import (
	"testing"

	"github.com/residentd/residentd/internal/testkit"
)

func TestMain(m *testing.M) { testkit.Main(m) }
