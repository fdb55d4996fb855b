//go:build linux

package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/residentd/residentd/apitype"
	"github.com/residentd/residentd/internal/child"
	"github.com/residentd/residentd/internal/testkit"
)

// An agent's descendant that moves to a cgroup of its own in the agents'
// subtree, calls setsid, double-forks, clears its environment and lowers
// its rlimit mark outlives a start fresh of its agent, and every request
// it sends but to its tools gets 403 agent_forbidden; the daemon's clean
// stop ends it, and after a SIGKILL of the daemon the next daemon on the
// state stops it before it serves.
func TestEscapeeFencedAcrossRestarts(t *testing.T) {
	cg, err := child.OpenCgroups("", nil)
	if err != nil {
		fmt.Fprintf(os.Stderr, "NOTICE: %s: skipped, the daemon cannot make cgroups here, so nothing holds an escapee: %v\n", t.Name(), err)
		t.Skip("no cgroup subtree can be made here:", err)
	}
	cg.Close()
	for _, stop := range []string{"clean", "sigkill"} {
		t.Run(stop, func(t *testing.T) {
			esc := testkit.NewEscape(t)
			env, err := json.Marshal(esc.Env("sibling", true))
			if err != nil {
				t.Fatal(err)
			}
			d := startDaemon(t, serveOpts{config: `{"bindings": [{"id": "b-esc", "handle": "@esc", "runtime": "builtin:test", "command": "/bin/sh",
				"args": ["-c", "RESIDENTD_TEST_ESCAPE=a \"$0\" </dev/null >/dev/null 2>&1; exec \"$0\" \"$@\"", $EXE, "agent"],
				"env": ` + string(env) + `, "supervised": true, "resident": true, "tools": false, "spare": 0}]}`})
			d.waitOutput(t, 30*time.Second, "agent fence", "in_force", "not_covered")
			ctx := context.Background()
			c := dial(t, d.sock)
			if _, err := c.Turn(ctx, apitype.TurnRequest{Channel: "ch", Binding: "b-esc", Text: "@esc hi"}, nil); err != nil {
				t.Fatalf("turn: %v", err)
			}
			pid, err := esc.Wait(30 * time.Second)
			if err != nil {
				t.Fatalf("the escapee: %v", err)
			}
			st, err := child.Read(pid)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() {
				if running(pid, st.Start) {
					syscall.Kill(pid, syscall.SIGKILL)
				}
			})
			if cgroup := testkit.ReadFile(t, "/proc/"+strconv.Itoa(pid)+"/cgroup"); !strings.Contains(string(cgroup), "/escaped-") {
				t.Fatalf("the escapee is in %s, not in a cgroup it made", cgroup)
			}

			if fresh, err := c.Fresh(ctx, "ch", "b-esc"); err != nil || !fresh {
				t.Fatalf("start fresh: %v, %v", fresh, err)
			}
			if !running(pid, st.Start) {
				t.Fatal("the escapee did not outlive its agent's start fresh: nothing to fence")
			}
			if got := esc.Probe(t, d.sock); got != "403 "+apitype.CodeAgentForbidden {
				t.Errorf("the escapee's GET /v1/runs: %q, want 403 %s", got, apitype.CodeAgentForbidden)
			}

			switch stop {
			case "clean":
				d.stopCleanly(t)
				if running(pid, st.Start) {
					t.Errorf("the escapee survived the daemon's stop. Output:\n%s", d.out.String())
				}
				d.waitOutput(t, 30*time.Second, "stopping processes that left their agent's cgroup")
			case "sigkill":
				d.cmd.Process.Kill()
				<-d.done
				if !running(pid, st.Start) {
					t.Fatal("the escapee did not outlive the killed daemon: nothing to sweep")
				}
				next := d.again(t)
				waitHealthy(t, next, d.sock)
				// The sweep runs before the daemon serves.
				if running(pid, st.Start) {
					t.Errorf("the escapee survived the restart. Output:\n%s", next.out.String())
				}
				next.waitOutput(t, 30*time.Second, "stopped processes that had left their agents", `"strays":1`)
				next.stopCleanly(t)
			}
		})
	}
}
