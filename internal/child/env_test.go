package child

import (
	"slices"
	"testing"
)

func TestCleanEnv(t *testing.T) {
	in := []string{
		"PATH=/usr/bin",
		"NOTIFY_SOCKET=/run/user/1000/systemd/notify",
		"LISTEN_PID=12",
		"LISTEN_FDS=1",
		"LISTEN_FDNAMES=residentd.socket",
		"WATCHDOG_USEC=30000000",
		"WATCHDOG_PID=12",
		"HOME=/home/u",
		"NOTIFY_SOCKETX=kept",
		"MALFORMED",
	}
	orig := slices.Clone(in)
	got := CleanEnv(in)
	want := []string{"PATH=/usr/bin", "HOME=/home/u", "NOTIFY_SOCKETX=kept", "MALFORMED"}
	if !slices.Equal(got, want) {
		t.Errorf("got %q, want %q", got, want)
	}
	if !slices.Equal(in, orig) {
		t.Error("input was modified")
	}
}
