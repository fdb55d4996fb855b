package store

import (
	"fmt"
	"testing"
	"time"

	"github.com/residentd/residentd/internal/session"
)

// An agent's exit costs no commit of its own: ForgetAgent drops the record
// in the next write transaction (or when the store closes), the listing
// hides it meanwhile, and a new record of the same pid cancels it.
func TestForgetAgentRidesTheNextWrite(t *testing.T) {
	s := openTest(t, Options{})
	k := session.Key{Channel: "ch", Binding: "b"}
	rec := func(pid int) AgentRecord {
		return AgentRecord{Pid: pid, Pgid: pid, StartTicks: 7, Command: "agent", Key: k, StartedAt: time.Now()}
	}
	pids := func(s *Store) string {
		ag, err := s.Agents()
		if err != nil {
			t.Fatal(err)
		}
		var out []int
		for _, a := range ag {
			out = append(out, a.Pid)
		}
		return fmt.Sprint(out)
	}
	for _, pid := range []int{41, 42, 43} {
		if err := s.RecordAgent(rec(pid)); err != nil {
			t.Fatal(err)
		}
	}
	before := s.Commits()
	if err := s.ForgetAgent(41); err != nil {
		t.Fatal(err)
	}
	if err := s.ForgetAgent(42); err != nil {
		t.Fatal(err)
	}
	if n := s.Commits() - before; n != 0 {
		t.Fatalf("ForgetAgent made %d commits, want 0", n)
	}
	if got := pids(s); got != "[43]" {
		t.Fatalf("listing while forgetting: %s, want [43]", got)
	}
	// pid 42 is reused by a new process before the next write: its record stays.
	if err := s.RecordAgent(rec(42)); err != nil {
		t.Fatal(err)
	}
	if n := s.Commits() - before; n != 1 {
		t.Fatalf("%d commits after the next write, want 1", n)
	}
	if got := pids(s); got != "[42 43]" {
		t.Fatalf("after the next write: %s, want [42 43]", got)
	}
	// A forget still pending when the store closes is written by Close.
	if err := s.ForgetAgent(43); err != nil {
		t.Fatal(err)
	}
	s = reopen(t, s, Options{})
	if got := pids(s); got != "[42]" {
		t.Fatalf("after close and reopen: %s, want [42]", got)
	}
}
