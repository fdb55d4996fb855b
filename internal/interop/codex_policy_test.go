package interop

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/residentd/residentd/apitype"
	"github.com/residentd/residentd/internal/daemon"
	"github.com/residentd/residentd/internal/permission"
)

// codexPolicyTools names the tool calls of TestCodexPolicy, in order: the
// first five in one turn, the edit in the next.
var codexPolicyTools = []string{"echo", "write", "read inside", "read outside", "escalated write", "edit"}

// TestCodexPolicy: with codex-acp 2.6 against a fake model that asks, in
// one turn, for a shell echo, a shell command that writes a file in the
// working directory, a read inside the working directory and one outside
// it, and the write again with sandbox_permissions require_escalated (run
// outside Codex's sandbox), then, in the next turn, for an apply_patch that
// adds a file in the working directory, each policy holds as
// docs/AGENTS.md's table says: checked by each call's effect and by the
// tool output the model's next request carries; under ask what is asked
// reaches the stream as a permission request (the person allows the
// escalated write and rejects the edit). codex-acp 2.6 offers no option
// that refuses a request and goes on: a refusal, by the policy or a
// person, ends codex's turn (stop reason cancelled), and the run fails
// policy_refused: nobody cancelled it.
func TestCodexPolicy(t *testing.T) {
	t.Parallel()
	const (
		refusedByPolicy = "refused (asked, the policy answered); the turn ended policy_refused"
		refusedByPerson = "refused (asked a person); the turn ended policy_refused"
	)
	want := map[permission.Policy][6]string{
		permission.Deny:     {"ran (unasked)", "failed in the sandbox (unasked)", "ran (unasked)", "ran (unasked)", refusedByPolicy, refusedByPolicy},
		permission.ReadOnly: {"ran (unasked)", "failed in the sandbox (unasked)", "ran (unasked)", "ran (unasked)", refusedByPolicy, refusedByPolicy},
		permission.Ask:      {"ran (unasked)", "failed in the sandbox (unasked)", "ran (unasked)", "ran (unasked)", "ran (asked a person)", refusedByPerson},
	}
	var mu sync.Mutex
	table := map[permission.Policy][6]string{}
	t.Cleanup(func() {
		mu.Lock()
		defer mu.Unlock()
		t.Logf("| policy | %s |", strings.Join(codexPolicyTools, " | "))
		for _, p := range []permission.Policy{permission.Deny, permission.ReadOnly, permission.Ask} {
			if r, ok := table[p]; ok {
				t.Logf("| %s | %s |", p, strings.Join(r[:], " | "))
			}
		}
	})
	for _, pol := range []permission.Policy{permission.Deny, permission.ReadOnly, permission.Ask} {
		t.Run(string(pol), func(t *testing.T) {
			t.Parallel()
			got := codexPolicyTurns(t, pol)
			mu.Lock()
			table[pol] = got
			mu.Unlock()
			if got != want[pol] {
				t.Fatalf("codex-acp under %s: %s:\n got  %q\n want %q", pol, strings.Join(codexPolicyTools, ", "), got, want[pol])
			}
		})
	}
}

// policyTurn is what one turn of TestCodexPolicy saw: the tool call ids
// put to a person and the titles of the requests the policy answered, the
// tool outputs of the model's last call, and how the turn ended.
type policyTurn struct {
	asked, decided map[string]bool
	outputs        map[string]string
	end            string
	refused        bool // the run ended policy_refused
}

// codexPolicyTurns runs TestCodexPolicy's two turns under pol and says
// what became of each tool call.
func codexPolicyTurns(t *testing.T, pol permission.Policy) [6]string {
	api := newFakeResponses(t, "Done with the tools.")
	workdir, outside := t.TempDir(), t.TempDir()
	made, escalated, patched := filepath.Join(workdir, "made-by-shell"), filepath.Join(workdir, "made-escalated"), filepath.Join(workdir, "patched.txt")
	if err := os.WriteFile(filepath.Join(workdir, "in.txt"), []byte("inside-content\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(outside, "out.txt"), []byte("outside-content\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	api.scripts = []toolScript{
		{marker: "TOOLS-PLEASE", calls: []codexTool{
			{name: "exec_command", args: map[string]any{"cmd": "echo hi-from-shell"}},
			{name: "exec_command", args: map[string]any{"cmd": "touch " + made}},
			{name: "exec_command", args: map[string]any{"cmd": "cat " + filepath.Join(workdir, "in.txt")}},
			{name: "exec_command", args: map[string]any{"cmd": "cat " + filepath.Join(outside, "out.txt")}},
			{name: "exec_command", args: map[string]any{"cmd": "touch " + escalated, "sandbox_permissions": "require_escalated", "justification": "Make a file outside the sandbox?"}},
		}},
		{marker: "EDIT-PLEASE", calls: []codexTool{
			{name: "apply_patch", text: "*** Begin Patch\n*** Add File: " + patched + "\n+patched\n*** End Patch\n"},
		}},
	}
	b := codexBinding(t, api)
	b.Permission, b.Dir, b.Prices = pol, workdir, codexPrices
	h := newHarness(t, b)
	tools := codexPolicyTurn(t, h, api, "TOOLS-PLEASE")
	edit := codexPolicyTurn(t, h, api, "EDIT-PLEASE")
	// Its commands run unasked in the sandbox: the daemon says so.
	adv := h.d.Status().PolicyAdvisories
	if len(adv) != 1 || adv[0].Binding != "b-codex" || adv[0].Agent != "@agentclientprotocol/codex-acp 2.6.0" || !strings.Contains(adv[0].Unasked, "read-only sandbox") {
		t.Fatalf("policy advisories %+v, want b-codex's, naming what codex-acp 2.6.0 runs unasked", adv)
	}

	exists := func(p string) bool { _, err := os.Stat(p); return err == nil }
	var got [6]string
	for i, tt := range []struct {
		turn   policyTurn
		id     string
		title  string // in the title of its permission request
		effect string // in the output when it ran
		ran    bool
	}{
		{turn: tools, id: "call_fake_1_1", title: "echo hi-from-shell", effect: "hi-from-shell"},
		{turn: tools, id: "call_fake_1_2", title: "touch " + made, ran: exists(made)},
		{turn: tools, id: "call_fake_1_3", title: "in.txt", effect: "inside-content"},
		{turn: tools, id: "call_fake_1_4", title: "out.txt", effect: "outside-content"},
		{turn: tools, id: "call_fake_1_5", title: "touch " + escalated, ran: exists(escalated)},
		{turn: edit, id: "call_fake_2_1", title: "Edit", ran: exists(patched)},
	} {
		out, seen := tt.turn.outputs[tt.id]
		o := outcome{Person: tt.turn.asked[tt.id]}
		for title := range tt.turn.decided {
			o.Asked = o.Asked || strings.Contains(title, tt.title)
		}
		o.Asked = o.Asked || o.Person
		switch {
		case tt.ran || tt.effect != "" && strings.Contains(out, tt.effect) && strings.Contains(out, "exited with code 0"):
			o.What = "ran"
		case strings.Contains(out, "Read-only file system"):
			o.What = "failed in the sandbox"
		case o.Asked && !seen:
			o.What = "refused"
		case !seen:
			o.What = "not run, no output"
		default:
			o.What = "failed: " + out
		}
		got[i] = o.String()
		if o.What == "refused" && tt.turn.refused {
			got[i] += "; the turn ended policy_refused"
		}
	}
	return got
}

// codexPolicyTurn runs the turn of the mention that holds marker, the
// person allowing an escalated command and rejecting the rest.
func codexPolicyTurn(t *testing.T, h *harness, api *fakeResponses, marker string) policyTurn {
	pt := policyTurn{asked: map[string]bool{}, decided: map[string]bool{}}
	var mu sync.Mutex
	done, err := h.d.Turn(testCtx(t), apitype.TurnRequest{Channel: "ch", Binding: "b-codex", Text: "@codex use the tools " + marker}, func(ev apitype.Event) {
		mu.Lock()
		defer mu.Unlock()
		switch ev.Event {
		case apitype.EventPermissionRequest:
			p := ev.Permission
			pt.asked[p.ToolCall.ID] = true
			answer := "reject_once"
			if p.ToolCall.Kind == "execute" {
				answer = "allow_once"
			}
			answerWith(t, h, ev.RunID, p, answer)
		case apitype.EventPermissionDecision:
			if ev.Decision.DecidedBy == apitype.DecidedByPolicy {
				pt.decided[ev.Decision.Tool] = true
			}
		}
	})
	pt.end = "done " + done.StopReason
	if err != nil {
		pt.end = fmt.Sprintf("error %s: %v", daemon.Outcome(err), err)
		pt.refused = daemon.Code(err) == apitype.CodePolicyRefused
	}
	calls := api.turnCalls(t, marker)
	if len(calls) == 0 {
		t.Fatalf("the model was never called in the %s turn", marker)
	}
	if err == nil {
		// The turn's usage is the sum of its model calls'.
		codexUsage(t, result{done: done}, int64(len(calls)))
	}
	pt.outputs = calls[len(calls)-1].outputs()
	t.Logf("%s turn: ended %s; tool outputs the model saw: %q", marker, pt.end, pt.outputs)
	mu.Lock()
	defer mu.Unlock()
	for title := range pt.decided {
		t.Logf("%s turn: the policy answered %q", marker, title)
	}
	return pt
}
