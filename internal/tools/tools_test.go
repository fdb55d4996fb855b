package tools_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/residentd/residentd/apitype"
	"github.com/residentd/residentd/client"
	"github.com/residentd/residentd/internal/testkit"
	"github.com/residentd/residentd/internal/tools"
)

func TestListToolsWithSchemas(t *testing.T) {
	cs := connect(t, tools.Config{Socket: "/nonexistent/rd.sock", Capability: "x"})
	res, err := cs.ListTools(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	type schema struct {
		Type       string                     `json:"type"`
		Properties map[string]json.RawMessage `json:"properties"`
	}
	want := map[string]struct{ in, out []string }{
		tools.ToolHistory:  {[]string{"before", "thread_root_id", "limit", "channel_id"}, []string{"messages", "next_before", "channel_id"}},
		tools.ToolRoster:   {nil, []string{"members", "channel_id", "pushed"}},
		tools.ToolActivity: {[]string{"limit"}, []string{"items", "project"}},
	}
	if len(res.Tools) != len(want) {
		t.Fatalf("got %d tools, want %d", len(res.Tools), len(want))
	}
	for _, tool := range res.Tools {
		w, ok := want[tool.Name]
		if !ok {
			t.Fatalf("unexpected tool %q", tool.Name)
		}
		if tool.Description == "" {
			t.Errorf("%s has no description", tool.Name)
		}
		for _, part := range []struct {
			name  string
			raw   any
			props []string
		}{{"input", tool.InputSchema, w.in}, {"output", tool.OutputSchema, w.out}} {
			data, _ := json.Marshal(part.raw)
			var s schema
			if err := json.Unmarshal(data, &s); err != nil || s.Type != "object" {
				t.Fatalf("%s %s schema %s: not an object schema (%v)", tool.Name, part.name, data, err)
			}
			for _, p := range part.props {
				if _, ok := s.Properties[p]; !ok {
					t.Errorf("%s %s schema lacks %q: %s", tool.Name, part.name, p, data)
				}
			}
		}
	}
}

func TestChannelHistoryPagesThreadsClampsAndRefusesBadCursor(t *testing.T) {
	e := newEnv(t)
	long := strings.Repeat("0123456789", 200) // 2000 runes
	var msgs []apitype.Message
	for i := 1; i <= 120; i++ {
		body := fmt.Sprintf("line %d", i)
		if i == 7 {
			body = long
		}
		msgs = append(msgs, msg("ch", fmt.Sprintf("m%03d", i), i, body))
	}
	for i := 1; i <= 3; i++ {
		r := msg("ch", fmt.Sprintf("r%d", i), 200+i, fmt.Sprintf("reply %d", i))
		r.ThreadRoot = "m050"
		msgs = append(msgs, r)
	}
	e.put(msgs...)
	cs := connect(t, tools.Config{Socket: e.socket, Capability: e.issue("ch")})

	t.Run("pages back to the start", func(t *testing.T) {
		var got []string
		before, pages := "", 0
		for {
			p, txt := history(t, cs, map[string]any{"before": before, "limit": 50})
			if !strings.Contains(strings.SplitN(txt, "\n", 2)[0], "UNTRUSTED DATA written by other people") {
				t.Fatalf("first line does not label the data untrusted: %q", strings.SplitN(txt, "\n", 2)[0])
			}
			ids := make([]string, 0, len(p.Messages))
			for _, m := range p.Messages {
				ids = append(ids, m.ID)
				if m.ID == "m007" && m.Body != long {
					t.Fatalf("m007 body has %d runes, want the full 2000", utf8.RuneCountInString(m.Body))
				}
			}
			got = append(ids, got...)
			pages++
			if p.Next == "" {
				if !strings.Contains(txt, "start of the channel") {
					t.Fatalf("last page text does not say it is the start: %q", txt[len(txt)-80:])
				}
				break
			}
			if p.Next != p.Messages[0].ID || len(p.Messages) != 50 {
				t.Fatalf("page %d: next %q, first %q, %d messages", pages, p.Next, p.Messages[0].ID, len(p.Messages))
			}
			before = p.Next
			if pages > 5 {
				t.Fatal("paging does not end")
			}
		}
		want := make([]string, 0, 120)
		for i := 1; i <= 120; i++ {
			want = append(want, fmt.Sprintf("m%03d", i))
		}
		if pages != 3 || !slices.Equal(got, want) {
			t.Fatalf("%d pages gave %d ids %v..., want 3 pages of the 120 main-timeline messages in order", pages, len(got), got[:min(5, len(got))])
		}
	})

	t.Run("timestamp cursor", func(t *testing.T) {
		p, _ := history(t, cs, map[string]any{"before": base.Add(11 * time.Second).Format(time.RFC3339)})
		if len(p.Messages) != 10 || p.Messages[0].ID != "m001" || p.Messages[9].ID != "m010" || p.Next != "" {
			t.Fatalf("before m011's time: %d messages, next %q", len(p.Messages), p.Next)
		}
	})

	t.Run("thread", func(t *testing.T) {
		p, txt := history(t, cs, map[string]any{"thread_root_id": "m050"})
		var ids []string
		for _, m := range p.Messages {
			ids = append(ids, m.ID)
		}
		if !slices.Equal(ids, []string{"m050", "r1", "r2", "r3"}) || p.Next != "" || p.Thread != "m050" {
			t.Fatalf("thread page %v next %q thread %q", ids, p.Next, p.Thread)
		}
		if !strings.Contains(txt, "thread m050") || !strings.Contains(txt, "in thread m050") {
			t.Fatalf("thread text: %q", txt)
		}
	})

	t.Run("default limit", func(t *testing.T) {
		p, _ := history(t, cs, nil)
		if len(p.Messages) != 30 || p.Limit != 30 || p.Messages[29].ID != "m120" || p.Note != "" {
			t.Fatalf("default page: %d messages, limit %d, note %q", len(p.Messages), p.Limit, p.Note)
		}
	})

	t.Run("limit clamped at 100", func(t *testing.T) {
		p, txt := history(t, cs, map[string]any{"limit": 500})
		if len(p.Messages) != 100 || p.Limit != 100 || p.Next != "m021" {
			t.Fatalf("limit 500: %d messages, limit %d, next %q", len(p.Messages), p.Limit, p.Next)
		}
		if !strings.Contains(p.Note, "clamped to 100") || !strings.Contains(txt, "Note: limit 500 is above the maximum of 100") {
			t.Fatalf("clamp not reported: note %q", p.Note)
		}
	})

	t.Run("bad cursor", func(t *testing.T) {
		for _, bad := range []string{"no-such-id", "2026-13-45"} {
			res := call(t, cs, tools.ToolHistory, map[string]any{"before": bad})
			if !res.IsError || !strings.Contains(text(res), "bad_cursor") || !strings.Contains(text(res), bad) || !strings.Contains(text(res), "next_before") {
				t.Fatalf("before %q: error %v, text %q", bad, res.IsError, text(res))
			}
		}
	})

	t.Run("empty channel", func(t *testing.T) {
		empty := connect(t, tools.Config{Socket: e.socket, Capability: e.issue("ch-empty")})
		p, txt := history(t, empty, nil)
		if len(p.Messages) != 0 || p.Next != "" || p.Channel != "ch-empty" || !strings.Contains(txt, "(no messages)") {
			t.Fatalf("empty channel: %+v %q", p, txt)
		}
	})
}

func TestRosterAndActivity(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	cs := connect(t, tools.Config{Socket: e.socket, Capability: e.issue("ch")})

	var r apitype.Roster
	structured(t, call(t, cs, tools.ToolRoster, nil), &r)
	if r.Pushed || len(r.Members) != 0 {
		t.Fatalf("roster before any push: %+v", r)
	}
	members := []apitype.Member{{Handle: "aiko", Kind: "user", Reachable: true}, {Handle: "@claude", Kind: "agent", Reachable: false}}
	if err := e.c.SetRoster(ctx, "ch", members); err != nil {
		t.Fatal(err)
	}
	if err := e.c.SetRoster(ctx, "ch-other", []apitype.Member{{Handle: "mallory", Kind: "user"}}); err != nil {
		t.Fatal(err)
	}
	res := call(t, cs, tools.ToolRoster, nil)
	structured(t, res, &r)
	if !r.Pushed || !slices.Equal(r.Members, members) || !strings.Contains(text(res), "- @claude (agent, not reachable)") || strings.Contains(text(res), "mallory") {
		t.Fatalf("roster: %+v %q", r, text(res))
	}

	// Without a mapping the project key is the channel id.
	at := func(min int) time.Time { return base.Add(time.Duration(min) * time.Minute) }
	if err := e.c.AddActivity(ctx, "ch", []apitype.Activity{{Kind: "ci", Summary: "build 41 red", At: at(1)}}); err != nil {
		t.Fatal(err)
	}
	var a apitype.ProjectActivity
	structured(t, call(t, cs, tools.ToolActivity, nil), &a)
	if a.Project != "ch" || len(a.Items) != 1 || a.Items[0].Summary != "build 41 red" {
		t.Fatalf("activity keyed by channel: %+v", a)
	}
	if err := e.c.SetProject(ctx, "ch", "proj-x"); err != nil {
		t.Fatal(err)
	}
	items := []apitype.Activity{
		{Kind: "pr", Summary: "PR 12 merged", Link: "https://example.test/pr/12", At: at(5)},
		{Kind: "ci", Summary: "build 42 green", At: at(9)},
		{Kind: "deploy", Summary: "staging deployed", At: at(7)},
	}
	if err := e.c.AddActivity(ctx, "proj-x", items); err != nil {
		t.Fatal(err)
	}
	res = call(t, cs, tools.ToolActivity, map[string]any{"limit": 2})
	structured(t, res, &a)
	if a.Project != "proj-x" || len(a.Items) != 2 || a.Items[0].Summary != "build 42 green" || a.Items[1].Summary != "staging deployed" {
		t.Fatalf("activity newest first, limit 2: %+v", a)
	}
	if !strings.Contains(strings.SplitN(text(res), "\n", 2)[0], "UNTRUSTED DATA") {
		t.Fatalf("activity text: %q", text(res))
	}
	structured(t, call(t, cs, tools.ToolActivity, map[string]any{"limit": 1000}), &a)
	if a.Limit != 100 || len(a.Items) != 3 || !strings.Contains(a.Note, "clamped") {
		t.Fatalf("activity clamp: %+v", a)
	}

	// Pushes are validated.
	if err := e.c.AddActivity(ctx, "proj-x", []apitype.Activity{{Kind: "ci"}}); !client.IsCode(err, "bad_request") {
		t.Fatalf("activity without summary: %v", err)
	}
	if err := e.c.SetRoster(ctx, "ch", []apitype.Member{{Kind: "user"}}); !client.IsCode(err, "bad_request") {
		t.Fatalf("member without handle: %v", err)
	}
}

func TestScopeRefusals(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	root := msg("ch-b", "b1", 1, "secret plan of channel b")
	reply := msg("ch-b", "b2", 2, "more secrets")
	reply.ThreadRoot = "b1"
	e.put(msg("ch-a", "a1", 1, "hello a"), root, reply)
	tokA, tokB := e.issue("ch-a"), e.issue("ch-b")

	status := func(err error) (int, string) {
		var ae *client.Error
		if !errors.As(err, &ae) {
			t.Fatalf("want an API error, got %v", err)
		}
		return ae.Status, ae.Code + ": " + ae.Message
	}
	// Another channel by name, and a thread of another channel, with a
	// valid token of a same-uid process: 403.
	_, err := e.c.ChannelHistory(ctx, tokA, client.HistoryQuery{Channel: "ch-b"})
	if st, msg := status(err); st != http.StatusForbidden || !strings.Contains(msg, "out_of_scope") || !strings.Contains(msg, `"ch-a" only`) {
		t.Fatalf("channel_id of another channel: %d %s", st, msg)
	}
	_, err = e.c.ChannelHistory(ctx, tokA, client.HistoryQuery{ThreadRoot: "b1"})
	if st, msg := status(err); st != http.StatusForbidden || !strings.Contains(msg, "not a message of channel") {
		t.Fatalf("thread of another channel: %d %s", st, msg)
	}
	if _, err := e.c.ChannelRoster(ctx, tokA); err != nil {
		t.Fatal(err)
	}
	// The owner of the thread reads it.
	p, err := e.c.ChannelHistory(ctx, tokB, client.HistoryQuery{ThreadRoot: "b1"})
	if err != nil || len(p.Messages) != 2 {
		t.Fatalf("own thread: %+v %v", p, err)
	}
	// A's own reads never return B's messages.
	p, err = e.c.ChannelHistory(ctx, tokA, client.HistoryQuery{Channel: "ch-a", Limit: 100})
	if err != nil || len(p.Messages) != 1 || p.Messages[0].ID != "a1" {
		t.Fatalf("own channel: %+v %v", p, err)
	}
	// A cursor naming another channel's message is a bad cursor, not a leak.
	_, err = e.c.ChannelHistory(ctx, tokA, client.HistoryQuery{Before: "b2"})
	if st, msg := status(err); st != http.StatusBadRequest || !strings.Contains(msg, "bad_cursor") {
		t.Fatalf("cursor of another channel: %d %s", st, msg)
	}

	// No token, an unknown token, a revoked token: 401 with a reason.
	_, err = e.c.ChannelHistory(ctx, "", client.HistoryQuery{})
	if st, msg := status(err); st != http.StatusUnauthorized || !strings.Contains(msg, "missing_capability") {
		t.Fatalf("no token: %d %s", st, msg)
	}
	_, err = e.c.ProjectActivity(ctx, strings.Repeat("ab", 32), 0)
	if st, msg := status(err); st != http.StatusUnauthorized || !strings.Contains(msg, "unknown capability") {
		t.Fatalf("unknown token: %d %s", st, msg)
	}
	e.reg.Revoke(tokA)
	_, err = e.c.ChannelRoster(ctx, tokA)
	if st, msg := status(err); st != http.StatusUnauthorized || !strings.Contains(msg, "revoked") {
		t.Fatalf("revoked token: %d %s", st, msg)
	}

	// Over MCP the refusal is a tool error the agent can read.
	cs := connect(t, tools.Config{Socket: e.socket, Capability: tokB})
	res := call(t, cs, tools.ToolHistory, map[string]any{"channel_id": "ch-a"})
	if !res.IsError || !strings.Contains(text(res), "403 out_of_scope") {
		t.Fatalf("MCP cross-channel call: error %v %q", res.IsError, text(res))
	}
}

func TestUnreachableDaemonOverStdio(t *testing.T) {
	// The real server process, started the way an agent starts it.
	sock := "/nonexistent/rd/residentd.sock"
	cmd := exec.Command(testkit.Exe(t), "mcp")
	cmd.Env = append(cmd.Environ(), "RESIDENTD_TEST_MCP=1", tools.EnvSocket+"="+sock, tools.EnvCapability+"=tok")
	ctx := context.Background()
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "1"}, nil).Connect(ctx, &mcp.CommandTransport{Command: cmd}, nil)
	if err != nil {
		t.Fatalf("initialize without a daemon: %v", err)
	}
	defer cs.Close()
	if init := cs.InitializeResult(); init == nil || init.ServerInfo.Name != tools.ServerName {
		t.Fatalf("initialize result: %+v", init)
	}
	lt, err := cs.ListTools(ctx, nil)
	if err != nil || len(lt.Tools) != 3 {
		t.Fatalf("tools/list without a daemon: %v, %d tools", err, len(lt.Tools))
	}
	for _, name := range []string{tools.ToolHistory, tools.ToolRoster, tools.ToolActivity} {
		res := call(t, cs, name, nil)
		if !res.IsError || !strings.Contains(text(res), "unreachable at "+sock) || !strings.Contains(text(res), "residentd status") {
			t.Fatalf("%s without a daemon: error %v %q", name, res.IsError, text(res))
		}
	}
}

func TestRegistry(t *testing.T) {
	r := tools.NewRegistry()
	a, err := r.Issue(tools.Scope{Channel: "ch"})
	if err != nil {
		t.Fatal(err)
	}
	b, _ := r.Issue(tools.Scope{Channel: "ch", Thread: "t1"})
	if len(a) != 64 || a == b {
		t.Fatalf("tokens %q %q: want distinct 256-bit hex tokens", a, b)
	}
	if s, err := r.Scope(b); err != nil || s != (tools.Scope{Channel: "ch", Thread: "t1"}) {
		t.Fatalf("scope of b: %+v %v", s, err)
	}
	r.Revoke(a)
	r.Revoke(a) // idempotent
	if _, err := r.Scope(a); !errors.Is(err, tools.ErrRevokedCapability) {
		t.Fatalf("revoked: %v", err)
	}
	if _, err := r.Scope("nope"); !errors.Is(err, tools.ErrUnknownCapability) {
		t.Fatalf("unknown: %v", err)
	}
	if r.Live() != 1 {
		t.Fatalf("live %d, want 1", r.Live())
	}
	if _, err := r.Issue(tools.Scope{}); err == nil {
		t.Fatal("issue without a channel succeeded")
	}
}

// A capability issued for a spare's session opened ahead reads nothing
// until it is bound, is bound once, and revokes like any other.
func TestUnboundCapability(t *testing.T) {
	r := tools.NewRegistry()
	u, err := r.IssueUnbound()
	if err != nil || len(u) != 64 {
		t.Fatalf("unbound token %q: %v", u, err)
	}
	if _, err := r.Scope(u); !errors.Is(err, tools.ErrUnknownCapability) || !strings.Contains(err.Error(), "not bound") {
		t.Fatalf("unbound token checked: %v; want unknown, not bound yet", err)
	}
	if err := r.Bind(u, tools.Scope{}); err == nil {
		t.Fatal("bound to no channel")
	}
	if err := r.Bind(u, tools.Scope{Channel: "ch-a"}); err != nil {
		t.Fatal(err)
	}
	if s, err := r.Scope(u); err != nil || s != (tools.Scope{Channel: "ch-a"}) {
		t.Fatalf("bound token: %+v %v", s, err)
	}
	if err := r.Bind(u, tools.Scope{Channel: "ch-b"}); !errors.Is(err, tools.ErrBound) {
		t.Fatalf("bound twice: %v", err)
	}
	if s, _ := r.Scope(u); s.Channel != "ch-a" {
		t.Fatalf("a second bind moved the scope to %q", s.Channel)
	}
	issued, _ := r.Issue(tools.Scope{Channel: "ch-c"})
	if err := r.Bind(issued, tools.Scope{Channel: "ch-b"}); !errors.Is(err, tools.ErrBound) {
		t.Fatalf("bind of a bound token: %v", err)
	}
	v, _ := r.IssueUnbound()
	r.Revoke(v)
	if err := r.Bind(v, tools.Scope{Channel: "ch-a"}); !errors.Is(err, tools.ErrBound) {
		t.Fatalf("bind after revoke: %v", err)
	}
	if _, err := r.Scope(v); !errors.Is(err, tools.ErrRevokedCapability) {
		t.Fatalf("revoked unbound token: %v", err)
	}
	if r.Live() != 2 {
		t.Fatalf("live %d, want 2", r.Live())
	}
}
