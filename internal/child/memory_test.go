package child

import (
	"slices"
	"testing"
)

// TestTree: an agent's tree is its group's live members and every
// descendant of theirs, whatever group a descendant moved to; zombies,
// the agent's parent and other groups are not in it.
func TestTree(t *testing.T) {
	all := []Stat{
		{Pid: 1, Ppid: 0, Pgrp: 1},
		{Pid: 50, Ppid: 1, Pgrp: 50},     // the daemon
		{Pid: 100, Ppid: 50, Pgrp: 100},  // the agent
		{Pid: 101, Ppid: 100, Pgrp: 100}, // node's CLI
		{Pid: 102, Ppid: 101, Pgrp: 102}, // a tool that called setsid
		{Pid: 103, Ppid: 102, Pgrp: 102}, // its child
		{Pid: 104, Ppid: 1, Pgrp: 100},   // an orphan still in the group
		{Pid: 105, Ppid: 100, Pgrp: 100, State: 'Z'},
		{Pid: 106, Ppid: 105, Pgrp: 100, State: 'Z'},
		{Pid: 200, Ppid: 50, Pgrp: 200}, // another agent
		{Pid: 201, Ppid: 200, Pgrp: 200},
		{Pid: 300, Ppid: 1, Pgrp: 300}, // someone else's
	}
	var got []int
	for _, st := range Tree(100, all) {
		got = append(got, st.Pid)
	}
	slices.Sort(got)
	if want := []int{100, 101, 102, 103, 104}; !slices.Equal(got, want) {
		t.Fatalf("Tree(100) = %v, want %v", got, want)
	}
	if tree := Tree(999, all); len(tree) != 0 {
		t.Fatalf("Tree of a pid with no process = %+v, want none", tree)
	}
}
