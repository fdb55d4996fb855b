//go:build linux

package child

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/residentd/residentd/internal/testkit"
)

// treeScript starts, besides itself, every way an agent's descendants leave
// its process group: a setsid child, a double-forked orphan, a setsid child
// that ignores SIGTERM, and many ordinary children. With clearEnv it adds a
// setsid child with an empty environment, which only a cgroup can find.
// Every descendant runs sleep with a duration unique to the test (tok).
func treeScript(tok string, clearEnv bool) (script string, want int) {
	s := fmt.Sprintf(`tok=%s
setsid sleep 3000.$tok &
sh -c "sleep 3001.$tok >/dev/null 2>&1 &" &
setsid sh -c "trap '' TERM; exec sleep 3002.$tok" &
i=0; while [ $i -lt 10 ]; do sleep 3003.$tok & i=$((i+1)); done
`, tok)
	want = 13
	if clearEnv {
		s += "setsid env -i sleep 3004.$tok &\n"
		want++
	}
	return s + "echo ready\nwait\n", want
}

// descendants lists the live processes whose command line holds tok.
func descendants(tok string) []int {
	all, _ := All()
	var out []int
	for _, st := range all {
		if st.Zombie() {
			continue
		}
		b, err := os.ReadFile("/proc/" + strconv.Itoa(st.Pid) + "/cmdline")
		if err == nil && bytes.Contains(b, []byte("."+tok)) && bytes.HasPrefix(b, []byte("sleep")) {
			out = append(out, st.Pid)
		}
	}
	return out
}

func waitCount(t *testing.T, tok string, want int, what string) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		got := descendants(tok)
		if len(got) == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %d descendants %v, want %d", what, len(got), got, want)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func newTok() string { return strconv.Itoa(int(time.Now().UnixNano()%1e8) + os.Getpid()) }

// startTree starts treeScript under cg (nil: none) and waits until all of
// its descendants run; tok finds them.
func startTree(t *testing.T, cg *Cgroups, clearEnv bool) (p *Process, tok string) {
	t.Helper()
	return startTreeMarked(t, cg, clearEnv, "")
}

// startTreeMarked is startTree with the agent's mark beginning with prefix
// (Spec.MarkPrefix).
func startTreeMarked(t *testing.T, cg *Cgroups, clearEnv bool, prefix string) (p *Process, tok string) {
	t.Helper()
	tok = newTok()
	script, want := treeScript(tok, clearEnv)
	p, err := Start(Spec{Path: "/bin/sh", Args: []string{"-c", script}, Dir: t.TempDir(), Grace: 300 * time.Millisecond, Cgroups: cg, MarkPrefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	discard(p)
	waitCount(t, tok, want, "before the stop")
	return p, tok
}

// openCgroupsOrSkip opens an agent subtree with want enabled, or skips the
// test with a notice where this process may not create one; the subtree
// must be gone after the test.
func openCgroupsOrSkip(t *testing.T, want ...string) *Cgroups {
	t.Helper()
	return openMarkedCgroupsOrSkip(t, "", want...)
}

// openMarkedCgroupsOrSkip is openCgroupsOrSkip with the subtree named with
// a state file's mark prefix.
func openMarkedCgroupsOrSkip(t *testing.T, prefix string, want ...string) *Cgroups {
	t.Helper()
	cg, err := OpenCgroups(prefix, want)
	if err == nil {
		for _, c := range want {
			if !slices.Contains(cg.Controllers, c) {
				cg.Close()
				err = fmt.Errorf("controller %s is not available to this process's cgroup", c)
			}
		}
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "NOTICE: %s: skipped, no usable cgroup v2 cgroup here: %v\n", t.Name(), err)
		t.Skip("no usable cgroup v2 cgroup:", err)
	}
	t.Cleanup(func() {
		if err := cg.Close(); err != nil {
			t.Error(err)
		}
		checkGone(t, "daemon cgroup", cg.Dir)
	})
	return cg
}

// withAndWithoutCgroup runs f as two subtests: without a cgroup (cg nil),
// then with one (skipped where this process may not create one).
func withAndWithoutCgroup(t *testing.T, f func(t *testing.T, cg *Cgroups)) {
	for _, withCgroup := range []bool{false, true} {
		t.Run(fmt.Sprintf("cgroup=%v", withCgroup), func(t *testing.T) {
			var cg *Cgroups
			if withCgroup {
				cg = openCgroupsOrSkip(t)
			}
			f(t, cg)
		})
	}
}

// checkGone fails the test when the cgroup at dir still exists.
func checkGone(t *testing.T, what, dir string) {
	t.Helper()
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("%s %s still exists (%v)", what, dir, err)
	}
}

// runTree starts the tree, stops it the given way and checks nothing is left.
func runTree(t *testing.T, cg *Cgroups, clearEnv bool, stop string) {
	t.Helper()
	p, tok := startTree(t, cg, clearEnv)
	if cg != nil {
		if p.Cgroup() == "" {
			t.Fatal("started with cgroups but has no cgroup")
		}
		b, _ := os.ReadFile("/proc/" + strconv.Itoa(p.Pid()) + "/cgroup")
		if !strings.Contains(string(b), strings.TrimPrefix(p.Cgroup(), cg.Dir[:strings.Index(cg.Dir, "/residentd-")])) {
			t.Errorf("agent's cgroup is %q, want %s", b, p.Cgroup())
		}
	}
	switch stop {
	case "close":
		_ = p.Close()
	case "crash": // the leader dies on its own
		if err := syscall.Kill(p.Pid(), syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
	}
	waitDone(t, p)
	waitCount(t, tok, 0, "after "+stop)
	if cg != nil {
		checkGone(t, "agent cgroup", p.Cgroup())
	}
}

// Without cgroups, the agent's mark finds the descendants that left its group.
func TestTreeEndsWithAgentByMark(t *testing.T) {
	for _, stop := range []string{"close", "crash"} {
		t.Run(stop, func(t *testing.T) { runTree(t, nil, false, stop) })
	}
}

// With a cgroup, everything in it ends, even a process that dropped the mark.
func TestTreeEndsWithAgentByCgroup(t *testing.T) {
	cg := openCgroupsOrSkip(t)
	for _, stop := range []string{"close", "crash"} {
		t.Run(stop, func(t *testing.T) { runTree(t, cg, true, stop) })
	}
}

// A leftover from a crashed daemon: the leader and its group are gone, but
// the escaped descendants live on; the sweep finds them by mark and cgroup.
func TestSweepEscapedDescendants(t *testing.T) {
	withAndWithoutCgroup(t, func(t *testing.T, cg *Cgroups) {
		p, tok := startTree(t, cg, cg != nil)
		_, want := treeScript(tok, cg != nil)
		ticks, err := StartTicks(p.Pid())
		if err != nil {
			t.Fatal(err)
		}
		rec := Leftover{Pid: p.Pid(), Pgid: p.Pid(), StartTicks: ticks, StartedAt: time.Now(), Mark: p.Mark(), Cgroup: p.Cgroup()}
		// What a crashed daemon leaves: the tree, without its supervisor.
		p.abandon(t)
		waitCount(t, tok, want, "after the crash")
		res := Sweep([]Leftover{rec}, 300*time.Millisecond)
		waitCount(t, tok, 0, "after the sweep")
		if res[0].Outcome != SweepKilled || res[0].Escaped == 0 {
			t.Errorf("sweep = %+v, want killed with escaped descendants", res[0])
		}
		if cg != nil {
			checkGone(t, "leftover cgroup", rec.Cgroup)
		}
	})
}

// A crashed daemon's agent whose record was never written: SweepMarked
// finds its tree by the mark prefix alone (and, with a cgroup, what
// dropped the mark too), and leaves alone a tree marked with another
// prefix, a tree this process started and still runs, and marks the
// caller swept already.
func TestSweepMarkedFindsUnrecordedAgents(t *testing.T) {
	withAndWithoutCgroup(t, func(t *testing.T, cg *Cgroups) {
		prefix, other := newMark("")[:MarkPrefixLen], newMark("")[:MarkPrefixLen]
		lost, lostTok := startTreeMarked(t, cg, cg != nil, prefix)
		if !strings.HasPrefix(lost.Mark(), prefix) || !validMark(lost.Mark()) {
			t.Fatalf("mark %q, want 32 hex digits beginning with %s", lost.Mark(), prefix)
		}
		_, lostWant := treeScript(lostTok, cg != nil)
		lostCgroup := lost.Cgroup()
		stranger, strangerTok := startTreeMarked(t, nil, false, other)
		_, strangerWant := treeScript(strangerTok, false)
		live, liveTok := startTreeMarked(t, nil, false, prefix)
		_, liveWant := treeScript(liveTok, false)
		skipped, skippedTok := startTreeMarked(t, nil, false, prefix)
		_, skippedWant := treeScript(skippedTok, false)

		// What a crashed daemon leaves: the trees, without their
		// supervisor. All three leaders die before any reap is awaited,
		// so their output drains run side by side.
		for _, p := range []*Process{lost, skipped, stranger} {
			p.abandoned.Store(true)
			if err := syscall.Kill(p.pid, syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
		}
		for _, p := range []*Process{lost, skipped, stranger} {
			waitDone(t, p)
		}
		t.Cleanup(func() {
			signalMarked(stranger.Mark(), 0, syscall.SIGKILL)
			signalMarked(skipped.Mark(), 0, syscall.SIGKILL)
		})
		waitCount(t, lostTok, lostWant, "after the crash")

		res := SweepMarked(prefix, []string{skipped.Mark()}, 300*time.Millisecond)
		waitCount(t, lostTok, 0, "after the sweep")
		if len(res) != 1 || res[0].Mark != lost.Mark() || res[0].Outcome != SweepKilled || res[0].Escaped == 0 || res[0].Cgroup != lostCgroup {
			t.Fatalf("sweep = %+v, want the lost tree (mark %s, cgroup %q) alone, killed", res, lost.Mark(), lostCgroup)
		}
		if cg != nil {
			checkGone(t, "leftover cgroup", lostCgroup)
		}
		waitCount(t, strangerTok, strangerWant, "another prefix's tree after the sweep")
		waitCount(t, skippedTok, skippedWant, "a swept mark's tree after the sweep")
		// The live agent itself counts too: the tree is the shell and its descendants.
		waitCount(t, liveTok, liveWant, "this process's own agent after the sweep")
		select {
		case <-live.Done():
			t.Fatal("this process's own agent was stopped")
		default:
		}
		if got := SweepMarked("not-a-prefix", nil, time.Second); got != nil {
			t.Errorf("an invalid prefix swept %+v", got)
		}
	})
}

// abandon kills the leader alone and leaves its tree, as a daemon killed
// with SIGKILL does (its agents get the parent-death signal, nothing more).
func (p *Process) abandon(t *testing.T) {
	p.abandoned.Store(true)
	if err := syscall.Kill(p.pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	waitDone(t, p)
}

// An agent over its memory limit is killed by the kernel and reported as oom.
func TestMemoryLimitReportsOOM(t *testing.T) {
	cg := openCgroupsOrSkip(t, "memory")
	sh, _ := exec.LookPath("sh")
	// tail keeps the last 256 MiB it reads in memory: far over the limit.
	p, err := Start(Spec{Path: sh, Args: []string{"-c", "head -c 268435456 /dev/zero | tail -c 268435456 >/dev/null"}, Dir: t.TempDir(), Cgroups: cg, Limits: Limits{MemoryMax: 32 << 20}})
	if err != nil {
		t.Fatal(err)
	}
	discard(p)
	waitDone(t, p)
	if p.ExitKind() != ExitOOM {
		t.Errorf("ExitKind = %q (err %v), want oom", p.ExitKind(), p.ExitErr())
	}
}

// The rlimits are on the agent process (and so inherited by what it
// starts): no core dumps, and the binding's open-file limit.
func TestRlimits(t *testing.T) {
	p := startShLimits(t, "exec sleep 300", Limits{NoFile: 256})
	b := testkit.ReadFile(t, "/proc/"+strconv.Itoa(p.Pid())+"/limits")
	for _, want := range [][]string{{"Max open files", "256", "256"}, {"Max core file size", "0", "0"}} {
		found := false
		for _, line := range strings.Split(string(b), "\n") {
			if rest, ok := strings.CutPrefix(line, want[0]); ok {
				f := strings.Fields(rest)
				found = len(f) >= 2 && f[0] == want[1] && f[1] == want[2]
			}
		}
		if !found {
			t.Errorf("%s is not %s/%s:\n%s", want[0], want[1], want[2], b)
		}
	}
}

func startShLimits(t *testing.T, script string, l Limits) *Process {
	t.Helper()
	p, err := Start(Spec{Path: "/bin/sh", Args: []string{"-c", script}, Dir: t.TempDir(), Grace: 300 * time.Millisecond, Limits: l})
	if err != nil {
		t.Fatal(err)
	}
	discard(p)
	t.Cleanup(func() { _ = p.Close() })
	return p
}

// BenchmarkSweepMarkedNone is what the mark scan adds to every daemon
// start that finds nothing: one look at every process's environment.
func BenchmarkSweepMarkedNone(b *testing.B) {
	prefix := newMark("")[:MarkPrefixLen]
	procs, _ := All()
	b.ReportMetric(float64(len(procs)), "processes")
	for range b.N {
		if res := SweepMarked(prefix, nil, time.Second); len(res) != 0 {
			b.Fatalf("swept %+v", res)
		}
	}
}
