package child

import (
	"crypto/rand"
	"encoding/hex"
	"strconv"
	"strings"
	"sync"
)

// MarkEnv is the variable every agent, and so by inheritance every process
// it starts, carries with its agent's mark: what ties a descendant that left
// the process group (setsid, a double fork) back to the agent it came from.
const MarkEnv = "RESIDENTD_AGENT_MARK"

// Limits bound one agent's tree. Zero fields are unlimited. Memory, tasks
// and CPU weight apply through the agent's cgroup where the controllers are
// available; the rlimits apply to the agent process (and are inherited by
// what it starts) on Linux. Core dumps are always off.
type Limits struct {
	MemoryMax int64  // bytes (memory.max)
	PidsMax   int64  // tasks (pids.max)
	CPUWeight int    // 1..10000, default 100 (cpu.weight)
	NoFile    uint64 // open files (RLIMIT_NOFILE)
}

// Controllers lists the cgroup controllers l needs.
func (l Limits) Controllers() []string {
	var c []string
	if l.MemoryMax > 0 {
		c = append(c, "memory")
	}
	if l.PidsMax > 0 {
		c = append(c, "pids")
	}
	if l.CPUWeight > 0 {
		c = append(c, "cpu")
	}
	return c
}

// cgroupFiles is what l writes into an agent's cgroup, by file name.
func (l Limits) cgroupFiles() map[string]string {
	f := map[string]string{}
	if l.MemoryMax > 0 {
		f["memory.max"] = strconv.FormatInt(l.MemoryMax, 10)
		// The whole tree goes on OOM, not one random member of it.
		f["memory.oom.group"] = "1"
	}
	if l.PidsMax > 0 {
		f["pids.max"] = strconv.FormatInt(l.PidsMax, 10)
	}
	if l.CPUWeight > 0 {
		f["cpu.weight"] = strconv.Itoa(l.CPUWeight)
	}
	return f
}

// MarkPrefixLen is the length in hex digits of a mark prefix (Spec.MarkPrefix):
// half a mark, the other half random per process.
const MarkPrefixLen = 16

// ValidMarkPrefix reports whether p can begin a mark.
func ValidMarkPrefix(p string) bool {
	return len(p) == MarkPrefixLen && strings.Trim(p, "0123456789abcdef") == ""
}

// NewMarkPrefix returns a new random mark prefix.
func NewMarkPrefix() (string, error) {
	var b [MarkPrefixLen / 2]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", err
	}
	return hex.EncodeToString(b[:]), nil
}

// The rlimit mark: every agent of a state file gets as its hard
// RLIMIT_RTTIME (real-time CPU time, which bounds only processes under a
// real-time scheduling policy) a value made from the file's mark prefix,
// limitMarkBase and above, a duration of over 100,000 years. Its whole
// tree inherits it through every fork and exec, setsid, a cleared
// environment and a move to another cgroup, and a process not running as
// root cannot raise a hard limit: it can shed the mark only by lowering the
// limit on purpose.
const (
	limitMarkBase = uint64(1) << 62
	limitMarkSpan = uint64(1) << 60
)

// LimitMark is the hard RLIMIT_RTTIME of the agents of the state file
// whose mark prefix is prefix, 0 for an invalid prefix.
func LimitMark(prefix string) uint64 {
	if !ValidMarkPrefix(prefix) {
		return 0
	}
	v, err := strconv.ParseUint(prefix, 16, 64)
	if err != nil {
		return 0
	}
	return limitMarkBase | v>>4
}

// isLimitMark reports whether a hard RLIMIT_RTTIME is some state file's
// rlimit mark.
func isLimitMark(v uint64) bool { return v >= limitMarkBase && v-limitMarkBase < limitMarkSpan }

// newMark is prefix followed by 16 random hex digits, or 32 random ones
// when prefix is not a valid one: 32 hex digits either way (validMark).
func newMark(prefix string) string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	if !ValidMarkPrefix(prefix) {
		return hex.EncodeToString(b[:])
	}
	return prefix + hex.EncodeToString(b[:(32-MarkPrefixLen)/2])
}

// marked reports whether environ (NUL-separated or as a list) carries mark.
func marked(env []string, mark string) bool {
	want := MarkEnv + "=" + mark
	for _, kv := range env {
		if kv == want {
			return true
		}
	}
	return false
}

// validMark reports whether s looks like a mark newMark made; a record with
// anything else must not drive a kill.
func validMark(s string) bool {
	if len(s) != 32 {
		return false
	}
	return strings.Trim(s, "0123456789abcdef") == ""
}

// own is every agent this process started and has not reaped yet: the
// orphan reaper must leave their zombies to their own reaper. helpers are
// the other children it waits for itself (Run), until they are reaped.
var own = struct {
	sync.Mutex
	procs   map[int]*Process
	helpers map[int]bool
}{procs: map[int]*Process{}, helpers: map[int]bool{}}

// lookup returns the live agent with pid, or nil.
func lookup(pid int) *Process {
	own.Lock()
	defer own.Unlock()
	return own.procs[pid]
}

// Memory sources reported by Memory.
const (
	MemoryCgroup = "cgroup" // memory.current of the agent's cgroup: its whole tree
	MemoryTree   = "tree"   // the resident sets of every process of the agent's tree (Tree), summed
	MemoryRSS    = "rss"    // resident set of the agent process alone (the process table could not be read)
)

// Memory returns the memory an agent uses: its cgroup's memory.current when
// it has one with the memory controller, else the resident sets of every
// process of its tree summed (node and the CLI it starts, its tools), else
// the RSS of its pid. A sum of resident sets counts pages the processes
// share once per process.
func Memory(pid int) (n int64, source string, err error) {
	if p := lookup(pid); p != nil && p.cg != nil {
		if n, err := p.cg.memoryCurrent(); err == nil {
			return n, MemoryCgroup, nil
		}
	}
	if all, err := All(); err == nil {
		if tree := Tree(pid, all); len(tree) > 0 {
			for _, st := range tree {
				n += st.RSS
			}
			return n, MemoryTree, nil
		}
	}
	n, err = RSS(pid)
	return n, MemoryRSS, err
}
