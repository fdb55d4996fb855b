package store

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/residentd/residentd/internal/child"
	"github.com/residentd/residentd/internal/session"
)

// Recording or forgetting an agent costs no commit of its own: the change
// goes in the next write transaction (or when the store closes), the
// listing shows it meanwhile, a record forgotten before it was written
// never reaches the file, and the last change of a pid wins.
func TestAgentRecordsRideTheNextWrite(t *testing.T) {
	s := openTest(t, Options{})
	k := session.Key{Channel: "ch", Binding: "b"}
	rec := func(pid int, ticks uint64) AgentRecord {
		return AgentRecord{Pid: pid, Pgid: pid, StartTicks: ticks, Command: "agent", Key: k, StartedAt: time.Now()}
	}
	write := func() { // some other write: a turn's commit, say
		t.Helper()
		if err := s.SetKeyOptions(k, map[string]string{"n": fmt.Sprint(s.Commits())}); err != nil {
			t.Fatal(err)
		}
	}
	before := s.Commits()
	for _, pid := range []int{41, 42, 43} {
		if err := s.RecordAgent(rec(pid, 7)); err != nil {
			t.Fatal(err)
		}
	}
	if got := listed(t, s); got != "[41:7 42:7 43:7]" {
		t.Fatalf("listing before any commit: %s, want the three pending records", got)
	}
	if got := onDisk(t, s); got != "[]" {
		t.Fatalf("file before any commit: %s, want nothing", got)
	}
	// Forgotten before it was written: it simply disappears.
	if err := s.ForgetAgent(41); err != nil {
		t.Fatal(err)
	}
	if n := s.Commits() - before; n != 0 {
		t.Fatalf("RecordAgent and ForgetAgent made %d commits, want 0", n)
	}
	if got := listed(t, s); got != "[42:7 43:7]" {
		t.Fatalf("listing after forgetting a pending record: %s", got)
	}
	write()
	if n := s.Commits() - before; n != 1 {
		t.Fatalf("%d commits after the next write, want 1", n)
	}
	if got := onDisk(t, s); got != "[42:7 43:7]" {
		t.Fatalf("file after the next write: %s, want [42:7 43:7]", got)
	}
	if s.agentsPending() {
		t.Fatal("changes still pending after the write that carried them")
	}
	// A written record forgotten: hidden at once, dropped by the next write.
	if err := s.ForgetAgent(42); err != nil {
		t.Fatal(err)
	}
	if got := listed(t, s); got != "[43:7]" {
		t.Fatalf("listing while forgetting: %s, want [43:7]", got)
	}
	// pid 42 is reused by a new process before the next write: the new
	// record replaces the forget.
	if err := s.RecordAgent(rec(42, 9)); err != nil {
		t.Fatal(err)
	}
	if got := listed(t, s); got != "[42:9 43:7]" {
		t.Fatalf("listing after the pid's reuse: %s, want [42:9 43:7]", got)
	}
	// Still pending at Close: Close writes them.
	if err := s.RecordAgent(rec(44, 7)); err != nil {
		t.Fatal(err)
	}
	if err := s.ForgetAgent(43); err != nil {
		t.Fatal(err)
	}
	if n := s.Commits() - before; n != 1 {
		t.Fatalf("%d commits, want still 1", n)
	}
	s = reopen(t, s, Options{})
	if got := onDisk(t, s); got != "[42:9 44:7]" {
		t.Fatalf("file after close and reopen: %s, want [42:9 44:7]", got)
	}
	if got := listed(t, s); got != "[42:9 44:7]" {
		t.Fatalf("listing after close and reopen: %s, want [42:9 44:7]", got)
	}
}

// While other writes commit, a record is listed from the moment
// RecordAgent returns until ForgetAgent is called: a commit carrying it
// never makes it vanish between the pending set and the file.
func TestAgentListingDuringCommits(t *testing.T) {
	s := openTest(t, Options{})
	k := session.Key{Channel: "ch", Binding: "b"}
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			if err := s.SetKeyOptions(k, map[string]string{"i": fmt.Sprint(i)}); err != nil {
				t.Error(err)
				return
			}
		}
	}()
	defer func() { close(stop); <-done }()
	has := func(pid int) bool {
		ag, err := s.Agents()
		if err != nil {
			t.Fatal(err)
		}
		for _, a := range ag {
			if a.Pid == pid {
				return true
			}
		}
		return false
	}
	for pid := 100; pid < 400; pid++ {
		if err := s.RecordAgent(AgentRecord{Pid: pid, Pgid: pid, StartTicks: 1, Key: k}); err != nil {
			t.Fatal(err)
		}
		for range 3 {
			if !has(pid) {
				t.Fatalf("pid %d recorded but not listed", pid)
			}
		}
		if err := s.ForgetAgent(pid); err != nil {
			t.Fatal(err)
		}
		if has(pid) {
			t.Fatalf("pid %d forgotten but listed", pid)
		}
	}
}

// The file's mark prefix is made once and kept.
func TestMarkPrefixIsKept(t *testing.T) {
	s := openTest(t, Options{})
	p := s.MarkPrefix()
	if !child.ValidMarkPrefix(p) {
		t.Fatalf("mark prefix %q, want 16 hex digits", p)
	}
	if q := openTest(t, Options{}).MarkPrefix(); q == p {
		t.Fatalf("two files share the mark prefix %q", p)
	}
	if q := reopen(t, s, Options{}).MarkPrefix(); q != p {
		t.Fatalf("mark prefix after reopen %q, want %q", q, p)
	}
}

// listed is Agents as pid:ticks.
func listed(t *testing.T, s *Store) string {
	t.Helper()
	ag, err := s.Agents()
	if err != nil {
		t.Fatal(err)
	}
	out := []string{}
	for _, a := range ag {
		out = append(out, fmt.Sprintf("%d:%d", a.Pid, a.StartTicks))
	}
	return fmt.Sprint(out)
}

// onDisk is the agent records committed to the file, as pid:ticks.
func onDisk(t *testing.T, s *Store) string {
	t.Helper()
	out := []string{}
	err := s.view(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketAgents).ForEach(func(k, v []byte) error {
			var r AgentRecord
			if err := json.Unmarshal(v, &r); err != nil {
				return err
			}
			out = append(out, fmt.Sprintf("%d:%d", r.Pid, r.StartTicks))
			return nil
		})
	})
	if err != nil {
		t.Fatal(err)
	}
	return fmt.Sprint(out)
}
