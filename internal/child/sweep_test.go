package child

import (
	"bufio"
	"errors"
	"io"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/residentd/residentd/internal/testkit"
)

// group is a real process group started by a shell script: the shell leads
// it, and its background children are members.
type group struct {
	cmd   *exec.Cmd
	in    io.WriteCloser
	out   *bufio.Reader
	done  chan struct{}
	ticks uint64
}

// startGroup runs script with sh in a new process group, reads its first
// stdout line (the script prints one once it is set up) and records the
// leader's start ticks.
func startGroup(t *testing.T, script string) (*group, string) {
	t.Helper()
	if _, err := exec.LookPath("sh"); err != nil {
		t.Skip("no sh on this machine:", err)
	}
	cmd := exec.Command("sh", "-c", script)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	in, out := testkit.StartPiped(t, cmd)
	g := &group{cmd: cmd, in: in, out: bufio.NewReader(out), done: make(chan struct{})}
	// Ticks first: the script may exit once its line is read.
	var err error
	g.ticks, err = StartTicks(cmd.Process.Pid)
	if err != nil {
		t.Fatalf("StartTicks of a live child: %v", err)
	}
	line, err := g.out.ReadString('\n')
	if err != nil {
		t.Fatalf("script %q: first line: %v", script, err)
	}
	go func() {
		cmd.Wait()
		close(g.done)
	}()
	t.Cleanup(func() {
		select {
		case <-g.done:
		default:
			syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			<-g.done
		}
	})
	return g, strings.TrimSpace(line)
}

func (g *group) leftover() Leftover {
	pid := g.cmd.Process.Pid
	return Leftover{Pid: pid, Pgid: pid, StartTicks: g.ticks, StartedAt: time.Now()}
}

func (g *group) exited() bool {
	select {
	case <-g.done:
		return true
	default:
		return false
	}
}

// alive reports whether pid is a running (non-zombie) process with the
// given start ticks.
func alive(pid int, ticks uint64) bool {
	if runtime.GOOS == "linux" {
		st, err := Read(pid)
		return err == nil && st.Start == ticks && !st.Zombie()
	}
	got, err := StartTicks(pid)
	return err == nil && got == ticks
}

// waitExited blocks until the group's leader has been reaped (bounded).
func (g *group) waitExited(t *testing.T) {
	t.Helper()
	select {
	case <-g.done:
	case <-time.After(10 * time.Second):
		t.Fatalf("leader %d did not exit", g.cmd.Process.Pid)
	}
}

// pidLine reads the pid a script printed and its start ticks.
func pidLine(t *testing.T, line string) (pid int, ticks uint64) {
	t.Helper()
	pid, err := strconv.Atoi(line)
	if err != nil {
		t.Fatalf("child pid line %q", line)
	}
	if ticks, err = StartTicks(pid); err != nil {
		t.Fatal(err)
	}
	return pid, ticks
}

func TestStartTicks(t *testing.T) {
	a, err := StartTicks(os.Getpid())
	if err != nil || a == 0 {
		t.Fatalf("StartTicks(self) = %d, %v", a, err)
	}
	if b, _ := StartTicks(os.Getpid()); a != b {
		t.Errorf("StartTicks(self) changed: %d then %d", a, b)
	}
	if _, err := StartTicks(reapedPid(t)); !errors.Is(err, ErrNoProcess) {
		t.Errorf("StartTicks(reaped pid) err = %v, want ErrNoProcess", err)
	}
}

// reapedPid is the pid of a child that has exited and been reaped: no
// process has it until the kernel hands it out again.
func reapedPid(t *testing.T) int {
	t.Helper()
	cmd := exec.Command("true")
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	return cmd.Process.Pid
}

func TestSweepKillsOwnGroupAndSparesStranger(t *testing.T) {
	// The line comes after both children are forked: the sweep must see all three.
	ours, line := startGroup(t, `sleep 300 & a=$!; sleep 300 & echo $a; wait`)
	child, childTicks := pidLine(t, line)
	// A stranger whose pid was "recorded" with other start ticks, as a
	// recycled pid would be.
	stranger, _ := startGroup(t, `echo up; exec sleep 300`)
	wrong := stranger.leftover()
	wrong.StartTicks++

	res := Sweep([]Leftover{ours.leftover(), wrong}, 5*time.Second)
	if len(res) != 2 {
		t.Fatalf("got %d results", len(res))
	}
	if r := res[0]; r.Outcome != SweepKilled || r.Err != nil || r.Members < 3 || r.Forced {
		t.Errorf("own group: %+v; want killed by SIGTERM with the leader and two children", r)
	}
	ours.waitExited(t)
	if ws := ours.cmd.ProcessState.Sys().(syscall.WaitStatus); !ws.Signaled() || ws.Signal() != syscall.SIGTERM {
		t.Errorf("leader exit status %v, want killed by SIGTERM", ours.cmd.ProcessState)
	}
	if alive(child, childTicks) {
		t.Errorf("child %d of the swept group is still running", child)
	}
	if r := res[1]; r.Outcome != SweepReused {
		t.Errorf("stranger: %+v, want reused", r)
	}
	if stranger.exited() || !alive(stranger.cmd.Process.Pid, stranger.ticks) {
		t.Error("the stranger was killed")
	}
}

func TestSweepOrphanedMembers(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("orphaned groups are only verifiable through /proc")
	}
	// The leader exits (as an agent does when the daemon dies) and leaves a
	// child behind in its group.
	g, line := startGroup(t, `sleep 300 & echo $!; read x`)
	child, childTicks := pidLine(t, line)
	g.in.Close()
	g.waitExited(t)
	t.Cleanup(func() {
		if alive(child, childTicks) {
			syscall.Kill(child, syscall.SIGKILL)
		}
	})
	if !alive(child, childTicks) {
		t.Fatal("the orphan did not outlive its leader")
	}
	res := Sweep([]Leftover{g.leftover()}, 5*time.Second)
	if r := res[0]; r.Outcome != SweepKilled || r.Members != 1 {
		t.Fatalf("orphaned group: %+v, want killed with 1 member", r)
	}
	if alive(child, childTicks) {
		t.Error("the orphan survived the sweep")
	}
}

func TestSweepForcesWhenTermIgnored(t *testing.T) {
	g, _ := startGroup(t, `trap "" TERM; echo ready; read x`)
	res := Sweep([]Leftover{g.leftover()}, 200*time.Millisecond)
	if r := res[0]; r.Outcome != SweepKilled || !r.Forced {
		t.Fatalf("%+v, want killed with SIGKILL", r)
	}
	g.waitExited(t)
	if ws := g.cmd.ProcessState.Sys().(syscall.WaitStatus); !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		t.Errorf("exit status %v, want killed by SIGKILL", g.cmd.ProcessState)
	}
}

func TestSweepSparesWhatItCannotTie(t *testing.T) {
	gone := exec.Command("true")
	if err := gone.Run(); err != nil {
		t.Fatal(err)
	}
	live, _ := startGroup(t, `echo up; exec sleep 300`)
	beforeBoot := live.leftover()
	beforeBoot.StartedAt = time.Date(1999, 1, 1, 0, 0, 0, 0, time.UTC)
	cases := []struct {
		name string
		rec  Leftover
		want string
	}{
		{"reaped pid", Leftover{Pid: gone.Process.Pid, Pgid: gone.Process.Pid, StartTicks: 1, StartedAt: time.Now()}, SweepGone},
		{"pid 1", Leftover{Pid: 1, Pgid: 1}, SweepUnverified},
		{"pgid 0", Leftover{Pid: live.cmd.Process.Pid, Pgid: 0, StartTicks: live.ticks}, SweepUnverified},
		{"wrong group", Leftover{Pid: live.cmd.Process.Pid, Pgid: os.Getpid(), StartTicks: live.ticks, StartedAt: time.Now()}, SweepUnverified},
	}
	if runtime.GOOS == "linux" {
		cases = append(cases, struct {
			name string
			rec  Leftover
			want string
		}{"recorded before boot", beforeBoot, SweepGone})
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			res := Sweep([]Leftover{tc.rec}, time.Second)
			if res[0].Outcome != tc.want {
				t.Errorf("%+v, want %s", res[0], tc.want)
			}
		})
	}
	if live.exited() || !alive(live.cmd.Process.Pid, live.ticks) {
		t.Error("a process the sweep could not tie to a record was killed")
	}
}
