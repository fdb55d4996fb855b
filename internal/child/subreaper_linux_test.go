//go:build linux

package child

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/residentd/residentd/internal/testkit"
)

// subreaperRole is the test binary as a small supervisor: it becomes a
// subreaper, starts an agent whose child double-forks, and checks that the
// orphan re-parents to it, dies with the agent, and is reaped (no zombie
// child left). Its own process, because a subreaper changes the whole
// process.
var subreaperRole = testkit.Role{Env: "RESIDENTD_CHILD_SUBREAPER", Main: subreaperMain}

// subreaperEscapeRole is the test binary as a supervisor whose agent's
// child escapes (testkit.EscapeRole) with nothing to find it by but its
// adoption: the subreaper's stop must end it.
var subreaperEscapeRole = testkit.Role{Env: "RESIDENTD_CHILD_SUBREAPER_ESCAPE", Main: subreaperEscapeMain}

func init() { testRoles = append(testRoles, subreaperRole, subreaperEscapeRole) }

func subreaperMain() int {
	fail := func(format string, args ...any) int {
		fmt.Printf("FAIL "+format+"\n", args...)
		return 1
	}
	stop, err := Subreaper(nil)
	if err != nil {
		return fail("%v", err)
	}
	defer stop()
	tok := newTok()
	p, err := Start(Spec{Path: "/bin/sh", Args: []string{"-c", fmt.Sprintf(`sh -c "sleep 3005.%s >/dev/null 2>&1 &"; echo ready; exec sleep 300`, tok)}, Grace: 300 * time.Millisecond})
	if err != nil {
		return fail("%v", err)
	}
	go func() { _, _ = io.Copy(io.Discard, p.Stdout()) }()
	orphan := 0
	for deadline := time.Now().Add(20 * time.Second); orphan == 0; {
		for _, pid := range descendants(tok) {
			if st, err := Read(pid); err == nil && st.Ppid == os.Getpid() {
				orphan = pid
			}
		}
		if time.Now().After(deadline) {
			return fail("the double-forked orphan never re-parented to the subreaper (found %v)", descendants(tok))
		}
		time.Sleep(5 * time.Millisecond)
	}
	fmt.Println("adopted", orphan)
	_ = p.Close()
	for deadline := time.Now().Add(20 * time.Second); ; {
		kids := 0
		all, _ := All()
		for _, st := range all {
			if st.Ppid == os.Getpid() {
				kids++
			}
		}
		if kids == 0 {
			break
		}
		if time.Now().After(deadline) {
			return fail("%d children (live or zombie) left after the agent stopped", kids)
		}
		time.Sleep(5 * time.Millisecond)
	}
	fmt.Println("reaped")
	return 0
}

func TestSubreaperAdoptsAndReaps(t *testing.T) {
	cmd := exec.Command(testkit.Exe(t), "-test.run=^$")
	cmd.Env = append(os.Environ(), "RESIDENTD_CHILD_SUBREAPER=1")
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "adopted ") || !strings.Contains(string(out), "reaped") {
		t.Fatalf("subreaper check: %v\n%s", err, out)
	}
}

func subreaperEscapeMain() int {
	fail := func(format string, args ...any) int {
		fmt.Printf("FAIL "+format+"\n", args...)
		return 1
	}
	stop, err := Subreaper(nil)
	if err != nil {
		return fail("%v", err)
	}
	defer stop()
	esc, err := testkit.MakeEscape(os.Getenv("RESIDENTD_CHILD_SUBREAPER_ESCAPE"))
	if err != nil {
		return fail("%v", err)
	}
	defer esc.Kill() // however far a failure left it
	exe, _ := os.Executable()
	prefix := newMark("")[:MarkPrefixLen]
	env := []string{"ESCAPE_EXE=" + exe}
	for k, v := range esc.Env("", true) {
		env = append(env, k+"="+v)
	}
	p, err := Start(Spec{Path: "/bin/sh", Args: []string{"-c", escapeScript}, Env: env, Grace: 300 * time.Millisecond, MarkPrefix: prefix})
	if err != nil {
		return fail("%v", err)
	}
	go func() { _, _ = io.Copy(io.Discard, p.Stdout()) }()
	if _, err := p.Stdin().Write([]byte("go\n")); err != nil {
		return fail("%v", err)
	}
	pid, err := esc.Wait(20 * time.Second)
	if err != nil {
		return fail("the escapee: %v", err)
	}
	st, err := Read(pid)
	if err != nil || st.Ppid != os.Getpid() {
		return fail("the escapee %d is not adopted: %+v %v", pid, st, err)
	}
	l := link{Pid: pid, Ppid: st.Ppid, Start: st.Start}
	_ = p.Close()
	if !same(l) {
		return fail("the escapee did not outlive its agent: nothing to end")
	}
	if v := (&Lineage{Self: os.Getpid(), Adopts: true}).Agent(pid, Now()); !v.Agent || !strings.Contains(v.Why, "adopted") {
		return fail("the adopted escapee: %+v, want an agent's by adoption", v)
	}
	stop()
	if same(l) {
		_ = syscall.Kill(pid, syscall.SIGKILL)
		return fail("the escapee survived the subreaper's stop")
	}
	all, _ := All()
	for _, st := range all {
		if st.Ppid == os.Getpid() {
			return fail("a child (live or zombie) left after the stop: %+v", st)
		}
	}
	fmt.Println("ended", pid)
	return 0
}

// An agent's descendant that cleared its environment and its rlimit mark
// and left its group and session, with no cgroup to hold it, is adopted
// by the daemon; the subreaper's stop, as the daemon exits, ends and
// reaps it.
func TestSubreaperStopEndsWhatItAdopted(t *testing.T) {
	cmd := exec.Command(testkit.Exe(t), "-test.run=^$")
	cmd.Env = append(os.Environ(), "RESIDENTD_CHILD_SUBREAPER_ESCAPE="+testkit.ShortDir(t))
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "ended ") {
		t.Fatalf("subreaper stop: %v\n%s", err, out)
	}
}
