package store

import (
	"path/filepath"
	"testing"
)

// TestAgentsSeenSurviveReopen: a binding's remembered agent commits nothing
// of its own, is listed at once, is written by close, is read back after
// the file is opened again, and a newer one replaces it.
func TestAgentsSeenSurviveReopen(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.db")
	s, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if got, err := s.AgentsSeen(); err != nil || len(got) != 0 {
		t.Fatalf("new file: %v, %v; want none", got, err)
	}
	a := AgentSeen{Name: "claude-agent-acp", Version: "0.49.0", Command: "node index.js"}
	b := AgentSeen{Name: "builtin", Version: "1", Command: "residentd agent", Failed: "lists no session modes"}
	for _, st := range []struct {
		id string
		a  AgentSeen
	}{{"b-claude", a}, {"b-builtin", a}, {"b-builtin", b}} {
		if err := s.SetAgentSeen(st.id, st.a); err != nil {
			t.Fatal(err)
		}
	}
	if n := s.Commits(); n != 0 {
		t.Fatalf("%d commits for agents seen, want none of their own", n)
	}
	if got, err := s.AgentsSeen(); err != nil || len(got) != 2 || got["b-builtin"] != b {
		t.Fatalf("agents seen before any write: %+v, %v", got, err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if s, err = Open(path, Options{}); err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	got, err := s.AgentsSeen()
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got["b-claude"] != a || got["b-builtin"] != b {
		t.Fatalf("agents seen after reopen: %+v", got)
	}
}
