package api

import (
	"bufio"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/residentd/residentd/apitype"
	"github.com/residentd/residentd/internal/config"
	"github.com/residentd/residentd/internal/delivery"
)

// prompts reads the prompts the built-in agent recorded (--record), in
// order.
func prompts(t *testing.T, rec string) []string {
	t.Helper()
	f, err := os.Open(rec)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var l struct {
			Method string `json:"method"`
			Prompt string `json:"prompt"`
		}
		if json.Unmarshal(sc.Bytes(), &l) == nil && l.Method == "session/prompt" {
			out = append(out, l.Prompt)
		}
	}
	return out
}

// TestFramingInTheSystemPrompt: an agent that advertises
// sessionCapabilities.systemPrompt (the built-in agent with
// --system-prompt) gets the framing and the brief as its session's system
// prompt on session/new and again on the session/resume after a restart;
// no turn carries them: the cold turn is the facts and the mention, the
// restored one the reopened line and the mention, and a warm turn after a
// compaction does not send the brief again. With system_placement turn the
// same agent gets the framing in the first turn, as before.
func TestFramingInTheSystemPrompt(t *testing.T) {
	var rec string
	e := newEnv(t, func(c *config.Config) {
		rec = filepath.Join(c.StateDir, "record.jsonl")
		c.Bindings[0].Args = append(c.Bindings[0].Args, "--system-prompt", "--record", rec)
	})
	ctx := context.Background()
	turn := func(id, text string) apitype.Event {
		t.Helper()
		done, err := e.c.Turn(ctx, apitype.TurnRequest{Channel: "ch", Binding: "b-builtin", MessageID: id, Text: text}, nil)
		if err != nil {
			t.Fatalf("turn %s: %v", id, err)
		}
		return done
	}
	for _, step := range []struct {
		id, text, shape, reply string
	}{
		{"m1", "@agent one", "cold", "builtin turn=1 framing=no users=1 assistants=0 mention=m1 context=0 system=yes"},
		{"m2", "@agent two [[compact]]", "warm", "builtin turn=2 framing=no users=0 assistants=0 mention=m2 context=0 system=yes"},
		{"m3", "@agent three", "warm", "builtin turn=3 framing=no users=0 assistants=0 mention=m3 context=0 system=yes"},
		{"restart", "", "", ""},
		{"m4", "@agent four", "restored", "builtin turn=4 framing=no users=0 assistants=0 mention=m4 context=0 system=yes"},
	} {
		if step.id == "restart" {
			if err := e.h.Restart(); err != nil {
				t.Fatal(err)
			}
			continue
		}
		done := turn(step.id, step.text)
		if done.Shape != step.shape || done.Text != step.reply {
			t.Errorf("%s: %s %q, want %s %q", step.id, done.Shape, done.Text, step.shape, step.reply)
		}
	}
	got := prompts(t, rec)
	if len(got) != 4 {
		t.Fatalf("%d prompts recorded, want 4", len(got))
	}
	for i, p := range got {
		if strings.Contains(p, config.BuiltinFraming) || strings.Contains(p, delivery.DefaultBrief[:60]) {
			t.Errorf("prompt %d carries the framing or the brief:\n%s", i+1, p)
		}
	}
	if !strings.HasPrefix(got[0], delivery.FactsPrefix) || !strings.HasPrefix(got[3], delivery.Reopened) {
		t.Errorf("cold prompt %q…, restored prompt %q…", got[0][:40], got[3][:40])
	}

	// The brief in the turn: the cold turn is its replay, the framing in
	// the system prompt all the same.
	e3 := newEnv(t, func(c *config.Config) {
		c.Bindings[0].Args = append(c.Bindings[0].Args, "--system-prompt")
		c.Bindings[0].BriefPlacement = delivery.InTurn
	})
	for i, want := range []string{"builtin turn=1 framing=no users=1 assistants=0 mention=m1 context=0 system=yes", "builtin turn=2 framing=no users=0 assistants=0 mention=m2 context=0 system=yes"} {
		id := []string{"m1", "m2"}[i]
		done, err := e3.c.Turn(ctx, apitype.TurnRequest{Channel: "ch", Binding: "b-builtin", MessageID: id, Text: "@agent " + id}, nil)
		if err != nil || done.Text != want {
			t.Errorf("brief in the turn, %s: %q, %v; want %q", id, done.Text, err, want)
		}
	}

	// The same agent, told to keep the framing in the turn.
	e2 := newEnv(t, func(c *config.Config) {
		c.Bindings[0].Args = append(c.Bindings[0].Args, "--system-prompt")
		c.Bindings[0].SystemPlacement = config.SystemInTurn
	})
	done, err := e2.c.Turn(ctx, apitype.TurnRequest{Channel: "ch", Binding: "b-builtin", MessageID: "m1", Text: "@agent one"}, nil)
	if err != nil || done.Text != "builtin turn=1 framing=yes users=1 assistants=0 mention=m1 context=0 system=no" {
		t.Errorf("system_placement turn: %q, %v", done.Text, err)
	}
}
