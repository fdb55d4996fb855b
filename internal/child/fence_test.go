package child

import (
	"strings"
	"testing"
)

// The startup warning names each gap of the fence where it applies: root,
// no subtree, no subreaper, outside Linux; and always what someone else
// starts for an agent.
func TestFenceSaysWhatItCannotCover(t *testing.T) {
	cg := &Cgroups{Dir: "/sys/fs/cgroup/residentd-0123456789abcdef-1-1"}
	for _, c := range []struct {
		name      string
		f         Fence
		in, notIn []string // substrings of in_force / not_covered, each expected in one line
	}{
		{"full", Fence{Cgroups: cg, Adopts: true, GOOS: "linux"},
			[]string{"child subreaper", cg.Dir, MarkEnv},
			[]string{"someone else", "moves out of the agents' subtree"}},
		{"root", Fence{Cgroups: cg, Adopts: true, Root: true, GOOS: "linux"},
			[]string{cg.Dir},
			[]string{"agents run as root", "someone else"}},
		{"no subtree", Fence{Adopts: true, GOOS: "linux"},
			[]string{"child subreaper", MarkEnv},
			[]string{"no cgroup subtree"}},
		{"no subreaper", Fence{Cgroups: cg, GOOS: "linux"},
			[]string{"not a child subreaper"},
			[]string{"re-parents to PID 1"}},
		{"darwin", Fence{GOOS: "darwin"},
			[]string{"records"},
			[]string{"not examined"}},
	} {
		in, notCovered := c.f.Describe()
		for _, want := range c.in {
			if !anyContains(in, want) {
				t.Errorf("%s: in_force %q lacks %q", c.name, in, want)
			}
		}
		for _, want := range c.notIn {
			if !anyContains(notCovered, want) {
				t.Errorf("%s: not_covered %q lacks %q", c.name, notCovered, want)
			}
		}
	}
}

func anyContains(lines []string, s string) bool {
	for _, l := range lines {
		if strings.Contains(l, s) {
			return true
		}
	}
	return false
}
