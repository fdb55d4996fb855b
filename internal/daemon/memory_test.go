//go:build linux

package daemon_test

import (
	"fmt"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/residentd/residentd/apitype"
	"github.com/residentd/residentd/internal/child"
	"github.com/residentd/residentd/internal/config"
	"github.com/residentd/residentd/internal/testkit"
)

// TestMemoryOfTheWholeTree: an agent whose child holds 64 MiB is listed,
// and counted in residentd_agent_memory_bytes, with that child's memory:
// without cgroups, the resident sets of its tree summed (memory_source
// tree), not the agent process's alone; with a cgroup that has the memory
// controller, its memory.current.
func TestMemoryOfTheWholeTree(t *testing.T) {
	t.Parallel()
	const held = 64 << 20
	for _, cgroups := range []bool{false, true} {
		t.Run(fmt.Sprintf("cgroups=%v", cgroups), func(t *testing.T) {
			t.Parallel()
			h := newHarness(t, func(c *config.Config) {
				c.Cgroups = &cgroups
				c.Bindings[0].Args = append(c.Bindings[0].Args, "--fault", "grandchild", "--grandchild-mib", "64")
			})
			r := h.turn(apitype.TurnRequest{Channel: "ch", Binding: "b-builtin", Text: "@agent hi"})
			if r.err != nil {
				t.Fatal(r.err)
			}
			var ses apitype.Session
			testkit.WaitFor(t, 20*time.Second, func() bool {
				ss := h.d.Sessions()
				if len(ss) != 1 {
					return false
				}
				ses = ss[0]
				return ses.RSSBytes >= held
			}, func() string {
				return fmt.Sprintf("the session's memory %d bytes (%s) never held the child's %d", ses.RSSBytes, ses.MemorySource, held)
			})
			switch ses.MemorySource {
			case child.MemoryTree:
			case child.MemoryCgroup:
				if !cgroups {
					t.Fatalf("memory from a cgroup with cgroups off")
				}
			default:
				t.Fatalf("memory source %q, want tree (or cgroup with cgroups on)", ses.MemorySource)
			}
			own, err := child.RSS(ses.Pid)
			if err != nil {
				t.Fatal(err)
			}
			// The agent process alone holds less than its child does: the
			// listing counted the child.
			if own >= held {
				t.Fatalf("agent's own RSS %d: the test needs it below the child's %d", own, held)
			}
			t.Logf("memory %d bytes from %s; the agent process alone %d", ses.RSSBytes, ses.MemorySource, own)
			mfs, err := h.m.Registry.Gather()
			if err != nil {
				t.Fatal(err)
			}
			var gauge float64
			for _, mf := range mfs {
				if mf.GetName() == "residentd_agent_memory_bytes" {
					for _, m := range mf.GetMetric() {
						if labelOf(m, "binding") == "b-builtin" {
							gauge = m.GetGauge().GetValue()
						}
					}
				}
			}
			if gauge < held {
				t.Fatalf("residentd_agent_memory_bytes{binding=b-builtin} = %v, want at least the child's %d", gauge, held)
			}
		})
	}
}

func labelOf(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}
