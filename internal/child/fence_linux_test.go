//go:build linux

package child

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/residentd/residentd/internal/testkit"
)

func init() { testRoles = append(testRoles, testkit.EscapeRole) }

// escapeScript is an agent that starts an escapee (testkit.EscapeRole)
// once a line on its stdin says its start is over (the rlimit mark is set
// right after the exec), then reads its stdin until the stop closes it.
const escapeScript = `read -r _; RESIDENTD_TEST_ESCAPE=a "$ESCAPE_EXE" </dev/null >/dev/null 2>&1; exec cat`

// escapeSpec is an agent running escapeScript, its escapee told where to
// move and whether to shed the rlimit mark.
func escapeSpec(t testing.TB, esc *testkit.Escape, cg *Cgroups, prefix, where string, shedLimit bool) Spec {
	env := []string{"ESCAPE_EXE=" + testkit.Exe(t)}
	for k, v := range esc.Env(where, shedLimit) {
		env = append(env, k+"="+v)
	}
	return Spec{Path: "/bin/sh", Args: []string{"-c", escapeScript}, Env: env, Dir: os.TempDir(), Grace: 300 * time.Millisecond, Cgroups: cg, MarkPrefix: prefix}
}

// startEscaping starts an agent whose child escapes as where and
// shedLimit say, and returns the agent and the escapee once it runs; the
// test's end kills the escapee if it still runs. A move the escapee may
// not make here skips the test.
func startEscaping(t *testing.T, cg *Cgroups, prefix, where string, shedLimit bool) (*Process, link) {
	t.Helper()
	esc := testkit.NewEscape(t)
	p, err := Start(escapeSpec(t, esc, cg, prefix, where, shedLimit))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	discard(p)
	if _, err := p.Stdin().Write([]byte("go\n")); err != nil {
		t.Fatal(err)
	}
	pid, err := esc.Wait(30 * time.Second)
	if err != nil && strings.Contains(err.Error(), "move from cgroup") {
		fmt.Fprintf(os.Stderr, "NOTICE: %s: skipped, the escapee may not move here: %v\n", t.Name(), err)
		t.Skip("the escapee may not move here:", err)
	}
	if err != nil {
		t.Fatalf("the escapee: %v", err)
	}
	st, err := Read(pid)
	if err != nil {
		t.Fatal(err)
	}
	l := link{Pid: pid, Ppid: st.Ppid, Start: st.Start}
	t.Cleanup(func() { signalSame(l, unix.SIGKILL) })
	return p, l
}

// checkEscaped fails the test unless the escapee shed its agent's group,
// session and environment mark, and its rlimit mark when shedLimit.
func checkEscaped(t *testing.T, p *Process, esc link, prefix string, shedLimit bool) {
	t.Helper()
	st, err := Read(esc.Pid)
	if err != nil {
		t.Fatal(err)
	}
	if st.Pgrp == p.Pid() {
		t.Errorf("the escapee %d is still in its agent's group", esc.Pid)
	}
	if sid, _ := unix.Getsid(esc.Pid); sid == esc.Pid || sid == p.Pid() {
		t.Errorf("the escapee's session is %d (itself %d, its agent %d): want the first stage's, which called setsid", sid, esc.Pid, p.Pid())
	}
	if env := testkit.ReadFile(t, "/proc/"+strconv.Itoa(esc.Pid)+"/environ"); bytes.Contains(env, []byte(MarkEnv)) {
		t.Errorf("the escapee's environment holds %s: %q", MarkEnv, env)
	}
	if got, want := hardRTTime(p.Pid()), LimitMark(prefix); got != want {
		t.Errorf("the agent's hard RLIMIT_RTTIME is %d, want the rlimit mark %d", got, want)
	}
	if got := hardRTTime(esc.Pid); shedLimit == isLimitMark(got) {
		t.Errorf("the escapee's hard RLIMIT_RTTIME is %d (shed the mark: %v)", got, shedLimit)
	}
}

// An agent's descendant that moves to a cgroup of its own in the agents'
// subtree, calls setsid, double-forks, clears its environment and lowers
// its rlimit mark outlives its agent. While the daemon lives the subtree
// tells it for an agent's, and the daemon's clean stop (Cgroups.Close)
// ends it; after a crash the next daemon on the state file tells it by the
// subtree's name, and SweepStrays stops it and removes the subtree.
func TestEscapeeInTheSubtreeKnownAfterRestart(t *testing.T) {
	for _, stop := range []string{"close", "crash"} {
		t.Run(stop, func(t *testing.T) {
			prefix := newMark("")[:MarkPrefixLen]
			cg := openMarkedCgroupsOrSkip(t, prefix)
			if !strings.HasPrefix(filepath.Base(cg.Dir), "residentd-"+prefix+"-") {
				t.Fatalf("subtree %s is not named with the prefix %s", cg.Dir, prefix)
			}
			p, esc := startEscaping(t, cg, prefix, "sibling", true)
			checkEscaped(t, p, esc, prefix, true)
			mount, _ := cgroup2Mount()
			if dir := filepath.Join(mount, cgroupPath(esc.Pid)); !strings.HasPrefix(dir, cg.Dir+"/") || strings.HasPrefix(dir, p.Cgroup()) {
				t.Fatalf("the escapee is in %s: want a cgroup in the subtree %s outside its agent's %s", dir, cg.Dir, p.Cgroup())
			}
			_ = p.Close()
			waitDone(t, p)
			if !same(esc) {
				t.Fatal("the escapee did not outlive its agent: nothing to fence")
			}
			if v := (&Lineage{Self: os.Getpid(), Cgroups: cg}).Agent(esc.Pid, Now()); !v.Agent || !strings.Contains(v.Why, "agents' cgroup") {
				t.Errorf("the escapee while the daemon lives: %+v, want an agent's by the subtree", v)
			}
			switch stop {
			case "close":
				if got := cg.Procs(); !slices.Equal(got, []int{esc.Pid}) {
					t.Errorf("processes in the subtree %v, want the escapee %d", got, esc.Pid)
				}
				if err := cg.Close(); err != nil {
					t.Fatal(err)
				}
				if same(esc) {
					t.Error("the escapee survived the subtree's close")
				}
			case "crash":
				// The daemon is gone: its subtree is open nowhere.
				openSubtrees.Delete(cg.Dir)
				if v := (&Lineage{Self: os.Getpid()}).Agent(esc.Pid, Now()); !v.Agent || !strings.Contains(v.Why, "not this daemon's own") {
					t.Errorf("the escapee after the crash: %+v, want an agent's by the subtree's name", v)
				}
				if res := SweepStrays(newMark("")[:MarkPrefixLen], 300*time.Millisecond); res.Processes != 0 || len(res.Subtrees) != 0 {
					t.Errorf("another state file's sweep = %+v, want nothing", res)
				}
				res := SweepStrays(prefix, 300*time.Millisecond)
				if res.Processes != 1 || res.ByLimit != 0 || !slices.Equal(res.Subtrees, []string{cg.Dir}) || res.Err != nil {
					t.Errorf("sweep = %+v, want the escapee stopped in the subtree %s", res, cg.Dir)
				}
				if same(esc) {
					t.Error("the escapee survived the sweep")
				}
			}
			checkGone(t, "subtree", cg.Dir)
		})
	}
}

// An agent's descendant that leaves the agents' cgroups (when there are
// any) for the daemon's own, calls setsid, double-forks and clears its
// environment outlives its agent, and the next daemon on the state file
// tells it by its rlimit mark: the peer check refuses it, a sweep for
// another state file spares it, SweepStrays stops it.
func TestEscapeeKeepsTheRlimitMark(t *testing.T) {
	withAndWithoutCgroup(t, func(t *testing.T, cg *Cgroups) {
		prefix := newMark("")[:MarkPrefixLen]
		if !LimitMarkable(prefix) {
			fmt.Fprintf(os.Stderr, "NOTICE: %s: skipped, this process's hard RLIMIT_RTTIME is below the rlimit mark\n", t.Name())
			t.Skip("this process's hard RLIMIT_RTTIME is below the rlimit mark")
		}
		where := ""
		if cg != nil {
			where = "out"
		}
		p, esc := startEscaping(t, cg, prefix, where, false)
		checkEscaped(t, p, esc, prefix, false)
		if cg != nil {
			mount, _ := cgroup2Mount()
			if dir := filepath.Join(mount, cgroupPath(esc.Pid)); strings.HasPrefix(dir, cg.Dir) {
				t.Fatalf("the escapee is in %s, inside the subtree %s", dir, cg.Dir)
			}
		}
		_ = p.Close()
		waitDone(t, p)
		if !same(esc) {
			t.Fatal("the escapee did not outlive its agent: nothing to fence")
		}
		if v := (&Lineage{Self: os.Getpid()}).Agent(esc.Pid, Now()); !v.Agent || !strings.Contains(v.Why, "rlimit mark") {
			t.Errorf("the escapee: %+v, want an agent's by the rlimit mark", v)
		}
		if res := SweepStrays(newMark("")[:MarkPrefixLen], 300*time.Millisecond); res.Processes != 0 || !same(esc) {
			t.Errorf("another state file's sweep = %+v (escapee alive: %v), want nothing", res, same(esc))
		}
		res := SweepStrays(prefix, 300*time.Millisecond)
		if res.Processes != 1 || res.ByLimit != 1 || res.Err != nil {
			t.Errorf("sweep = %+v, want the escapee stopped by its rlimit mark", res)
		}
		if same(esc) {
			t.Error("the escapee survived the sweep")
		}
	})
}

// The subtree's name carries the prefix, and only such names (and the
// older ones without it) count as agents' subtrees.
func TestSubtreeNames(t *testing.T) {
	for name, want := range map[string]string{
		"residentd-0123456789abcdef-42-1": "0123456789abcdef",
		"residentd-42-1":                  "",
	} {
		if got, ok := subtreeName(name); !ok || got != want {
			t.Errorf("subtreeName(%q) = %q, %v; want %q", name, got, ok, want)
		}
	}
	for _, name := range []string{"residentd", "residentd-", "residentd-x-1", "residentd-0123456789abcdef-42", "residentd.service", "supervisor", "agent-1", "residentd-0123456789ABCDEF-4-2"} {
		if p, ok := subtreeName(name); ok {
			t.Errorf("subtreeName(%q) = %q, true; want no subtree", name, p)
		}
	}
	if m := LimitMark("0123456789abcdef"); !isLimitMark(m) || m == LimitMark("fedcba9876543210") {
		t.Errorf("LimitMark = %d, in range %v", m, isLimitMark(m))
	}
	if LimitMark("nope") != 0 || isLimitMark(^uint64(0)) || isLimitMark(0) {
		t.Error("an invalid prefix has a mark, or unlimited is one")
	}
}
