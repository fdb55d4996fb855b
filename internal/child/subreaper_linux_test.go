//go:build linux

package child

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
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

func init() { testRoles = append(testRoles, subreaperRole) }

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
