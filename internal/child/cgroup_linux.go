//go:build linux

package child

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Cgroups is the cgroup v2 subtree a daemon puts its agents in: one cgroup
// per agent under Dir, so stopping an agent can end everything it started,
// however it detached, and limits bound the whole tree. Everything in the
// subtree is an agent's: the daemon itself never runs in it.
type Cgroups struct {
	Dir         string   // residentd-<mark prefix>-<pid>-<n> under the daemon's own cgroup
	Controllers []string // enabled for the agents' cgroups (memory, pids, cpu)
	seq         atomic.Int64
	closeOnce   sync.Once
	closeErr    error
}

var cgroupSeq atomic.Int64

// openSubtrees are the subtrees this process has open: SweepStrays
// leaves them alone.
var openSubtrees sync.Map // dir -> true

// OpenCgroups creates the daemon's agent subtree under its own cgroup v2
// cgroup, named residentd-<prefix>-<pid>-<n>: prefix is the state file's
// mark prefix (Spec.MarkPrefix), so the next daemon on that file finds
// the subtree and what is left in it wherever it is (SweepStrays). An
// invalid prefix gives residentd-<pid>-<n>, which no later daemon claims.
// want names the controllers limits need; those that cannot be enabled
// are left out of Controllers (the caller says so). An error means no
// cgroup can be created here: agents then run without one.
func OpenCgroups(prefix string, want []string) (*Cgroups, error) {
	own, err := ownCgroup()
	if err != nil {
		return nil, err
	}
	var dir string
	for tries := 0; ; tries++ {
		name := fmt.Sprintf("residentd-%d-%d", os.Getpid(), cgroupSeq.Add(1))
		if ValidMarkPrefix(prefix) {
			name = "residentd-" + prefix + strings.TrimPrefix(name, "residentd")
		}
		dir = filepath.Join(own, name)
		err := os.Mkdir(dir, 0o755)
		if err == nil {
			break
		}
		// A crashed process that had this pid may have left one behind.
		if !errors.Is(err, os.ErrExist) || tries == 100 {
			return nil, fmt.Errorf("child: create cgroup %s: %w", dir, err)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "cgroup.kill")); err != nil {
		_ = os.Remove(dir)
		return nil, fmt.Errorf("child: cgroup %s has no cgroup.kill (needs Linux 5.14 or later): %w", dir, err)
	}
	c := &Cgroups{Dir: dir}
	if len(want) > 0 {
		c.Controllers = enableControllers(own, dir, want)
	}
	openSubtrees.Store(dir, true)
	return c, nil
}

// subtreeName reports whether a cgroup's base name is that of an agents'
// subtree (OpenCgroups), and the mark prefix it carries ("" for one made
// without a prefix).
func subtreeName(base string) (prefix string, ok bool) {
	rest, ok := strings.CutPrefix(base, "residentd-")
	if !ok {
		return "", false
	}
	if len(rest) > MarkPrefixLen && rest[MarkPrefixLen] == '-' && ValidMarkPrefix(rest[:MarkPrefixLen]) {
		prefix, rest = rest[:MarkPrefixLen], rest[MarkPrefixLen+1:]
	}
	pid, n, ok := strings.Cut(rest, "-")
	return prefix, ok && digits(pid) && digits(n)
}

func digits(s string) bool { return s != "" && strings.Trim(s, "0123456789") == "" }

// ownCgroup is the directory of this process's cgroup v2 cgroup.
func ownCgroup() (string, error) {
	mount, err := cgroup2Mount()
	if err != nil {
		return "", err
	}
	b, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return "", fmt.Errorf("child: read own cgroup: %w", err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "0::"); ok {
			return filepath.Join(mount, filepath.Clean("/"+rest)), nil
		}
	}
	return "", errors.New("child: this process is in no cgroup v2 cgroup")
}

// cgroupPath is pid's cgroup v2 path below the mount ("/a/b"), "" when
// it cannot be read.
func cgroupPath(pid int) string {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cgroup")
	if err != nil {
		return ""
	}
	for _, line := range strings.Split(string(b), "\n") {
		if path, ok := strings.CutPrefix(line, "0::"); ok {
			return path
		}
	}
	return ""
}

// cgroup2Mount finds where the cgroup v2 hierarchy is mounted
// (/sys/fs/cgroup, or /sys/fs/cgroup/unified on hybrid systems).
func cgroup2Mount() (string, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return "", fmt.Errorf("child: read mounts: %w", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// id parent major:minor root mountpoint options... - fstype source superopts
		pre, post, ok := strings.Cut(sc.Text(), " - ")
		if !ok {
			continue
		}
		fields := strings.Fields(pre)
		if len(fields) >= 5 && strings.HasPrefix(post, "cgroup2 ") {
			return fields[4], nil
		}
	}
	return "", errors.New("child: no cgroup v2 hierarchy is mounted")
}

// enableControllers turns on what it can of want for dir's children. The
// parent (the daemon's own cgroup) must pass them down first; a cgroup
// holding processes may not, unless it is the root, so under a delegated
// service the daemon moves itself into a leaf "supervisor" cgroup first,
// as systemd's delegation model asks.
func enableControllers(own, dir string, want []string) []string {
	avail := readWords(filepath.Join(own, "cgroup.controllers"))
	var ok []string
	for _, c := range want {
		if !slices.Contains(avail, c) {
			continue
		}
		if !slices.Contains(readWords(filepath.Join(own, "cgroup.subtree_control")), c) {
			if err := writeFile(filepath.Join(own, "cgroup.subtree_control"), "+"+c); errors.Is(err, syscall.EBUSY) {
				leaf := filepath.Join(own, "supervisor")
				if merr := os.Mkdir(leaf, 0o755); merr == nil || errors.Is(merr, os.ErrExist) {
					_ = writeFile(filepath.Join(leaf, "cgroup.procs"), "0")
				}
				_ = writeFile(filepath.Join(own, "cgroup.subtree_control"), "+"+c)
			}
		}
		if writeFile(filepath.Join(dir, "cgroup.subtree_control"), "+"+c) == nil {
			ok = append(ok, c)
		}
	}
	return ok
}

// Close ends the subtree: call it once every agent has stopped. What is
// still in the subtree then left its agent's cgroup but not the subtree
// (a cgroup it made, or the subtree's own): it is killed (cgroup.kill),
// and every cgroup of the subtree is removed. Idempotent.
func (c *Cgroups) Close() error {
	c.closeOnce.Do(func() {
		c.closeErr = endSubtree(c.Dir, drainLimit)
		openSubtrees.Delete(c.Dir)
	})
	return c.closeErr
}

// Procs lists the processes anywhere in the subtree.
func (c *Cgroups) Procs() []int { return subtreeProcs(c.Dir) }

// subtreeProcs lists the processes in dir and every cgroup below it.
func subtreeProcs(dir string) []int {
	var out []int
	for _, d := range cgroupDirs(dir) {
		out = append(out, (&cgroup{dir: d}).pids()...)
	}
	return out
}

// cgroupDirs is dir and every cgroup below it, deepest first, so they can
// be removed in order.
func cgroupDirs(dir string) []string {
	var out []string
	_ = filepath.WalkDir(dir, func(path string, e fs.DirEntry, err error) error {
		if err == nil && e.IsDir() {
			out = append(out, path)
		}
		return nil
	})
	slices.Reverse(out)
	return out
}

// endSubtree kills whatever is in dir's subtree, waits up to d for it to
// empty, and removes every cgroup in it.
func endSubtree(dir string, d time.Duration) error {
	if !cgroupEmpty(dir) {
		if err := writeFile(filepath.Join(dir, "cgroup.kill"), "1"); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("child: kill cgroup %s: %w", dir, err)
		}
		if !waitEmpty(dir, d) {
			return fmt.Errorf("child: cgroup %s still populated after cgroup.kill", dir)
		}
	}
	var first error
	for _, sub := range cgroupDirs(dir) {
		if err := removeCgroup(sub); err != nil && first == nil {
			first = err
		}
	}
	return first
}

// cgroup is one agent's cgroup.
type cgroup struct {
	dir string
}

// newCgroup creates the next agent cgroup with l written into it.
func (c *Cgroups) newCgroup(l Limits) (*cgroup, error) {
	dir := filepath.Join(c.Dir, "agent-"+strconv.FormatInt(c.seq.Add(1), 10))
	if err := os.Mkdir(dir, 0o755); err != nil {
		return nil, fmt.Errorf("child: create cgroup %s: %w", dir, err)
	}
	cg := &cgroup{dir: dir}
	for name, v := range l.cgroupFiles() {
		ctrl, _, _ := strings.Cut(name, ".")
		if !slices.Contains(c.Controllers, ctrl) {
			continue // said once at startup
		}
		if err := writeFile(filepath.Join(dir, name), v); err != nil {
			_ = cg.remove()
			return nil, fmt.Errorf("child: set %s=%s in %s: %w", name, v, dir, err)
		}
	}
	return cg, nil
}

// open returns a descriptor of the cgroup's directory, for clone3's
// CLONE_INTO_CGROUP: the agent starts inside it, before its first fork.
func (cg *cgroup) open() (int, error) {
	return unix.Open(cg.dir, unix.O_DIRECTORY|unix.O_RDONLY|unix.O_CLOEXEC, 0)
}

// signal sends sig to every process in the cgroup.
func (cg *cgroup) signal(sig syscall.Signal) {
	for _, pid := range cg.pids() {
		_ = syscall.Kill(pid, sig)
	}
}

func (cg *cgroup) pids() []int {
	var out []int
	for _, w := range readWords(filepath.Join(cg.dir, "cgroup.procs")) {
		if pid, err := strconv.Atoi(w); err == nil && pid > 0 {
			out = append(out, pid)
		}
	}
	return out
}

// kill ends every process in the cgroup at once (cgroup.kill).
func (cg *cgroup) kill() error {
	return writeFile(filepath.Join(cg.dir, "cgroup.kill"), "1")
}

// empty reports whether no process is left in the cgroup.
func (cg *cgroup) empty() bool {
	return cgroupEmpty(cg.dir)
}

func cgroupEmpty(dir string) bool {
	b, err := os.ReadFile(filepath.Join(dir, "cgroup.events"))
	if err != nil {
		return errors.Is(err, os.ErrNotExist)
	}
	return bytes.Contains(b, []byte("populated 0"))
}

// waitEmpty waits up to d for the cgroup to empty after a kill: the kernel
// needs a moment to deliver SIGKILL and for the killed to exit.
func waitEmpty(dir string, d time.Duration) bool {
	deadline := time.Now().Add(d)
	for !cgroupEmpty(dir) {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(5 * time.Millisecond)
	}
	return true
}

func (cg *cgroup) remove() error { return removeCgroup(cg.dir) }

// removeCgroup removes an empty cgroup; the kernel may report it busy for a
// moment after its last process exited.
func removeCgroup(dir string) error {
	var err error
	for range 50 {
		err = os.Remove(dir)
		if err == nil || errors.Is(err, os.ErrNotExist) {
			return nil
		}
		if !errors.Is(err, syscall.EBUSY) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	return fmt.Errorf("child: remove cgroup %s: %w", dir, err)
}

// memoryCurrent is the cgroup's memory use (memory.current).
func (cg *cgroup) memoryCurrent() (int64, error) {
	b, err := os.ReadFile(filepath.Join(cg.dir, "memory.current"))
	if err != nil {
		return 0, err
	}
	return strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
}

// oomKilled reports whether the kernel killed something in the cgroup for
// exceeding memory.max.
func (cg *cgroup) oomKilled() bool {
	b, err := os.ReadFile(filepath.Join(cg.dir, "memory.events"))
	if err != nil {
		return false
	}
	for _, line := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(line, " "); ok && (k == "oom_kill" || k == "oom_group_kill") && v != "0" {
			return true
		}
	}
	return false
}

func readWords(path string) []string {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil
	}
	return strings.Fields(string(b))
}

func writeFile(path, v string) error {
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	_, err = f.WriteString(v)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

func unixClose(fd int) error { return unix.Close(fd) }
