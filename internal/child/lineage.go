package child

import "sync"

// Lineage tells whether a process belongs to the tree of an agent this
// daemon started: the agent itself or any descendant, however it detached.
// The API asks it about each socket peer, so an agent cannot leave its
// channel through the daemon's own socket.
//
// A process counts as an agent's when any of these holds:
//   - an ancestor (or the process itself) is a live agent this process
//     started, matched by pid and start time;
//   - its parent chain reaches this process through a child that is not an
//     agent, and this process is a child subreaper (Adopts): only orphans
//     from an agent's tree are adopted, since the daemon starts nothing else;
//   - it is in the agents' cgroup subtree (Cgroups), or in any agents'
//     subtree (an earlier daemon's the startup sweep could not empty);
//   - its environment carries a valid MarkEnv, which every agent is given
//     and every descendant inherits unless it clears its environment;
//   - its hard RLIMIT_RTTIME is an rlimit mark (LimitMark), which every
//     descendant inherits and only root can raise back.
//
// The first two are kernel facts a process cannot shed while this daemon
// lives; the cgroup holds unless the process moves itself out of the
// subtree; the marks are what is left where neither cgroups nor the
// subreaper are available, and what the next daemon goes by: a process
// can clear its environment, and lower its limit on purpose. A process
// that cannot be examined, or whose pid may have been reused, is refused
// as unknown.
type Lineage struct {
	Self    int      // this daemon's pid; a peer that is this process is not an agent
	Cgroups *Cgroups // the agents' cgroup subtree; nil without one
	Adopts  bool     // this process is a child subreaper

	once  sync.Once
	cgRel string // Cgroups.Dir relative to the cgroup2 mount, "" without one
}

// Verdict is what Lineage found out about a process.
type Verdict struct {
	Agent bool   // the process is an agent's, or could not be told apart from one
	Why   string // the sign that decided it; "" for a process that is not an agent's
}
