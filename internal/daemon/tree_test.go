//go:build linux

package daemon_test

import (
	"bytes"
	"fmt"
	"os"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/residentd/residentd/internal/child"
	"github.com/residentd/residentd/internal/config"
	"github.com/residentd/residentd/internal/session"
)

// treeScripts start, before exec'ing the built-in agent, the descendants
// real agents leave behind: a setsid child, a double-forked daemon, a child
// that ignores SIGTERM, many children. Each runs sleep with a duration that
// holds the test's token, so they can be counted in the process table.
var treeScripts = []struct {
	name, script string
	n            int
}{
	{"setsid", `setsid sleep 3000.$TOK </dev/null >/dev/null 2>&1 &`, 1},
	{"double-fork", `sh -c 'sleep 3001.$TOK </dev/null >/dev/null 2>&1 &' </dev/null >/dev/null 2>&1`, 1},
	{"ignores-term", `setsid sh -c "trap '' TERM; exec sleep 3002.$TOK" </dev/null >/dev/null 2>&1 &`, 1},
	{"many", `i=0; while [ $i -lt 20 ]; do sleep 3003.$TOK </dev/null >/dev/null 2>&1 & i=$((i+1)); done`, 20},
}

// withTok lists the live processes whose command line holds "."+tok.
func withTok(tok string) []int {
	all, _ := child.All()
	var out []int
	for _, st := range all {
		if st.Zombie() {
			continue
		}
		b, err := os.ReadFile("/proc/" + strconv.Itoa(st.Pid) + "/cmdline")
		if err == nil && bytes.HasPrefix(b, []byte("sleep")) && bytes.Contains(b, []byte("."+tok)) {
			out = append(out, st.Pid)
		}
	}
	return out
}

// After every way an agent stops (start fresh, idle reap, capacity
// eviction, crash, daemon shutdown), nothing it started is left, with and
// without cgroups.
func TestNothingOutlivesItsAgent(t *testing.T) {
	stops := []string{"fresh", "idle", "capacity", "crash", "shutdown"}
	for _, cgroups := range []bool{false, true} {
		if cgroups {
			if cg, err := child.OpenCgroups("", nil); err != nil {
				fmt.Fprintf(os.Stderr, "NOTICE: %s: cannot create a cgroup here, cgroup cases skipped: %v\n", t.Name(), err)
				continue
			} else {
				cg.Close()
			}
		}
		for _, sc := range treeScripts {
			for _, stop := range stops {
				t.Run(fmt.Sprintf("cgroups=%v/%s/%s", cgroups, sc.name, stop), func(t *testing.T) {
					tok := strconv.Itoa(int(time.Now().UnixNano() % 1e9))
					h := newHarness(t, func(c *config.Config) {
						c.Cgroups = &cgroups
						c.MaxLive = 1
						// Long enough to count the tree first; the pool's own
						// reaper then stops the idle agent.
						c.IdleTimeout = config.Duration(time.Hour)
						if stop == "idle" {
							c.IdleTimeout = config.Duration(2 * time.Second)
						}
						c.AgentGrace = config.Duration(300 * time.Millisecond)
						b := testBinding(t, "b-tree", c.StateDir)
						b.Env["TOK"] = tok
						b.Args = append([]string{"-c", sc.script + "\nexec \"$0\" \"$@\"", b.Command}, b.Args...)
						b.Command = "/bin/sh"
						c.Bindings = append(c.Bindings, b)
					})
					r := h.mention("ch-a", "b-tree", "m1", "hello")
					if r.err != nil {
						t.Fatal(r.err)
					}
					waitFor(t, func() bool { return len(withTok(tok)) == sc.n }, func() string {
						return fmt.Sprintf("%d descendants before the stop, want %d", len(withTok(tok)), sc.n)
					})
					switch stop {
					case "fresh":
						if _, err := h.d.Fresh(session.Key{Channel: "ch-a", Binding: "b-tree"}); err != nil {
							t.Fatal(err)
						}
					case "idle":
						waitFor(t, func() bool { return slices.Contains(h.evictions(), "ch-a/b-tree idle") }, func() string {
							return fmt.Sprintf("the idle agent was never reaped: evictions %q", h.evictions())
						})
					case "capacity":
						if r := h.mention("ch-b", "b-builtin", "m2", "hello"); r.err != nil {
							t.Fatal(r.err)
						}
					case "crash":
						if r := h.mention("ch-a", "b-tree", "m3", "[[fault:exit-turn]]"); r.err == nil {
							t.Fatal("the crashing turn succeeded")
						}
					case "shutdown":
						h.close()
					}
					var left []int
					waitFor(t, func() bool { left = withTok(tok); return len(left) == 0 }, func() string {
						return fmt.Sprintf("after %s: %d of %d descendants left: %v", stop, len(left), sc.n, left)
					})
				})
			}
		}
	}
}
