package api

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/residentd/residentd/apitype"
	"github.com/residentd/residentd/internal/config"
	"github.com/residentd/residentd/internal/permission"
)

// TestPolicyHoldsForUnaskedTools: the built-in agent runs its [[tool:…]]
// calls unasked in its default mode; through the socket, each policy that
// holds anything back puts its sessions in the agent's manual mode, so an
// execution and a read inside and outside the working directory are asked
// for and the policy (or a person) decides: the execution leaves no file
// unless allowed. Every tool call is counted, asked or not.
func TestPolicyHoldsForUnaskedTools(t *testing.T) {
	t.Parallel()
	outside := filepath.Join(t.TempDir(), "out.txt")
	if err := os.WriteFile(outside, []byte("outside-content"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		policy permission.Policy
		// what each tool's thought says: execute, read inside, read outside
		want [3]string
		// the tool calls counted, by kind and outcome
		counted map[string]int
	}{
		{permission.Deny, [3]string{"tool execute refused", "tool read refused", "tool read refused"},
			map[string]int{"execute/refused_by_policy": 1, "read/refused_by_policy": 2}},
		{permission.ReadOnly, [3]string{"tool execute refused", "tool read ran", "tool read refused"},
			map[string]int{"execute/refused_by_policy": 1, "read/allowed_by_policy": 1, "read/refused_by_policy": 1}},
		// The person allows the execution and the read inside, and rejects
		// the read outside.
		{permission.Ask, [3]string{"tool execute ran", "tool read ran", "tool read refused"},
			map[string]int{"execute/asked_allowed": 1, "read/asked_allowed": 1, "read/asked_rejected": 1}},
		{permission.Allow, [3]string{"tool execute ran", "tool read ran", "tool read ran"},
			map[string]int{"execute/ran": 1, "read/ran": 2}},
	} {
		t.Run(string(tt.policy), func(t *testing.T) {
			t.Parallel()
			work := t.TempDir()
			inside := filepath.Join(work, "in.txt")
			if err := os.WriteFile(inside, []byte("inside-content"), 0o644); err != nil {
				t.Fatal(err)
			}
			e := newEnv(t, withAsk(tt.policy, time.Minute), func(c *config.Config) { c.Bindings[len(c.Bindings)-1].Dir = work })
			var thoughts []string
			var requests []apitype.PermissionRequest
			var decisions []apitype.PermissionDecision
			text := "@agent [[tool:execute]] [[tool:read:" + inside + "]] [[tool:read:" + outside + "]]"
			_, err := e.c.Turn(context.Background(), apitype.TurnRequest{Channel: "ch", Binding: "b-ask", Text: text}, func(ev apitype.Event) {
				switch ev.Event {
				case apitype.EventPermissionRequest:
					requests = append(requests, *ev.Permission)
					answer := "allow"
					if len(ev.Permission.ToolCall.Locations) > 0 && ev.Permission.ToolCall.Locations[0].Path == outside {
						answer = "reject"
					}
					if err := e.c.Answer(context.Background(), ev.RunID, ev.Permission.ID, answer); err != nil {
						t.Errorf("answer %s: %v", ev.Permission.ID, err)
					}
				case apitype.EventPermissionDecision:
					decisions = append(decisions, *ev.Decision)
				case apitype.EventUpdate:
					if ev.Update.Kind == apitype.UpdateThought && strings.HasPrefix(ev.Update.Text, "tool ") {
						thoughts = append(thoughts, strings.SplitN(ev.Update.Text, " ok:", 2)[0])
					}
				}
			})
			if err != nil {
				t.Fatalf("turn: %v", err)
			}
			if strings.Join(thoughts, ", ") != strings.Join(tt.want[:], ", ") {
				t.Fatalf("tools: %q, want %q (requests %+v, decisions %+v)", thoughts, tt.want, requests, decisions)
			}
			_, statErr := os.Stat(filepath.Join(work, "builtin-tool-execute-1"))
			if ran := statErr == nil; ran != strings.HasSuffix(tt.want[0], "ran") {
				t.Fatalf("execution left its file: %v, want %v", ran, !ran)
			}
			switch tt.policy {
			case permission.Ask:
				if len(requests) != 3 {
					t.Fatalf("%d permission requests reached the stream, want 3 (one per tool call): %+v", len(requests), requests)
				}
			default:
				if len(requests) != 0 {
					t.Fatalf("policy %s put %d requests to a person", tt.policy, len(requests))
				}
			}
			// Every tool call is counted once, by what became of it; every
			// other outcome of the binding stays at 0.
			metrics := e.scrape(t)
			counted := map[string]int{}
			series := regexp.MustCompile(`(?m)^residentd_agent_tool_calls_total\{binding="b-ask",kind="([a-z_]+)",outcome="([a-z_]+)"\} ([0-9]+)$`)
			for _, m := range series.FindAllStringSubmatch(metrics, -1) {
				if n, _ := strconv.Atoi(m[3]); n != 0 {
					counted[m[1]+"/"+m[2]] = n
				}
			}
			if !reflect.DeepEqual(counted, tt.counted) {
				t.Fatalf("tool calls counted %v, want %v:\n%s", counted, tt.counted, grep(metrics, "residentd_agent_tool_calls_total"))
			}
		})
	}
}

// TestPolicyModeUnlisted: an agent that lists no session modes cannot be
// told a deny policy: the turn fails with invalid_option rather than let it
// run tools unasked, and health names the binding as advisory.
func TestPolicyModeUnlisted(t *testing.T) {
	t.Parallel()
	e := newEnv(t, withAsk(permission.Deny, time.Minute), func(c *config.Config) {
		b := &c.Bindings[len(c.Bindings)-1]
		b.Args = append(b.Args, "--no-modes")
	})
	_, err := e.c.Turn(context.Background(), apitype.TurnRequest{Channel: "ch", Binding: "b-ask", Text: "@agent [[tool:execute]]"}, nil)
	if err == nil || !strings.Contains(err.Error(), "invalid_option") || !strings.Contains(err.Error(), `session mode "manual"`) {
		t.Fatalf("turn err %v, want invalid_option naming the mode", err)
	}
	h, err := e.c.Health(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var found *apitype.PolicyAdvisory
	for i, p := range h.PolicyAdvisories {
		if p.Binding == "b-ask" {
			found = &h.PolicyAdvisories[i]
		}
	}
	if found == nil || found.Advisory != "policy advisory for this agent: it runs some tools without asking" || found.Policy != "deny" || !strings.Contains(found.Unasked, "lists no session modes") {
		t.Fatalf("health policy advisories %+v, want b-ask's", h.PolicyAdvisories)
	}
}

// scrape reads the metrics through the socket.
func (e *env) scrape(t *testing.T) string {
	t.Helper()
	resp, err := e.hc.Get("http://residentd/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func grep(text, sub string) string {
	var out []string
	for _, l := range strings.Split(text, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
