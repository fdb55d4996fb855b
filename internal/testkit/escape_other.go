//go:build !linux

package testkit

import (
	"fmt"
	"os"
)

func escapeMain() int {
	fmt.Fprintln(os.Stderr, "the escapee runs on Linux only")
	return 2
}
