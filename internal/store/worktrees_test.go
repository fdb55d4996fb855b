package store

import (
	"slices"
	"testing"
	"time"

	"github.com/residentd/residentd/internal/session"
	"github.com/residentd/residentd/internal/workspace"
)

// TestWorktreeRecords: a key's worktree record is kept apart from its
// threads' and other keys', survives a reopen, and goes when forgotten; a
// file written before the bucket existed gets it when opened.
func TestWorktreeRecords(t *testing.T) {
	s := openFrom(t, SchemaVersion, nil) // a file of today's version without the bucket
	main := session.Key{Channel: "ch", Binding: "b"}
	thread := session.Key{Channel: "ch", Binding: "b", Thread: "m1"}
	if _, ok, err := s.Worktree(main); ok || err != nil {
		t.Fatalf("a record before any: %v %v", ok, err)
	}
	at := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
	r1 := workspace.Record{Channel: "ch", Binding: "b", Repo: "/r", Path: "/w/b/ch", Branch: "residentd/b/ch", Base: "abc", Created: at, Sessions: []string{"nat-1"}}
	r2 := workspace.Record{Channel: "ch", Binding: "b", Thread: "m1", Repo: "/r", Path: "/w/b/ch+m1", Branch: "residentd/b/ch+m1", Base: "abc", Created: at}
	for _, r := range []workspace.Record{r1, r2} {
		if err := s.PutWorktree(r); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.PutWorktree(workspace.Record{Binding: "b"}); err == nil {
		t.Fatal("a record without a channel was stored")
	}
	s = reopen(t, s, Options{})
	got, ok, err := s.Worktree(main)
	if err != nil || !ok || got.Path != r1.Path || !got.Created.Equal(at) || !slices.Equal(got.Sessions, r1.Sessions) {
		t.Fatalf("main key's record after a reopen: %+v %v %v", got, ok, err)
	}
	if got, ok, _ := s.Worktree(thread); !ok || got.Path != r2.Path {
		t.Fatalf("thread key's record: %+v", got)
	}
	all, err := s.Worktrees()
	if err != nil || len(all) != 2 {
		t.Fatalf("records: %+v %v", all, err)
	}
	if err := s.ForgetWorktree(main); err != nil {
		t.Fatal(err)
	}
	if _, ok, _ := s.Worktree(main); ok {
		t.Fatal("the forgotten record is still there")
	}
	if _, ok, _ := s.Worktree(thread); !ok {
		t.Fatal("forgetting the channel's record dropped its thread's")
	}
	// Start fresh keeps the worktree: Forget leaves the record.
	if err := s.PutWorktree(r1); err != nil {
		t.Fatal(err)
	}
	if err := s.Forget(main); err != nil {
		t.Fatal(err)
	}
	if _, ok, _ := s.Worktree(main); !ok {
		t.Fatal("Forget (start fresh) dropped the key's worktree record")
	}
}
