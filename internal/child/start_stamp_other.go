//go:build !linux && !darwin

package child

func startStamp(pid int) (uint64, error) { return 0, errNoProcTable }
