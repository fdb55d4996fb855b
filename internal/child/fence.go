package child

import (
	"fmt"
	"os"
	"runtime"
)

// Fence is what tells an agent's processes from the daemon's clients, and
// finds them after a restart, in one daemon.
type Fence struct {
	Cgroups *Cgroups // the agents' subtree; nil without one
	Adopts  bool     // the daemon is a child subreaper
	Prefix  string   // the state file's mark prefix (Spec.MarkPrefix)
	Root    bool     // the agents run as root (the daemon does)
	GOOS    string
}

// ThisFence is the fence of this process, as a daemon with cgroups,
// adopting orphans or not, on a state file with prefix.
func ThisFence(cg *Cgroups, adopts bool, prefix string) Fence {
	return Fence{Cgroups: cg, Adopts: adopts, Prefix: prefix, Root: os.Geteuid() == 0, GOOS: runtime.GOOS}
}

// Describe says which signs are in force and what they cannot cover, each
// as a sentence for the startup log (OPERATIONS.md, "Agents stay in their
// channel").
func (f Fence) Describe() (inForce, notCovered []string) {
	if f.GOOS != "linux" {
		return []string{"the records of live agents (pid and start time): the next daemon stops those groups"},
			[]string{"outside Linux the peer of a connection is not examined: an agent's process may use every route",
				"a process an agent started that left its process group is not found after the daemon exits"}
	}
	if f.Adopts {
		inForce = append(inForce, "lineage: the parent chain to a live agent, and the orphans this daemon adopts as child subreaper (killed when it stops)")
	} else {
		inForce = append(inForce, "lineage: the parent chain to a live agent (not a child subreaper: orphans re-parent away)")
	}
	if f.Cgroups != nil {
		inForce = append(inForce, fmt.Sprintf("cgroups: everything in the agents' subtree %s, and in an earlier daemon's on this state file after a restart", f.Cgroups.Dir))
	}
	inForce = append(inForce, "the mark in the agents' environment ("+MarkEnv+")")
	limit := LimitMarkable(f.Prefix)
	if limit {
		inForce = append(inForce, fmt.Sprintf("the rlimit mark: hard RLIMIT_RTTIME %d, inherited and not raised again but by root", LimitMark(f.Prefix)))
	}

	notCovered = append(notCovered, "a process someone else starts for an agent (systemd-run, a startup file it edits) is no descendant of one")
	if f.Root {
		notCovered = append(notCovered, "agents run as root: a process of theirs can move to any cgroup, clear its environment and raise its rlimits, and is then found only while this daemon lives (lineage)")
	}
	leave := "clears its environment"
	if limit && !f.Root {
		leave += " and lowers its hard RLIMIT_RTTIME"
	}
	if !f.Adopts {
		notCovered = append(notCovered, "an orphan of an agent's tree that "+leave+" re-parents to PID 1: it is not told from a client unless it stays in the agents' cgroups")
	}
	switch {
	case f.Cgroups == nil:
		notCovered = append(notCovered, "no cgroup subtree: a process that "+leave+" is not found after a crash of the daemon")
	case !f.Root:
		notCovered = append(notCovered, "a process that moves out of the agents' subtree (where its user may write cgroup.procs) and "+leave+" is not found after a crash of the daemon")
	}
	if !limit && !f.Root {
		notCovered = append(notCovered, "no rlimit mark (the daemon's own hard RLIMIT_RTTIME is below it)")
	}
	return inForce, notCovered
}
