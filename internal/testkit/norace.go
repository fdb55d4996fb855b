//go:build !race

package testkit

// Race: the race detector is on; tests that stream a lot scale down.
const Race = false
