package acp

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/residentd/residentd/internal/permission"
)

// TestSessionCwd: SetCwd gives the next session requests another working
// directory than the process's own (a key's worktree on a process started
// in its binding's dir): session/new and session/load carry it, the
// session's file requests resolve against it and are confined to it, and
// a session opened before keeps its own.
func TestSessionCwd(t *testing.T) {
	record := filepath.Join(t.TempDir(), "record.jsonl")
	state := t.TempDir()
	spec := builtinSpec(t, "--record", record, "--state", state)
	spec.Permission = permission.Allow
	procDir, wt := spec.Dir, t.TempDir()
	a := start(t, spec)
	ctx := context.Background()

	first := newSession(t, a) // before SetCwd: the process's dir
	if err := a.SetCwd(filepath.Join(wt, "missing")); err == nil {
		t.Fatal("SetCwd of a folder that does not exist: no error")
	}
	if err := a.SetCwd(wt); err != nil {
		t.Fatal(err)
	}
	if a.Cwd() != wt {
		t.Fatalf("Cwd = %q, want %q", a.Cwd(), wt)
	}
	second := newSession(t, a)
	if a.SessionCwd(second) != wt || a.SessionCwd(first) != procDir {
		t.Fatalf("SessionCwd: first %q second %q, want %q and %q", a.SessionCwd(first), a.SessionCwd(second), procDir, wt)
	}

	thoughts := func(native, text string) string {
		t.Helper()
		var c collector
		if _, err := a.Prompt(ctx, native, text, c.on); err != nil {
			t.Fatalf("Prompt: %v", err)
		}
		return strings.Join(c.texts("agent_thought_chunk"), "\n")
	}
	if got := thoughts(second, "[[write:in-worktree.txt]]"); !strings.Contains(got, "ok") {
		t.Fatalf("write in the session's cwd: %q", got)
	}
	if _, err := os.Stat(filepath.Join(wt, "in-worktree.txt")); err != nil {
		t.Fatalf("a relative write of the second session did not land in its cwd: %v", err)
	}
	if _, err := os.Stat(filepath.Join(procDir, "in-worktree.txt")); err == nil {
		t.Fatal("a relative write of the second session landed in the process's dir")
	}
	if got := thoughts(second, "[[write:"+filepath.Join(procDir, "x.txt")+"]]"); !strings.Contains(got, "outside the agent's working directory") {
		t.Fatalf("a write of the second session into the process's dir: %q, want it refused", got)
	}
	if got := thoughts(first, "[[write:in-proc.txt]]"); !strings.Contains(got, "ok") {
		t.Fatalf("write of the first session: %q", got)
	}
	if _, err := os.Stat(filepath.Join(procDir, "in-proc.txt")); err != nil {
		t.Fatalf("the first session's write did not land in its own cwd: %v", err)
	}
	if got := thoughts(first, "[[write:"+filepath.Join(wt, "y.txt")+"]]"); !strings.Contains(got, "outside the agent's working directory") {
		t.Fatalf("a write of the first session into the other's cwd: %q, want it refused", got)
	}

	// A new process reopens the session with the cwd SetCwd names.
	b := start(t, builtinSpec(t, "--record", record, "--state", state))
	if err := b.SetCwd(wt); err != nil {
		t.Fatal(err)
	}
	if err := b.LoadSession(ctx, second); err != nil {
		t.Fatal(err)
	}
	if b.SessionCwd(second) != wt {
		t.Fatalf("loaded session's cwd %q, want %q", b.SessionCwd(second), wt)
	}
	cwds := map[string][]string{}
	for _, l := range readRecord(t, record) {
		var method, session, cwd string
		_ = json.Unmarshal(l["method"], &method)
		_ = json.Unmarshal(l["session"], &session)
		_ = json.Unmarshal(l["cwd"], &cwd)
		if method == "session/new" || method == "session/load" {
			cwds[session] = append(cwds[session], method+" "+cwd)
		}
	}
	if got := strings.Join(cwds[first], ","); got != "session/new "+procDir {
		t.Errorf("first session's requests %q, want its session/new in %s", got, procDir)
	}
	if got, want := strings.Join(cwds[second], ","), "session/new "+wt+",session/load "+wt; got != want {
		t.Errorf("second session's requests %q, want %q", got, want)
	}
}
