package store

import (
	"fmt"
	"testing"
	"time"

	"github.com/residentd/residentd/apitype"
	"github.com/residentd/residentd/internal/session"
)

func TestRoster(t *testing.T) {
	s := openTest(t, Options{MaxRoster: 2})
	if r, err := s.Roster("ch-a"); err != nil || r != nil {
		t.Fatalf("unset roster = %v, %v", r, err)
	}
	if err := s.SetRoster("ch-a", []apitype.Member{{Handle: "ann", Kind: "user", Reachable: true}, {Handle: "bot", Kind: "agent", Reachable: false}, {Handle: "cy", Kind: "user", Reachable: true}}); err != nil {
		t.Fatal(err)
	}
	r, err := s.Roster("ch-a")
	if err != nil || len(r) != 2 || r[0] != (apitype.Member{Handle: "ann", Kind: "user", Reachable: true}) || r[1] != (apitype.Member{Handle: "bot", Kind: "agent", Reachable: false}) {
		t.Errorf("roster = %+v, %v", r, err)
	}
	if err := s.SetRoster("ch-a", nil); err != nil {
		t.Fatal(err)
	}
	if r, _ := s.Roster("ch-a"); r == nil || len(r) != 0 {
		t.Errorf("replaced roster = %#v, want empty non-nil", r)
	}
	if err := s.SetRoster("", nil); err == nil {
		t.Error("roster without channel accepted")
	}
}

func TestActivity(t *testing.T) {
	s := openTest(t, Options{MaxActivity: 3})
	if a, err := s.Activity("p", 5); err != nil || len(a) != 0 {
		t.Fatalf("empty activity = %v, %v", a, err)
	}
	item := func(sec int) apitype.Activity {
		return apitype.Activity{Kind: "commit", Summary: fmt.Sprint(sec), At: t0.Add(time.Duration(sec) * time.Second)}
	}
	if err := s.AddActivity("p", []apitype.Activity{item(3), item(1), item(2)}); err != nil {
		t.Fatal(err)
	}
	if err := s.AddActivity("p", []apitype.Activity{item(5), item(0)}); err != nil {
		t.Fatal(err)
	}
	if err := s.AddActivity("q", []apitype.Activity{item(9)}); err != nil {
		t.Fatal(err)
	}
	summaries := func(as []apitype.Activity) string {
		var out []string
		for _, a := range as {
			out = append(out, a.Summary)
		}
		return fmt.Sprint(out)
	}
	a, err := s.Activity("p", 0)
	if err != nil || summaries(a) != "[5 3 2]" {
		t.Errorf("activity = %s, %v; want newest 3 newest first [5 3 2]", summaries(a), err)
	}
	if a, _ := s.Activity("p", 2); summaries(a) != "[5 3]" {
		t.Errorf("activity n=2 = %s", summaries(a))
	}
	if a, _ := s.Activity("q", 10); summaries(a) != "[9]" {
		t.Errorf("project q = %s", summaries(a))
	}
	if err := s.AddActivity("", []apitype.Activity{item(1)}); err == nil {
		t.Error("activity without project accepted")
	}
}

func TestAgents(t *testing.T) {
	s := openTest(t, Options{})
	k := session.Key{Channel: "ch-a", Binding: "b-1"}
	for _, pid := range []int{300, 20} {
		if err := s.RecordAgent(AgentRecord{Pid: pid, Pgid: pid, StartTicks: uint64(pid * 10), Command: "agent", Key: k, StartedAt: t0}); err != nil {
			t.Fatal(err)
		}
	}
	ag, err := s.Agents()
	if err != nil || len(ag) != 2 || ag[0].Pid != 20 || ag[1].Pid != 300 || ag[1].StartTicks != 3000 || ag[0].Key != k || !ag[0].StartedAt.Equal(t0) {
		t.Fatalf("agents = %+v, %v", ag, err)
	}
	if err := s.ForgetAgent(20); err != nil {
		t.Fatal(err)
	}
	if err := s.ForgetAgent(20); err != nil {
		t.Errorf("forgetting twice: %v", err)
	}
	if ag, _ := s.Agents(); len(ag) != 1 || ag[0].Pid != 300 {
		t.Errorf("after forget: %+v", ag)
	}
	if err := s.RecordAgent(AgentRecord{Pid: 0}); err == nil {
		t.Error("pid 0 accepted")
	}
}
