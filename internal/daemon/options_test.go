package daemon_test

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/residentd/residentd/apitype"
	"github.com/residentd/residentd/internal/channel"
	"github.com/residentd/residentd/internal/config"
	"github.com/residentd/residentd/internal/daemon"
	"github.com/residentd/residentd/internal/session"
)

// optionSets returns the session/set_config_option calls the built-in agent
// recorded for the sessions natives (every session when none is named), as
// "session option=value", in order.
func optionSets(t *testing.T, rec string, natives ...string) []string {
	t.Helper()
	var out []string
	for _, r := range records(t, rec) {
		if r["method"] == "session/set_config_option" && (len(natives) == 0 || slices.Contains(natives, r["session"].(string))) {
			out = append(out, fmt.Sprintf("%s %s=%s", r["session"], r["config_id"], r["value"]))
		}
	}
	return out
}

// promptOptions returns the options the agent had for its last prompt.
func promptOptions(t *testing.T, rec string) map[string]any {
	t.Helper()
	var last map[string]any
	for _, r := range records(t, rec) {
		if r["method"] == "session/prompt" {
			last, _ = r["options"].(map[string]any)
		}
	}
	return last
}

// TestSessionOptionsOncePerSession: a binding's session options go to the
// agent when its session is created, in the agent's order, before the
// first prompt; never again to the warm process; and again, once, to a new
// process that resumed the session. The sessions listing shows them.
func TestSessionOptionsOncePerSession(t *testing.T) {
	var rec string
	h := newHarness(t, recordTo(&rec), func(c *config.Config) {
		c.Bindings[0].SessionOptions = map[string]string{"verbose": "true", "model": "builtin-large"}
	})
	r1 := h.mention("ch", "b-builtin", "q1", "@agent one")
	reply(t, r1)
	native := r1.done.Native
	want := []string{native + " model=builtin-large", native + " verbose=true"}
	if got := optionSets(t, rec, native); strings.Join(got, "|") != strings.Join(want, "|") {
		t.Fatalf("options set on the new session: %q, want %q (the agent's order)", got, want)
	}
	if o := promptOptions(t, rec); o["model"] != "builtin-large" || o["verbose"] != "true" || o["mode"] != "ask" {
		t.Fatalf("the first prompt ran with options %v", o)
	}
	for _, id := range []string{"q2", "q3"} {
		if r := h.mention("ch", "b-builtin", id, "@agent "+id); r.done.Shape != "warm" {
			t.Fatalf("turn %s: shape %s err %v, want warm", id, r.done.Shape, r.err)
		}
	}
	if got := optionSets(t, rec, native); len(got) != 2 {
		t.Fatalf("warm turns set options again: %q", got)
	}
	if n := testutil.ToFloat64(h.m.OptionsSet.WithLabelValues("b-builtin")); n != 2 {
		t.Fatalf("options set metric = %v, want 2", n)
	}
	ss := h.d.Sessions()
	if len(ss) != 1 || ss[0].Options["model"] != "builtin-large" || ss[0].Options["verbose"] != "true" || ss[0].Options["mode"] != "ask" {
		t.Fatalf("sessions listing options %+v", ss)
	}

	// A new process resumes the session: its agent starts from its
	// defaults, so it gets the options again, once.
	h.restart()
	r4 := h.mention("ch", "b-builtin", "q4", "@agent four")
	reply(t, r4)
	if r4.done.Shape != "restored" || r4.done.Native != native {
		t.Fatalf("after restart: shape %s native %s", r4.done.Shape, r4.done.Native)
	}
	reply(t, h.mention("ch", "b-builtin", "q5", "@agent five"))
	if got := optionSets(t, rec, native); len(got) != 4 || got[2] != want[0] || got[3] != want[1] {
		t.Fatalf("options set across a restore: %q, want the two again once", got)
	}
	if o := promptOptions(t, rec); o["model"] != "builtin-large" {
		t.Fatalf("the restored session's prompts ran with %v", o)
	}
}

// TestSessionOptionNotListed: an option id or value the agent does not
// list fails the turn with invalid_option before the prompt, naming both
// and what the agent lists, and health reports it; the daemon's start
// runs no process to check them; the watermark does not move.
func TestSessionOptionNotListed(t *testing.T) {
	for _, tc := range []struct {
		name  string
		opts  map[string]string
		flags []string
		want  []string // in the error
	}{
		{"unknown id", map[string]string{"modle": "builtin-large"}, nil, []string{`"modle"`, "mode, model, verbose"}},
		{"unknown value", map[string]string{"model": "gpt-9"}, nil, []string{`"model" = "gpt-9"`, "builtin-small, builtin-large"}},
		{"boolean takes true or false", map[string]string{"verbose": "yes"}, nil, []string{`"verbose" = "yes"`, "true, false"}},
		{"agent lists none", map[string]string{"model": "builtin-large"}, []string{"--no-options"}, []string{`"model"`, "lists no session config options"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var rec string
			h := newHarness(t, recordTo(&rec), func(c *config.Config) {
				c.Bindings[0].Args = append(c.Bindings[0].Args, tc.flags...)
				c.Bindings[0].SessionOptions = tc.opts
			})
			// No process outside the pool at startup: nothing was recorded.
			if _, err := os.Stat(rec); err == nil && len(records(t, rec)) != 0 {
				t.Fatalf("the daemon's start ran the agent: %v", records(t, rec))
			}

			h.say("ch", "a", 2)
			r := h.mention("ch", "b-builtin", "q1", "@agent one")
			if !errors.Is(r.err, daemon.ErrInvalidOption) || daemon.Code(r.err) != apitype.CodeInvalidOption || !containsAll(r.err.Error(), tc.want) {
				t.Fatalf("turn error %v (code %s), want invalid_option naming %q", r.err, daemon.Code(r.err), tc.want)
			}
			oe := h.d.Status().OptionErrors
			if len(oe) != 1 || oe[0].Binding != "b-builtin" || !containsAll(oe[0].Error, tc.want) {
				t.Fatalf("health option_errors %+v, want %q", oe, tc.want)
			}
			if len(prompts(t, rec)) != 0 || len(optionSets(t, rec)) != 0 {
				t.Fatal("the agent was prompted or set options despite the bad option")
			}
			if n := testutil.ToFloat64(h.m.Turns.WithLabelValues("cold", "refused")); n != 1 {
				t.Fatalf("turns{cold,refused} = %v, want 1", n)
			}
			if _, found, _ := h.st.Watermark(channel.WatermarkKey{Key: session.Key{Channel: "ch", Binding: "b-builtin"}}); found {
				t.Fatal("a turn that failed on its options moved the watermark")
			}
		})
	}
}

func containsAll(s string, parts []string) bool {
	for _, p := range parts {
		if !strings.Contains(s, p) {
			return false
		}
	}
	return true
}

// TestSessionOptionsThroughAPI: a key's own options, set while its process
// is warm, go to that process with its next turn, only what changed, once;
// they are checked against what the agent listed, kept across a restart
// and a start fresh, and cleared with an empty set.
func TestSessionOptionsThroughAPI(t *testing.T) {
	var rec string
	h := newHarness(t, recordTo(&rec), func(c *config.Config) {
		c.Bindings[0].SessionOptions = map[string]string{"mode": "code"}
	})
	k := session.Key{Channel: "ch", Binding: "b-builtin"}
	r1 := h.mention("ch", "b-builtin", "q1", "@agent one")
	reply(t, r1)
	n1 := r1.done.Native
	if got := optionSets(t, rec, n1); len(got) != 1 || got[0] != n1+" mode=code" {
		t.Fatalf("binding options on the new session: %q", got)
	}

	o, err := h.d.SetSessionOptions(k, map[string]string{"model": "builtin-large"})
	if err != nil {
		t.Fatal(err)
	}
	if o.Options["model"] != "builtin-large" || o.Effective["model"] != "builtin-large" || o.Effective["mode"] != "code" || len(o.Options) != 1 {
		t.Fatalf("after set: %+v", o)
	}
	reply(t, h.mention("ch", "b-builtin", "q2", "@agent two"))
	reply(t, h.mention("ch", "b-builtin", "q3", "@agent three"))
	if got := optionSets(t, rec, n1); len(got) != 2 || got[1] != n1+" model=builtin-large" {
		t.Fatalf("the warm process got %q, want only the changed model, once", got)
	}
	if o := promptOptions(t, rec); o["model"] != "builtin-large" || o["mode"] != "code" {
		t.Fatalf("warm prompts ran with %v", o)
	}

	// Checked against what the agent listed: nothing is stored.
	if _, err := h.d.SetSessionOptions(k, map[string]string{"model": "gpt-9"}); !errors.Is(err, daemon.ErrInvalidOption) || !strings.Contains(err.Error(), "builtin-small, builtin-large") {
		t.Fatalf("set an unlisted value: %v", err)
	}
	if _, err := h.d.SetSessionOptions(session.Key{Channel: "ch", Binding: "b-nope"}, map[string]string{"model": "x"}); !errors.Is(err, daemon.ErrUnknownBinding) {
		t.Fatalf("set on an unknown binding: %v", err)
	}
	if _, err := h.d.SetSessionOptions(k, map[string]string{"model": ""}); !errors.Is(err, daemon.ErrBadRequest) {
		t.Fatalf("set an empty value: %v", err)
	}

	// Kept in the store: a restarted daemon still has them, and so does a
	// key started fresh; its new session gets both options.
	h.restart()
	if o, err := h.d.SessionOptions(k); err != nil || o.Options["model"] != "builtin-large" {
		t.Fatalf("after restart: %+v %v", o, err)
	}
	if _, err := h.d.Fresh(k); err != nil {
		t.Fatal(err)
	}
	r4 := h.mention("ch", "b-builtin", "q4", "@agent four")
	reply(t, r4)
	got := optionSets(t, rec, n1, r4.done.Native)
	if r4.done.Shape != "cold" || len(got) != 4 || got[2] != r4.done.Native+" mode=code" || got[3] != r4.done.Native+" model=builtin-large" {
		t.Fatalf("fresh session (shape %s) got %q", r4.done.Shape, got)
	}

	// Cleared, the warm process goes back to the model it had before
	// residentd set one, as a new process would start.
	if o, err := h.d.SetSessionOptions(k, map[string]string{}); err != nil || len(o.Options) != 0 || o.Effective["mode"] != "code" || len(o.Effective) != 1 {
		t.Fatalf("clear: %+v %v", o, err)
	}
	reply(t, h.mention("ch", "b-builtin", "q5", "@agent five"))
	reply(t, h.mention("ch", "b-builtin", "q6", "@agent six"))
	if got := optionSets(t, rec, n1, r4.done.Native); len(got) != 5 || got[4] != r4.done.Native+" model=builtin-small" {
		t.Fatalf("after clearing, the warm process got %q; want model back to builtin-small, once", got)
	}
	if o := promptOptions(t, rec); o["model"] != "builtin-small" || o["mode"] != "code" {
		t.Fatalf("prompts after clearing ran with %v", o)
	}
}

// TestSessionOptionListedAfterAnother: an option the agent lists only once
// another is set (the built-in agent's effort comes with its large model,
// as claude-agent-acp's efforts depend on the model) is set after it, in a
// second pass; a key's change of it alone goes to the warm process alone.
func TestSessionOptionListedAfterAnother(t *testing.T) {
	var rec string
	h := newHarness(t, recordTo(&rec), func(c *config.Config) {
		c.Bindings[0].SessionOptions = map[string]string{"effort": "high", "model": "builtin-large"}
	})
	r := h.mention("ch", "b-builtin", "q1", "@agent one")
	reply(t, r)
	n := r.done.Native
	if got := optionSets(t, rec, n); strings.Join(got, "|") != n+" model=builtin-large|"+n+" effort=high" {
		t.Fatalf("options set %q, want the model, then its effort", got)
	}
	if o := promptOptions(t, rec); o["effort"] != "high" || o["model"] != "builtin-large" {
		t.Fatalf("the prompt ran with %v", o)
	}
	if _, err := h.d.SetSessionOptions(session.Key{Channel: "ch", Binding: "b-builtin"}, map[string]string{"effort": "low"}); err != nil {
		t.Fatal(err)
	}
	reply(t, h.mention("ch", "b-builtin", "q2", "@agent two"))
	if got := optionSets(t, rec, n); len(got) != 3 || got[2] != n+" effort=low" {
		t.Fatalf("after the key's change: %q, want effort=low alone", got)
	}
}

// TestRefusedFirstTurnKeepsNoSession: a new session whose first turn was
// refused (an option the agent does not list) never got its framing, so it
// is not kept: no process, no saved native id; once the option is fixed the
// key's next turn is cold, with the framing.
func TestRefusedFirstTurnKeepsNoSession(t *testing.T) {
	var rec string
	h := newHarness(t, recordTo(&rec))
	k := session.Key{Channel: "ch", Binding: "b-builtin"}
	// Nothing listed yet: the daemon takes it and the session start checks it.
	if _, err := h.d.SetSessionOptions(k, map[string]string{"model": "gpt-9"}); err != nil {
		t.Fatal(err)
	}
	r := h.mention("ch", "b-builtin", "q1", "@agent one")
	if !errors.Is(r.err, daemon.ErrInvalidOption) || !strings.Contains(r.err.Error(), "through the API") || r.start.Event != "" {
		t.Fatalf("first turn: %v (started %+v), want invalid_option naming the key's own option, never started", r.err, r.start)
	}
	if ss := h.d.Sessions(); len(ss) != 0 {
		t.Fatalf("a refused first turn left a session: %+v", ss)
	}
	if n, _ := h.st.NativeID(k); n != "" {
		t.Fatalf("a refused first turn saved native id %q", n)
	}
	if oe := h.d.Status().OptionErrors; len(oe) != 0 {
		t.Fatalf("a key's own bad option is reported as the binding's: %+v", oe)
	}
	if _, err := h.d.SetSessionOptions(k, map[string]string{}); err != nil {
		t.Fatal(err)
	}
	got := reply(t, h.mention("ch", "b-builtin", "q2", "@agent two"))
	if got["framing"] != "yes" || got["turn"] != "1" {
		t.Fatalf("after the fix: %v, want a cold first turn with the framing", got)
	}
}
