package tools_test

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/residentd/residentd/apitype"
	"github.com/residentd/residentd/internal/config"
	"github.com/residentd/residentd/internal/testkit"
	"github.com/residentd/residentd/internal/tools"
	"github.com/residentd/residentd/internal/workspace"
)

// TestRosterListsTheChannelsWorktrees: channel_roster tells an agent the
// git worktrees its channel's keys work in (its own and the other
// bindings'), with their uncommitted changes, and no other channel's.
func TestRosterListsTheChannelsWorktrees(t *testing.T) {
	repo := testkit.GitRepo(t)
	wt := func(id string) func(string) config.Binding {
		return func(dir string) config.Binding {
			b := builtinBinding(t, id, dir)
			b.Dir, b.Workspace = repo, workspace.Worktree
			return b
		}
	}
	e := newEnv(t, wt("b-one"), wt("b-two"))
	ctx := context.Background()
	for _, r := range []apitype.TurnRequest{
		{Channel: "ch", Binding: "b-one", Text: "@agent [[write-cwd:notes.txt]]"},
		{Channel: "ch", Binding: "b-two", Text: "@agent look"},
		{Channel: "ch-other", Binding: "b-one", Text: "@agent [[write-cwd:secret.txt]]"},
	} {
		if _, err := e.c.Turn(ctx, r, nil); err != nil {
			t.Fatal(err)
		}
	}
	cs := connect(t, tools.Config{Socket: e.socket, Capability: e.issue("ch")})
	var r apitype.Roster
	res := call(t, cs, tools.ToolRoster, nil)
	structured(t, res, &r)
	if len(r.Worktrees) != 2 {
		t.Fatalf("roster worktrees %+v, want ch's two", r.Worktrees)
	}
	got := map[string]apitype.Worktree{}
	for _, w := range r.Worktrees {
		got[w.Binding] = w
	}
	one, two := got["b-one"], got["b-two"]
	if one.Changes != 1 || two.Changes != 0 || one.Branch != "residentd/b-one/ch" || filepath.Base(two.Path) != "ch" || one.Channel != "ch" || two.Channel != "ch" {
		t.Fatalf("roster worktrees %+v", r.Worktrees)
	}
	txt := text(res)
	if !strings.Contains(txt, "- binding b-one: "+one.Path+" on branch residentd/b-one/ch, 1 uncommitted changes") || strings.Contains(txt, "ch-other") {
		t.Fatalf("roster text:\n%s", txt)
	}
}
