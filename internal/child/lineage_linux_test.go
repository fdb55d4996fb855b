//go:build linux

package child

import (
	"bufio"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/residentd/residentd/internal/testkit"
)

// startSleeper starts a process outside any agent's tree; env adds to its
// environment. It returns once the process runs its own code: a process
// is visible the moment exec closes its descriptors, but its environment
// (what the mark check reads) only a little later, when the new program's
// stack is built.
func startSleeper(t testing.TB, env ...string) int {
	t.Helper()
	cmd := exec.Command("sh", "-c", "echo up; read -r _")
	cmd.Env = append(CleanEnv(os.Environ()), env...)
	stdin, stdout := testkit.StartPiped(t, cmd)
	t.Cleanup(func() { _ = stdin.Close(); _ = cmd.Process.Kill(); _ = cmd.Wait() })
	if _, err := bufio.NewReader(stdout).ReadString('\n'); err != nil {
		t.Fatalf("sleeper %d never said it is up: %v", cmd.Process.Pid, err)
	}
	return cmd.Process.Pid
}

// TestLineageTellsAgentTrees judges every process of an agent's tree (its
// group, setsid children, orphans re-parented away, a child with an empty
// environment) as the agent's, and processes outside it by the sign that
// applies.
func TestLineageTellsAgentTrees(t *testing.T) {
	l := &Lineage{Self: os.Getpid()}
	p, tok := startTree(t, nil, true)
	pids := append(descendants(tok), p.Pid())
	for _, pid := range pids {
		if v := l.Agent(pid, Now()); !v.Agent {
			t.Errorf("pid %d of the agent's tree judged not an agent's", pid)
		} else {
			t.Logf("pid %d: %s", pid, v.Why)
		}
	}

	plain := startSleeper(t)
	if v := l.Agent(plain, Now()); v.Agent {
		t.Errorf("a child of the daemon that is no agent: %s", v.Why)
	}
	if v := (&Lineage{Self: os.Getpid(), Adopts: true}).Agent(plain, Now()); !v.Agent || !strings.Contains(v.Why, "adopted") {
		t.Errorf("a child of a subreaper daemon that it did not start as an agent: %+v, want adopted", v)
	}
	marked := startSleeper(t, MarkEnv+"="+newMark(""))
	if v := l.Agent(marked, Now()); !v.Agent || !strings.Contains(v.Why, MarkEnv) {
		t.Errorf("a process carrying a mark: %+v, want judged by the mark", v)
	}
	st, err := Read(plain)
	if err != nil {
		t.Fatal(err)
	}
	if v := l.Agent(plain, st.Start-1); !v.Agent || !strings.Contains(v.Why, "reused") {
		t.Errorf("a pid that started after the connection: %+v, want refused as reused", v)
	}
	if v := l.Agent(0, Now()); !v.Agent {
		t.Error("an invisible pid (0) passed as not an agent's")
	}
	if v := l.Agent(os.Getpid(), Now()); v.Agent {
		t.Errorf("the daemon itself: %s", v.Why)
	}
}

// BenchmarkLineageClient is the per-connection cost of the peer check for
// a client that is no agent's, the dearest case: the whole parent chain
// to PID 1, the cgroup and the environment are read.
func BenchmarkLineageClient(b *testing.B) {
	pid := startSleeper(b)
	cg := &Cgroups{Dir: "/sys/fs/cgroup/residentd-bench"}
	l := &Lineage{Self: -1, Cgroups: cg}
	st, _ := Read(pid)
	depth := 0
	for cur := st; cur.Ppid > 1 && depth < maxAncestors; depth++ {
		cur, _ = Read(cur.Ppid)
	}
	// CPU time as well as wall time: on a loaded machine the wall time
	// mostly measures waiting for a core.
	var before, after syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &before)
	n := 0
	for b.Loop() {
		if v := l.Agent(pid, Now()); v.Agent {
			b.Fatal(v.Why)
		}
		n++
	}
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &after)
	cpu := time.Duration(after.Utime.Nano()+after.Stime.Nano()-before.Utime.Nano()-before.Stime.Nano()) / time.Duration(max(n, 1))
	b.ReportMetric(float64(cpu.Microseconds()), "cpu-µs/op")
	b.ReportMetric(float64(depth+1), "ancestors")
}
