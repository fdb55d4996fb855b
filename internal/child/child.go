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
)

// ExitKinds lists every exit kind, for metrics that pre-create series.
var ExitKinds = []string{ExitClean, ExitSignal, ExitError}

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

	sigMu  sync.Mutex // serialises group signals with the reap
	reaped bool

	done     chan struct{}
	exitErr  error
	exitKind string

	closeOnce sync.Once
	stopping  atomic.Bool // Close was called: a signal exit is expected
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
	cmd := exec.Command(spec.Path, spec.Args...)
	cmd.Dir = spec.Dir
	cmd.Env = append(CleanEnv(os.Environ()), spec.Env...)
	// *os.File stdio is passed straight to the child: no copy goroutines, so
	// Wait never blocks on a grandchild that keeps a pipe open.
	cmd.Stdin, cmd.Stdout, cmd.Stderr = inR, outW, errW
	if err := startCmd(cmd); err != nil {
		closeAll(inR, inW, outR, outW, errR, errW)
		return nil, fmt.Errorf("child: start %q: %w; check that the path is an executable file", spec.Path, err)
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
		done:   make(chan struct{}),
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
		p.killGroup(syscall.SIGKILL)
		err = p.cmd.Wait()
		p.reaped = true
		p.sigMu.Unlock()
	} else {
		err = p.cmd.Wait()
		p.sigMu.Lock()
		p.killGroup(syscall.SIGKILL)
		p.reaped = true
		p.sigMu.Unlock()
	}
	p.exitErr, p.exitKind = err, exitKind(p.cmd.ProcessState)

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
