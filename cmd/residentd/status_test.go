package main

import (
	"testing"

	"github.com/residentd/residentd/apitype"
)

// status says how a process came to its session when it was more than one
// way that reopened it: each way, a new session, what was set aside,
// forgotten or caught up; nothing for a plain restore or a key with no
// saved session.
func TestStatusRestoreLine(t *testing.T) {
	ok := apitype.RestoreStep{Method: "resume", Native: "nat-o", Pid: 10, Result: apitype.RestoreOK, Seconds: 1.5}
	timedOut := apitype.RestoreStep{Method: "resume", Native: "nat-o", Pid: 10, Result: apitype.RestoreTimeout, Seconds: 20.04}
	for _, tc := range []struct {
		name string
		s    apitype.Session
		want string
	}{
		{"no saved session", apitype.Session{}, ""},
		{"resumed at once", apitype.Session{RestoredBy: "resume", Restore: &apitype.RestoreReport{Steps: []apitype.RestoreStep{ok}}}, ""},
		{"given up, set aside", apitype.Session{Native: "nat-n", Restore: &apitype.RestoreReport{Steps: []apitype.RestoreStep{timedOut,
			{Method: "load", Native: "nat-o", Pid: 11, Result: apitype.RestoreTimeout, Seconds: 20.1}}, SetAside: "nat-o"}},
			"ch/b: restore: resume of nat-o timeout after 20.0s (pid 10); load of nat-o timeout after 20.1s (pid 11); new session nat-n; nat-o set aside: the key's next restore tries it first"},
		{"set aside one back", apitype.Session{RestoredBy: "resume", Native: "nat-o", Restore: &apitype.RestoreReport{Steps: []apitype.RestoreStep{ok}, CaughtUp: 4}},
			"ch/b: restore: resume of nat-o ok after 1.5s (pid 10); given the 4 stored turns it missed"},
		{"unknown", apitype.Session{Native: "nat-n", Restore: &apitype.RestoreReport{Steps: []apitype.RestoreStep{{Method: "load", Native: "nat-o", Pid: 10, Result: apitype.RestoreUnknown}}, Forgotten: []string{"nat-o"}}},
			"ch/b: restore: load of nat-o unknown after 0.0s (pid 10); new session nat-n; nat-o forgotten"},
		{"restores stopped", apitype.Session{Native: "nat-n", Restore: &apitype.RestoreReport{Steps: []apitype.RestoreStep{}, SetAside: "nat-o", Message: "restores stopped"}},
			"ch/b: restore: restores stopped; new session nat-n; nat-o set aside: the key's next restore tries it first"},
	} {
		if got := restoreLine("ch/b", tc.s); got != tc.want {
			t.Errorf("%s:\n got %q\nwant %q", tc.name, got, tc.want)
		}
	}
}
