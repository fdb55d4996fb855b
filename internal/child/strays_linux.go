//go:build linux

package child

import (
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"
)

// maxCgroupDepth bounds the walk of the cgroup hierarchy for subtrees.
const maxCgroupDepth = 32

// SweepStrays stops what earlier daemons on the same state file left
// running that neither their records nor the environment mark find:
//   - every process in an agents' subtree named with prefix (OpenCgroups),
//     wherever it is in the cgroup hierarchy: a process that moved out of
//     its agent's cgroup into another cgroup of the subtree, or one it made
//     there, is still in it;
//   - every process carrying the state file's rlimit mark (LimitMark): one
//     that also left the subtree and cleared its environment.
//
// TERM, up to grace for them to exit, then KILL (cgroup.kill for the
// subtrees); then every cgroup of the subtrees is removed. The subtrees
// this process has open and the trees of the agents it runs are left
// alone. Call it before starting any agent, after Sweep and SweepMarked.
func SweepStrays(prefix string, grace time.Duration) Strays {
	if !ValidMarkPrefix(prefix) {
		return Strays{}
	}
	out := Strays{Subtrees: findSubtrees(prefix)}
	inSub := map[int]bool{}
	for _, dir := range out.Subtrees {
		for _, pid := range subtreeProcs(dir) {
			inSub[pid] = true
		}
	}
	var marked []link
	for _, l := range limitMarked(LimitMark(prefix)) {
		if !inSub[l.Pid] {
			marked = append(marked, l)
		}
	}
	out.Processes, out.ByLimit = len(inSub)+len(marked), len(marked)
	if out.Processes > 0 {
		for pid := range inSub {
			_ = syscall.Kill(pid, syscall.SIGTERM)
		}
		for _, l := range marked {
			signalSame(l, syscall.SIGTERM)
		}
		left := func() bool {
			return slices.ContainsFunc(out.Subtrees, func(dir string) bool { return !cgroupEmpty(dir) }) ||
				slices.ContainsFunc(marked, func(l link) bool { return same(l) })
		}
		deadline := time.Now().Add(grace)
		for left() && time.Now().Before(deadline) {
			time.Sleep(20 * time.Millisecond)
		}
		for _, l := range marked {
			if signalSame(l, syscall.SIGKILL) {
				out.Forced = true
			}
		}
	}
	for _, dir := range out.Subtrees {
		if !cgroupEmpty(dir) {
			out.Forced = true
		}
		// cgroup.kill for what is left, then the removal.
		if err := endSubtree(dir, 2*time.Second); err != nil && out.Err == nil {
			out.Err = err
		}
	}
	return out
}

// findSubtrees lists the agents' subtrees named with prefix anywhere in
// the cgroup v2 hierarchy, except those this process has open.
func findSubtrees(prefix string) []string {
	mount, err := cgroup2Mount()
	if err != nil {
		return nil
	}
	var out []string
	_ = filepath.WalkDir(mount, func(path string, e fs.DirEntry, err error) error {
		if err != nil || !e.IsDir() {
			return nil
		}
		if p, ok := subtreeName(e.Name()); ok && p == prefix {
			if _, open := openSubtrees.Load(path); !open {
				out = append(out, path)
			}
			return fs.SkipDir
		}
		if strings.Count(path[len(mount):], "/") >= maxCgroupDepth {
			return fs.SkipDir
		}
		return nil
	})
	return out
}

// limitMarked lists the live processes whose hard RLIMIT_RTTIME is mark,
// except this process and the trees of the agents it runs (or a process
// it cannot tell from one of those).
func limitMarked(mark uint64) []link {
	if mark == 0 {
		return nil
	}
	all, err := All()
	if err != nil {
		return nil
	}
	self := &Lineage{Self: os.Getpid()}
	var out []link
	for _, st := range all {
		if st.Pid == self.Self || st.Zombie() || hardRTTime(st.Pid) != mark {
			continue
		}
		l := link{Pid: st.Pid, Ppid: st.Ppid, Start: st.Start}
		if self.ancestry(l).Agent || inOpenSubtree(st.Pid) {
			continue
		}
		out = append(out, l)
	}
	return out
}

// same reports whether l still names a live process (not a newcomer on
// its pid, not a zombie).
func same(l link) bool {
	st, err := Read(l.Pid)
	return err == nil && st.Start == l.Start && !st.Zombie()
}

// signalSame sends sig to l if it is still the same live process, and
// reports whether it did.
func signalSame(l link, sig syscall.Signal) bool {
	return same(l) && syscall.Kill(l.Pid, sig) == nil
}
