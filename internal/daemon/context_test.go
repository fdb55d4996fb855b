package daemon_test

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/residentd/residentd/apitype"
	"github.com/residentd/residentd/internal/channel"
	"github.com/residentd/residentd/internal/config"
	"github.com/residentd/residentd/internal/delivery"
	"github.com/residentd/residentd/internal/testkit"
)

// prompts reads what the built-in agent received, from its --record file.
func prompts(t *testing.T, path string) []string {
	t.Helper()
	var out []string
	for _, r := range testkit.Records[struct{ Prompt string }](t, path, "session/prompt") {
		out = append(out, r.Prompt)
	}
	return out
}

func TestBriefInFramingIsSentOnColdAndEveryNthWarmTurn(t *testing.T) {
	var rec string
	h := newHarness(t, func(c *config.Config) {
		rec = filepath.Join(c.StateDir, "record.jsonl")
		b := &c.Bindings[0]
		b.Args = append(b.Args, "--record", rec)
		b.BriefPlacement = delivery.InFraming
		b.BriefEvery = 2
	})
	for _, id := range []string{"q1", "q2", "q3", "q4"} {
		reply(t, h.mention("ch", "b-builtin", id, "@agent "+id))
	}
	got := prompts(t, rec)
	if len(got) != 4 {
		t.Fatalf("%d prompts recorded, want 4", len(got))
	}
	brief := delivery.DefaultBrief
	// cold: framing + brief once, then the key's facts, before the replay.
	if !strings.HasPrefix(got[0], config.BuiltinFraming+"\n\n"+brief+"\n\n"+delivery.FactsPrefix+`{"channel_id":"ch","binding_id":"b-builtin"`) || strings.Count(got[0], brief) != 1 {
		t.Fatalf("cold prompt does not carry the brief once in the framing:\n%.400s", got[0])
	}
	wantFull := []bool{false, true, false} // warm turns 1..3 with brief_every 2
	for i, full := range wantFull {
		p := got[i+1]
		if strings.Contains(p, config.BuiltinFraming) {
			t.Fatalf("warm prompt %d carries the framing", i+1)
		}
		if strings.Contains(p, brief) != full {
			t.Fatalf("warm prompt %d: full brief %v, want %v", i+1, strings.Contains(p, brief), full)
		}
		// Nothing that does not change for the key, and no run id.
		for _, gone := range []string{delivery.Intro, delivery.FactsPrefix, delivery.FactsChangedPrefix, `"run_id"`, `"binding_id"`} {
			if strings.Contains(p, gone) {
				t.Fatalf("warm prompt %d carries %q:\n%s", i+1, gone, p)
			}
		}
	}
	if n := testutil.ToFloat64(h.m.BriefTokensSent.WithLabelValues("framing")); n <= 0 {
		t.Fatalf("brief tokens counted for framing placement = %v", n)
	}
}

func TestBriefInTurnIsInEveryUserTurn(t *testing.T) {
	var rec string
	h := newHarness(t, func(c *config.Config) {
		rec = filepath.Join(c.StateDir, "record.jsonl")
		c.Bindings[0].Args = append(c.Bindings[0].Args, "--record", rec)
		c.Bindings[0].BriefPlacement = delivery.InTurn
	})
	for _, id := range []string{"q1", "q2"} {
		reply(t, h.mention("ch", "b-builtin", id, "@agent "+id))
	}
	got := prompts(t, rec)
	if strings.Count(got[1], delivery.DefaultBrief) != 1 || strings.Contains(got[1], config.BuiltinFraming) {
		t.Fatalf("warm prompt with brief in turn:\n%.300s", got[1])
	}
	if !strings.HasPrefix(got[1], delivery.Intro+"\n{") {
		t.Fatalf("warm prompt does not start with the intro and payload:\n%.200s", got[1])
	}
}

func TestOwnPostsLeftOutByDefaultAndCounted(t *testing.T) {
	for _, omit := range []bool{true, false} {
		h := newHarness(t, func(c *config.Config) { c.Bindings[0].OmitOwnPosts = &omit })
		h.post(
			channel.Message{ID: "u1", Channel: "ch", Author: "aiko", Body: "a user line"},
			channel.Message{ID: "o1", Channel: "ch", Author: "@agent", AuthorKind: channel.KindAgent, Body: "my own earlier answer"},
			channel.Message{ID: "x1", Channel: "ch", Author: "@other", AuthorKind: channel.KindAgent, Body: "another agent"},
		)
		r := h.mention("ch", "b-builtin", "q1", "@agent hi")
		reply(t, r)
		wantLines, wantOwn := 2, 1
		if !omit {
			wantLines, wantOwn = 3, 0
		}
		if r.done.Context.Lines != wantLines || r.done.Context.OwnOmitted != wantOwn {
			t.Fatalf("omit=%v: context %+v", omit, r.done.Context)
		}
		if n := testutil.ToFloat64(h.m.ChannelLines.WithLabelValues("own")); int(n) != wantOwn {
			t.Fatalf("omit=%v: own lines metric %v", omit, n)
		}
	}
}

func TestThreadMentionSeesItsThread(t *testing.T) {
	h := newHarness(t)
	h.post(
		channel.Message{ID: "root", Channel: "ch", Author: "aiko", Body: "thread root: deploy failed"},
		channel.Message{ID: "main1", Channel: "ch", Author: "ben", Body: "unrelated main-timeline line"},
		channel.Message{ID: "t1", Channel: "ch", ThreadRoot: "root", Author: "carla", Body: "in the thread"},
	)
	root := "root"
	r := h.turn(apitype.TurnRequest{Channel: "ch", Binding: "b-builtin", MessageID: "t2", ThreadRoot: &root, Text: "@agent why?"})
	got := reply(t, r)
	if r.done.Context.Lines != 2 || got["context"] != "2" {
		t.Fatalf("thread context %+v reply %v", r.done.Context, got)
	}
}

// TestBriefAfterCompaction: with the brief in the framing (the default for
// a resident binding), a turn during which the agent compacts its history
// makes the next warm turn carry the full brief, once; the turns after go
// back to the mention and its lines. An agent compacts one of two ways: its
// usage_update reports less context in use ([[compact]]), or it says so
// with compaction_update (repeating the completion while its context in
// use keeps growing); from an agent that announces its compactions, a drop
// in use is no longer taken for one.
func TestBriefAfterCompaction(t *testing.T) {
	for _, tt := range []struct {
		name     string
		texts    []string
		wantFull []bool // by prompt: the full brief in it
	}{
		// cold (framing), warm, warm (compacts), warm: full brief again, warm.
		{"usage drops", []string{"@agent one", "@agent two", "@agent compact now [[compact]]", "@agent four", "@agent five"}, []bool{true, false, false, true, false}},
		// cold, warm (compacts), warm: full brief again, warm (use drops: no
		// compaction from an agent that announces them), warm.
		{"compaction_update", []string{"@agent one", "@agent compacting [[compaction-update]]", "@agent three", "@agent four [[compact]]", "@agent five"}, []bool{true, false, true, false, false}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var rec string
			h := newHarness(t, recordTo(&rec))
			if p := h.cfg.Bindings[0].BriefPlacement; p != delivery.InFraming {
				t.Fatalf("a supervised resident binding defaults to brief placement %q, want framing", p)
			}
			for i, text := range tt.texts {
				reply(t, h.mention("ch", "b-builtin", fmt.Sprint("q", i+1), text))
			}
			for i, p := range prompts(t, rec) {
				if full := strings.Contains(p, delivery.DefaultBrief); full != tt.wantFull[i] {
					t.Fatalf("prompt %d: full brief %v, want %v:\n%.300s", i+1, full, tt.wantFull[i], p)
				}
			}
			if n := testutil.ToFloat64(h.m.Compactions.WithLabelValues("b-builtin")); n != 1 {
				t.Fatalf("compactions = %v, want 1", n)
			}
		})
	}
}

// TestFloorShapesThroughTheDaemon: with the brief in the framing, a warm
// turn is the mention line (with its author) and its new lines; the key's
// facts go again as one line only when they change; a session reopened
// after a restart gets one line more, and its facts are compared with the
// newest stored turn's.
func TestFloorShapesThroughTheDaemon(t *testing.T) {
	var rec string
	h := newHarness(t, recordTo(&rec))
	ask := func(id string, maxRcpt int) result {
		h.post(channel.Message{ID: id, Channel: "ch", Author: "carla", AuthorKind: channel.KindUser, Body: "@agent " + id})
		r := h.turn(apitype.TurnRequest{Channel: "ch", Binding: "b-builtin", MessageID: id, Text: "@agent " + id, MaxRecipients: maxRcpt})
		reply(t, r)
		return r
	}
	h.say("ch", "a", 1)
	shapes := []string{ask("q1", 3).done.Shape}
	h.say("ch", "b", 1)
	shapes = append(shapes, ask("q2", 3).done.Shape, ask("q3", 5).done.Shape)
	h.restart()
	shapes = append(shapes, ask("q4", 5).done.Shape)
	h.restart()
	shapes = append(shapes, ask("q5", 3).done.Shape)
	if fmt.Sprint(shapes) != "[cold warm warm restored restored]" {
		t.Fatalf("shapes %v", shapes)
	}
	got := prompts(t, rec)
	facts := func(n int) string {
		return fmt.Sprintf(`{"channel_id":"ch","binding_id":"b-builtin","runtime":"builtin:residentd:agent","supervised":true,"resident":true,"channel_agents":[{"handle":"@agent","reachable":true}],"max_recipients":%d}`, n)
	}
	mention := func(id string) string {
		return `{"message_id":"` + id + `","author":"carla","text":"@agent ` + id + `"}`
	}
	if !strings.Contains(got[0], delivery.FactsPrefix+facts(3)+"\n\n") {
		t.Errorf("cold prompt lacks the facts line:\n%s", got[0])
	}
	want := []string{
		mention("q2") + "\n\n" + delivery.HeaderNew + "\n- [user] aiko: line b1 about the refund spec",
		delivery.FactsChangedPrefix + facts(5) + "\n" + mention("q3"),
		delivery.Reopened + "\n" + mention("q4"),
		delivery.Reopened + "\n" + delivery.FactsChangedPrefix + facts(3) + "\n" + mention("q5"),
	}
	for i, w := range want {
		if got[i+1] != w {
			t.Errorf("prompt %d =\n%s\nwant\n%s", i+2, got[i+1], w)
		}
	}
}
