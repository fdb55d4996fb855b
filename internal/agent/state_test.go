package agent

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	acp "github.com/coder/acp-go-sdk"
)

func TestSessionAddKeepsNewest(t *testing.T) {
	tests := []struct {
		name  string
		limit int
		add   int
		want  []int // turn numbers kept, oldest first
	}{
		{"under the cap", 3, 2, []int{1, 2}},
		{"at the cap", 3, 3, []int{1, 2, 3}},
		{"past the cap", 3, 7, []int{5, 6, 7}},
		{"cap of one", 1, 4, []int{4}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var s session
			for n := 1; n <= tt.add; n++ {
				s.add(turn{N: n, User: fmt.Sprint("u", n)}, tt.limit)
			}
			var got []int
			for _, k := range s.turns {
				got = append(got, k.N)
			}
			if fmt.Sprint(got) != fmt.Sprint(tt.want) || s.count != tt.add || cap(s.turns) > tt.limit+1 {
				t.Fatalf("kept %v (cap %d), count %d; want %v, count %d", got, cap(s.turns), s.count, tt.want, tt.add)
			}
		})
	}
}

func TestValidID(t *testing.T) {
	for id, want := range map[string]bool{
		"nat-0123456789abcdef": true, "A_b-9": true, strings.Repeat("a", 128): true,
		"": false, strings.Repeat("a", 129): false, "../x": false, "a.b": false, "a b": false, "ü": false,
	} {
		if got := validID(id); got != want {
			t.Errorf("validID(%q) = %v, want %v", id, got, want)
		}
	}
}

// logLines renders records as a state file.
func logLines(recs ...string) string {
	return strings.Join(recs, "\n") + "\n"
}

const hdr = `{"session":{"id":"s","cwd":"/w","mcp_servers":[]}}`

func turnRec(n int) string {
	return fmt.Sprintf(`{"turn":{"n":%d,"user":"u%d","reply":"r%d"}}`, n, n, n)
}

func TestReadLog(t *testing.T) {
	tests := []struct {
		name       string
		data       string
		limit      int
		wantTurns  string // kept turn numbers
		wantCount  int
		wantLogged int
		wantTorn   bool
		wantErr    string
	}{
		{"header only", logLines(hdr), 3, "[]", 0, 0, false, ""},
		{"turns under the cap", logLines(hdr, turnRec(1), turnRec(2)), 3, "[1 2]", 2, 2, false, ""},
		{"turns past the cap", logLines(hdr, turnRec(1), turnRec(2), turnRec(3), turnRec(4), turnRec(5)), 2, "[4 5]", 5, 5, false, ""},
		{"compacted file numbers on", logLines(hdr, turnRec(41), turnRec(42)), 3, "[41 42]", 42, 2, false, ""},
		{"torn last line", logLines(hdr, turnRec(1)) + `{"turn":{"n":2,"us`, 3, "[1]", 1, 1, true, ""},
		{"corrupt line", logLines(hdr, turnRec(1), `{"turn":`, turnRec(3)), 3, "", 0, 0, false, "line 3"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "s"+logExt)
			if err := os.WriteFile(path, []byte(tt.data), 0o600); err != nil {
				t.Fatal(err)
			}
			s, torn, err := readLog(path, "s", tt.limit)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) || !strings.Contains(err.Error(), path) {
					t.Fatalf("err = %v, want one naming %s and %q", err, path, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			got := []int{}
			for _, k := range s.turns {
				got = append(got, k.N)
			}
			if fmt.Sprint(got) != tt.wantTurns || s.count != tt.wantCount || s.logged != tt.wantLogged || torn != tt.wantTorn || s.Cwd != "/w" {
				t.Fatalf("turns %v count %d logged %d torn %v cwd %q; want %s %d %d %v /w", got, s.count, s.logged, torn, s.Cwd, tt.wantTurns, tt.wantCount, tt.wantLogged, tt.wantTorn)
			}
		})
	}
	if _, _, err := readLog(filepath.Join(t.TempDir(), "none"+logExt), "none", 3); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("missing file: err = %v, want fs.ErrNotExist", err)
	}
}

// prompt runs one turn and returns the streamed reply.
func prompt(t *testing.T, conn *acp.ClientSideConnection, c *testClient, id acp.SessionId, text string) string {
	t.Helper()
	if _, err := conn.Prompt(context.Background(), acp.PromptRequest{SessionId: id, Prompt: []acp.ContentBlock{acp.TextBlock(text)}}); err != nil {
		t.Fatalf("prompt %q: %v", text, err)
	}
	var reply strings.Builder
	for _, u := range c.take() {
		if u.Update.AgentMessageChunk != nil {
			reply.WriteString(u.Update.AgentMessageChunk.Content.Text.Text)
		}
	}
	return reply.String()
}

// load loads id and returns the replayed user texts; each must be followed
// by its reply.
func load(t *testing.T, conn *acp.ClientSideConnection, c *testClient, id acp.SessionId) []string {
	t.Helper()
	if _, err := conn.LoadSession(context.Background(), acp.LoadSessionRequest{SessionId: id, Cwd: t.TempDir(), McpServers: []acp.McpServer{}}); err != nil {
		t.Fatalf("load %s: %v", id, err)
	}
	var users []string
	replay := c.take()
	for i, u := range replay {
		switch {
		case i%2 == 0 && u.Update.UserMessageChunk != nil:
			users = append(users, u.Update.UserMessageChunk.Content.Text.Text)
		case i%2 == 1 && u.Update.AgentMessageChunk != nil && strings.HasPrefix(u.Update.AgentMessageChunk.Content.Text.Text, "builtin turn="):
		default:
			t.Fatalf("replay update %d is %+v, want user turns each followed by its reply", i, u.Update)
		}
	}
	return users
}

func fileLines(t *testing.T, path string) int {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return bytes.Count(data, []byte("\n"))
}

// The cap bounds what a session keeps and replays, the file is compacted
// past compactFactor times the cap, and numbering goes on across both and
// across processes.
func TestHistoryCapAndCompaction(t *testing.T) {
	state := t.TempDir()
	const limit = 3
	args := []string{"--state", state, "--history", fmt.Sprint(limit)}
	conn, c := startProcess(t, args...)
	ns, err := conn.NewSession(context.Background(), acp.NewSessionRequest{Cwd: t.TempDir(), McpServers: []acp.McpServer{}})
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(state, string(ns.SessionId)+logExt)
	last := compactFactor*limit + 2 // two turns past the compaction
	for n := 1; n <= last; n++ {
		if got, want := prompt(t, conn, c, ns.SessionId, fmt.Sprint("p", n)), fmt.Sprintf("builtin turn=%d ", n); !strings.HasPrefix(got, want) {
			t.Fatalf("turn %d replied %q, want prefix %q", n, got, want)
		}
		if n == compactFactor*limit {
			if got := fileLines(t, path); got != 1+n {
				t.Fatalf("before compaction the file has %d lines, want a header and %d turns", got, n)
			}
		}
	}
	if got := fileLines(t, path); got != 1+limit+1 {
		t.Fatalf("after compaction and one more turn the file has %d lines, want a header and %d turns", got, limit+1)
	}
	if got := load(t, conn, c, ns.SessionId); fmt.Sprint(got) != fmt.Sprint([]string{"p12", "p13", "p14"}) {
		t.Fatalf("load in the same process replayed %q, want the last %d turns", got, limit)
	}

	conn2, c2 := startProcess(t, args...)
	if got := load(t, conn2, c2, ns.SessionId); fmt.Sprint(got) != fmt.Sprint([]string{"p12", "p13", "p14"}) {
		t.Fatalf("load in a new process replayed %q, want the last %d turns", got, limit)
	}
	if got, want := prompt(t, conn2, c2, ns.SessionId, "next"), fmt.Sprintf("builtin turn=%d ", last+1); !strings.HasPrefix(got, want) {
		t.Fatalf("after restore replied %q, want prefix %q", got, want)
	}
}

// A state dir written by an earlier release (<id>.json) or by a process that
// died mid-append restores, and the session goes on in a well-formed log.
func TestRestoreFromStateDir(t *testing.T) {
	const id = "nat-00000000000000aa"
	legacyTurns := func(n int) string {
		var ts []string
		for i := 1; i <= n; i++ {
			ts = append(ts, fmt.Sprintf(`{"user":"u%d","reply":"builtin turn=%d old"}`, i, i))
		}
		return `{"id":"` + id + `","cwd":"/w","mcp_servers":[],"turns":[` + strings.Join(ts, ",") + `]}`
	}
	newTurn := func(n int) string {
		return fmt.Sprintf(`{"turn":{"n":%d,"user":"u%d","reply":"builtin turn=%d x"}}`, n, n, n)
	}
	tests := []struct {
		name       string
		file, data string
		wantReplay []string
		wantTurn   int
	}{
		{"legacy file", id + legacyExt, legacyTurns(2), []string{"u1", "u2"}, 3},
		{"legacy file past the cap", id + legacyExt, legacyTurns(5), []string{"u3", "u4", "u5"}, 6},
		{"torn last line", id + logExt, hdr + "\n" + newTurn(1) + "\n" + newTurn(2) + "\n" + `{"turn":{"n":3,"user":"u`, []string{"u1", "u2"}, 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel() // each subtest waits on agent processes' exits
			state := t.TempDir()
			if err := os.WriteFile(filepath.Join(state, tt.file), []byte(tt.data), 0o600); err != nil {
				t.Fatal(err)
			}
			args := []string{"--state", state, "--history", "3"}
			conn, c := startProcess(t, args...)
			if got := load(t, conn, c, id); fmt.Sprint(got) != fmt.Sprint(tt.wantReplay) {
				t.Fatalf("replayed %q, want %q", got, tt.wantReplay)
			}
			if got, want := prompt(t, conn, c, id, "next"), fmt.Sprintf("builtin turn=%d ", tt.wantTurn); !strings.HasPrefix(got, want) {
				t.Fatalf("replied %q, want prefix %q", got, want)
			}
			if _, err := os.Stat(filepath.Join(state, id+legacyExt)); !errors.Is(err, fs.ErrNotExist) {
				t.Fatalf("legacy file still there after migration: %v", err)
			}
			// The log is well formed: a new process reads it back whole.
			conn2, c2 := startProcess(t, args...)
			want := append(slices.Clone(tt.wantReplay), "next")
			want = want[max(0, len(want)-3):]
			if got := load(t, conn2, c2, id); fmt.Sprint(got) != fmt.Sprint(want) {
				t.Fatalf("second restore replayed %q, want %q", got, want)
			}
		})
	}
}
