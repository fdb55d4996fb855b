package lease

import (
	"strings"
	"testing"

	"github.com/residentd/residentd/internal/delivery"
)

// TestComposeWithTheSystemPrompt: a session that took the framing (and a
// brief in the framing) as its system prompt gets neither in any shape,
// never reads the framing, and a warm turn does not send the brief again
// on the brief_every count; a brief that changed (BriefDue) still goes.
func TestComposeWithTheSystemPrompt(t *testing.T) {
	for _, placement := range []delivery.Placement{delivery.InTurn, delivery.InFraming} {
		for _, shape := range []Shape{Cold, Restored, Warm} {
			var l loaders
			in := l.input(shape, "@agent hi")
			in.Placement, in.SystemPrompt = placement, true
			in.BriefCount = 20 // past brief_every
			out, err := Compose(in)
			if err != nil {
				t.Fatal(err)
			}
			name := string(placement) + "/" + shape.String()
			if l.framing != 0 || out.Framing != "" || strings.Contains(out.Text, testFraming) {
				t.Errorf("%s: the framing was read %d times, sent %q: %.80q", name, l.framing, out.Framing, out.Text)
			}
			if placement == delivery.InFraming && strings.Contains(out.Text, delivery.DefaultBrief[:40]) {
				t.Errorf("%s: the brief went in the turn: %.200q", name, out.Text)
			}
			if shape == Cold && !strings.Contains(out.Text, "User: ") {
				t.Errorf("%s: a cold turn without its replay: %.200q", name, out.Text)
			}
		}
	}
	var l loaders
	in := l.input(Warm, "@agent hi")
	in.Placement, in.SystemPrompt, in.BriefDue = delivery.InFraming, true, true
	out, err := Compose(in)
	if err != nil || !out.BriefSent || !strings.Contains(out.Text, delivery.DefaultBrief[:40]) {
		t.Errorf("a brief due (changed) with the system prompt: sent %v, %v", out.BriefSent, err)
	}
}
