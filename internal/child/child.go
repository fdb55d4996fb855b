// Package child owns the process side of an agent: spawning it in a process
// group of its own with a cleaned environment, the TERM-grace-KILL stop, the
// one reaping goroutine, the bounded stderr tail, reading the process table,
// and the sweep of groups a crashed daemon left behind. It knows nothing of
// the protocol spoken over the pipes.
package child

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"go.uber.org/zap"
)

// Exit kinds reported by ExitKind.
const (
	ExitClean  = "clean"
	ExitSignal = "signal"
	ExitError  = "error"
	ExitOOM    = "oom" // killed for exceeding its cgroup's memory.max
)

// ExitKinds lists every exit kind, for metrics that pre-create series.
var ExitKinds = []string{ExitClean, ExitSignal, ExitError, ExitOOM}

// drainLimit bounds how long the reaper waits for buffered output after the
// group died; only a descendant that escaped the group and kept a pipe open
// makes it matter.
const drainLimit = 2 * time.Second

// Spec describes one child process.
type Spec struct {
	Path       string   // executable, already resolved
	Args       []string // arguments after the program name
	Env        []string // extra KEY=VALUE appended to the daemon's cleaned environment
	Dir        string   // working directory
	Grace      time.Duration
	StderrTail int // bytes of stderr kept
	Log        *zap.Logger
	// Cgroups, when set, puts the process in a cgroup of its own under it,
	// which Limits bound and stopping kills whole.
	Cgroups *Cgroups
	Limits  Limits
	// MarkPrefix, 16 hex digits (MarkPrefixLen), begins the process's mark;
	// the rest is random. A daemon gives every agent its state file's
	// prefix, so the next daemon on that file finds a crashed one's agents
	// by it (SweepMarked). The process also gets the prefix's rlimit mark
	// (LimitMark, Linux), which SweepStrays finds. Empty or malformed: the
	// whole mark is random, and there is no rlimit mark.
	MarkPrefix string
}

// Process is one running child in its own process group. Its stdout is read
// by the caller; its stderr goes to a bounded tail.
type Process struct {
	grace time.Duration
	log   *zap.Logger

	cmd    *exec.Cmd
	pid    int
	stdin  *os.File // our write end of the child's stdin
	stdout *os.File // our read end of the child's stdout
	stderr *os.File
	out    *eofReader
	tail   *ring
	mark   string  // MarkEnv value its whole tree inherits
	start  uint64  // start stamp: tells the agent from a later process with its pid
	cg     *cgroup // nil without cgroups

	// sigMu, exitMu and own's lock are never held together, and the
	// reaper runs onExit with none held.
	sigMu  sync.Mutex // serialises group signals with the reap
	reaped bool

	done     chan struct{}
	exitErr  error
	exitKind string

	exitMu sync.Mutex // guards onExit and exited
	onExit func()     // run by the reaper once, after done closes
	exited bool       // the reaper has run onExit (or found none)

	closeOnce sync.Once
	stopping  atomic.Bool // Close was called: a signal exit is expected
	// abandoned leaves the tree alone at the reap, as a crashed daemon
	// would; only tests of the leftover sweep set it.
	abandoned atomic.Bool
}

// Start spawns the process and its two owned goroutines (stderr tail, reaper).
// On error nothing is left running.
func Start(spec Spec) (*Process, error) {
	if spec.Grace <= 0 {
		spec.Grace = 5 * time.Second
	}
	if spec.StderrTail <= 0 {
		spec.StderrTail = 8 << 10
	}
	if spec.Log == nil {
		spec.Log = zap.NewNop()
	}
	inR, inW, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("child: start %q: stdin pipe: %w", spec.Path, err)
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		closeAll(inR, inW)
		return nil, fmt.Errorf("child: start %q: stdout pipe: %w", spec.Path, err)
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		closeAll(inR, inW, outR, outW)
		return nil, fmt.Errorf("child: start %q: stderr pipe: %w", spec.Path, err)
	}
	mark := newMark(spec.MarkPrefix)
	cmd := exec.Command(spec.Path, spec.Args...)
	cmd.Dir = spec.Dir
	cmd.Env = append(append(CleanEnv(os.Environ()), spec.Env...), MarkEnv+"="+mark)
	// *os.File stdio is passed straight to the child: no copy goroutines, so
	// Wait never blocks on a grandchild that keeps a pipe open.
	cmd.Stdin, cmd.Stdout, cmd.Stderr = inR, outW, errW
	var cg *cgroup
	cgfd := -1
	if spec.Cgroups != nil {
		if cg, err = spec.Cgroups.newCgroup(spec.Limits); err == nil {
			if cgfd, err = cg.open(); err != nil {
				_ = cg.remove()
				cg = nil
			}
		}
		if err != nil {
			closeAll(inR, inW, outR, outW, errR, errW)
			return nil, fmt.Errorf("child: start %q: %w", spec.Path, err)
		}
	}
	// The orphan reaper must not take this pid before it is registered.
	own.Lock()
	err = startCmd(cmd, cgfd)
	if err != nil {
		own.Unlock()
		if cg != nil {
			_ = unixClose(cgfd)
			_ = cg.remove()
		}
		closeAll(inR, inW, outR, outW, errR, errW)
		return nil, fmt.Errorf("child: start %q: %w; check that the path is an executable file", spec.Path, err)
	}
	// The rlimit mark first: whatever the agent starts from now on
	// inherits it.
	markErr := setLimitMark(cmd.Process.Pid, spec.MarkPrefix)
	if cg != nil {
		_ = unixClose(cgfd)
	}
	closeAll(inR, outW, errW)
	p := &Process{
		grace:  spec.Grace,
		log:    spec.Log.With(zap.Int("pid", cmd.Process.Pid)),
		cmd:    cmd,
		pid:    cmd.Process.Pid,
		stdin:  inW,
		stdout: outR,
		stderr: errR,
		out:    &eofReader{r: outR, eof: make(chan struct{})},
		tail:   newRing(spec.StderrTail),
		mark:   mark,
		cg:     cg,
		done:   make(chan struct{}),
	}
	p.start, _ = startStamp(p.pid)
	own.procs[p.pid] = p
	own.Unlock()
	if err := setRlimits(p.pid, spec.Limits); err != nil {
		p.log.Warn("agent runs without its rlimits", zap.Error(err))
	}
	if err := markErr; err != nil {
		p.log.Warn("agent runs without its rlimit mark; a descendant that leaves its cgroup and clears its environment is not found after a crash of the daemon", zap.Error(err))
	}
	stderrDone := make(chan struct{})
	go func() {
		defer close(stderrDone)
		p.tail.readFrom(errR)
	}()
	go p.reap(stderrDone)
	return p, nil
}

// Stdin is the write end of the child's stdin. Closing it is allowed.
func (p *Process) Stdin() io.WriteCloser { return p.stdin }

// Stdout is the read end of the child's stdout; it reports EOF once the
// child and everything holding the pipe are gone, or after the reap.
func (p *Process) Stdout() io.Reader { return p.out }

// Pid is the process id, which is also its process group id.
func (p *Process) Pid() int { return p.pid }

// Log is the process's logger, carrying its pid.
func (p *Process) Log() *zap.Logger { return p.log }

// Done is closed once the process has been reaped and its output drained:
// stdout read to EOF by the caller, or drainLimit after the exit.
func (p *Process) Done() <-chan struct{} { return p.done }

// ExitErr is why the process exited (nil for status 0); valid after Done.
func (p *Process) ExitErr() error {
	select {
	case <-p.done:
		return p.exitErr
	default:
		return nil
	}
}

// ExitKind is ExitClean, ExitSignal or ExitError after Done, "" before.
func (p *Process) ExitKind() string {
	select {
	case <-p.done:
		return p.exitKind
	default:
		return ""
	}
}

// StderrTail is the last bytes the process wrote to stderr.
func (p *Process) StderrTail() string { return p.tail.String() }

// Stopping reports whether Close was called.
func (p *Process) Stopping() bool { return p.stopping.Load() }

// Close stops the process: close stdin, SIGTERM the group, wait the grace,
// SIGKILL the group, and wait for the reap. Idempotent and safe concurrently.
func (p *Process) Close() error {
	p.closeOnce.Do(func() {
		p.stopping.Store(true)
		_ = p.stdin.Close()
		p.signal(syscall.SIGTERM)
		// Descendants that left the group get the same chance to exit.
		p.signalTree(syscall.SIGTERM)
		t := time.NewTimer(p.grace)
		defer t.Stop()
		select {
		case <-p.done:
		case <-t.C:
			p.log.Warn("agent ignored SIGTERM; killing its process group", zap.Duration("grace", p.grace))
			p.signal(syscall.SIGKILL)
		}
	})
	<-p.done
	return nil
}

// reap is the one goroutine that waits for the process; it closes done.
func (p *Process) reap(stderrDone <-chan struct{}) {
	var err error
	if waitExited(p.pid) == nil {
		p.sigMu.Lock()
		// The leader is a zombie: its pid, and so the group id, cannot be reused yet.
		if !p.abandoned.Load() {
			p.killGroup(syscall.SIGKILL)
		}
		err = p.cmd.Wait()
		p.reaped = true
		p.sigMu.Unlock()
	} else {
		err = p.cmd.Wait()
		p.sigMu.Lock()
		if !p.abandoned.Load() {
			p.killGroup(syscall.SIGKILL)
		}
		p.reaped = true
		p.sigMu.Unlock()
	}
	p.exitErr, p.exitKind = err, exitKind(p.cmd.ProcessState)
	own.Lock()
	delete(own.procs, p.pid)
	own.Unlock()
	// The leader is gone: nothing it started may outlive it.
	if !p.abandoned.Load() && p.endTree() && p.exitKind == ExitSignal {
		p.exitKind = ExitOOM
	}

	_ = p.stdin.Close()
	// The group is dead, so EOF arrives once buffered output is read.
	// One deadline for both waits: a timer's channel fires only once.
	drain, stop := context.WithTimeout(context.Background(), drainLimit)
	for _, ch := range []<-chan struct{}{p.out.eof, stderrDone} {
		select {
		case <-ch:
		case <-drain.Done():
		}
	}
	stop()
	_ = p.stdout.Close()
	_ = p.stderr.Close()
	<-stderrDone

	fields := []zap.Field{zap.String("exit_kind", p.exitKind), zap.String("stderr_tail", p.tail.String())}
	if err != nil {
		fields = append(fields, zap.Error(err))
	}
	switch {
	case p.exitKind == ExitClean:
		p.log.Debug("agent exited", fields...)
	case p.stopping.Load():
		// We asked it to stop; a signal exit is the expected outcome.
		p.log.Info("agent stopped", fields...)
	default:
		p.log.Warn("agent exited", fields...)
	}
	close(p.done)
	p.exitMu.Lock()
	f := p.onExit
	p.onExit, p.exited = nil, true
	p.exitMu.Unlock()
	if f != nil {
		f()
	}
}

// OnExit has the reaper run f once the process has been reaped (after Done
// closes), so an owner that must clean up after the exit needs no goroutine
// of its own waiting on Done. On a process already reaped f runs at once,
// in the caller. A process has one exit callback: a later call replaces an
// earlier one that has not run.
func (p *Process) OnExit(f func()) {
	p.exitMu.Lock()
	if p.exited {
		p.exitMu.Unlock()
		f()
		return
	}
	p.onExit = f
	p.exitMu.Unlock()
}

func exitKind(ps *os.ProcessState) string {
	if ps == nil {
		return ExitError
	}
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return ExitSignal
	}
	if ps.Success() {
		return ExitClean
	}
	return ExitError
}

// killGroup signals the whole process group; callers hold sigMu.
func (p *Process) killGroup(sig syscall.Signal) {
	if p.reaped {
		return
	}
	if err := syscall.Kill(-p.pid, sig); err != nil && !errors.Is(err, syscall.ESRCH) {
		p.log.Warn("signal agent process group", zap.Stringer("signal", sig), zap.Error(err))
	}
}

func (p *Process) signal(sig syscall.Signal) {
	p.sigMu.Lock()
	defer p.sigMu.Unlock()
	p.killGroup(sig)
}

// signalTree sends sig to the agent's whole tree beyond its group: its
// cgroup, or without one the processes carrying its mark.
func (p *Process) signalTree(sig syscall.Signal) {
	if p.cg != nil {
		p.cg.signal(sig)
		return
	}
	signalMarked(p.mark, p.pid, sig)
}

// endTree kills what is left of the agent's tree after its leader was
// reaped: the whole cgroup (then removed), or the marked escapees. It
// reports whether the cgroup saw an OOM kill.
func (p *Process) endTree() (oom bool) {
	if p.cg == nil {
		if n := signalMarked(p.mark, 0, syscall.SIGKILL); n > 0 {
			p.log.Info("killed processes that escaped the agent's group", zap.Int("count", n))
		}
		return false
	}
	oom = p.cg.oomKilled()
	if !p.cg.empty() {
		if err := p.cg.kill(); err != nil {
			p.log.Warn("kill agent cgroup", zap.Error(err))
		}
		if !waitEmpty(p.cg.dir, drainLimit) {
			p.log.Warn("agent cgroup still populated after cgroup.kill", zap.String("cgroup", p.cg.dir))
		}
	}
	if err := p.cg.remove(); err != nil {
		p.log.Warn("remove agent cgroup", zap.Error(err))
	}
	return oom
}

// Mark is the MarkEnv value the process's tree carries.
func (p *Process) Mark() string { return p.mark }

// Cgroup is the directory of the process's cgroup, "" without one.
func (p *Process) Cgroup() string {
	if p.cg == nil {
		return ""
	}
	return p.cg.dir
}

// eofReader closes eof when its reader first fails: the reader of stdout has
// everything the child wrote.
type eofReader struct {
	r    io.Reader
	once sync.Once
	eof  chan struct{}
}

func (e *eofReader) Read(b []byte) (int, error) {
	n, err := e.r.Read(b)
	if err != nil {
		e.once.Do(func() { close(e.eof) })
	}
	return n, err
}

func closeAll(fs ...*os.File) {
	for _, f := range fs {
		_ = f.Close()
	}
}
