package lease

import (
	"fmt"
	"strings"

	"github.com/residentd/residentd/internal/channel"
	"github.com/residentd/residentd/internal/delivery"
	"github.com/residentd/residentd/internal/session"
)

// Input is everything that decides what one turn sends. The two loaders
// are called only when their result is sent: a warm turn never reads the
// framing (it may live in a file) or the stored conversation.
type Input struct {
	Shape  Shape
	Native string // the native session that answers; a watermark of any other is ignored

	// Framing returns the binding's system framing.
	Framing func() (string, error)
	// Brief is the binding's brief; "" means delivery.DefaultBrief.
	Brief     string
	Placement delivery.Placement
	// BriefEvery re-sends the full brief every N warm turns with
	// delivery.InFraming; BriefCount is how many warm turns this process has
	// answered since it last got it.
	BriefEvery int
	BriefCount int

	// Conversation returns the key's stored turns, oldest first, for a replay.
	Conversation func() ([]session.Turn, error)
	Mention      delivery.Payload

	// Rows are the newest channel rows of the mention's timeline, oldest
	// first; Watermark is the stored record for the key and timeline (nil
	// when none). Only a binding that keeps its session uses a watermark and
	// stages what it showed.
	Rows         []channel.Message
	Watermark    *channel.Watermark
	KeepsSession bool
	Render       delivery.RenderOptions
}

// Output is what Compose decided.
type Output struct {
	Text       string // the prompt to send
	Stored     string // the user turn to keep in the conversation
	Framing    string // the system part sent ("" on a warm turn): a changed one costs the cache
	BriefSent  bool   // the full brief went out, in the turn or with the framing
	BriefCount int    // the process's warm turns since the full brief, after this turn
	Context    delivery.Report
	// Stage is what a successful run commits to the watermark: empty for a
	// binding that keeps no session.
	Stage channel.Seen
}

// Header names the context block that went out: "new" (since the
// watermark), "snapshot" (no watermark) or "none" (no block).
func (o Output) Header() string {
	switch {
	case o.Context.Lines == 0:
		return "none"
	case o.Context.Watermarked:
		return "new"
	}
	return "snapshot"
}

// Compose is the one place a turn's prompt is decided. By the lease shape:
//
//	restored, newest turn not blank: framing + "\n\n" + newest user turn
//	cold, or a blank newest turn:    framing + "\n\n" + the whole conversation replayed
//	warm:                            the newest user turn, nothing else
//
// Replaying into a warm process would feed it its own replies as new input
// every turn, which grows quadratically; that is why the order is fixed.
// "Newest turn" is the mention's text (the spec's latest_user_turn). The
// user turn itself is the intro, the payload, the brief (or its pointer)
// and the channel-context block rendered against the watermark.
func Compose(in Input) (Output, error) {
	var out Output
	var wm *channel.Watermark
	if in.KeepsSession && in.Watermark != nil {
		if own, ok := in.Watermark.For(in.Native); ok {
			wm = &own
		}
	}
	block, rep := delivery.Render(in.Rows, in.Mention.MessageID, wm, in.Render)
	out.Context = rep
	if in.KeepsSession {
		out.Stage = rep.Seen
	}

	brief := in.Brief
	if brief == "" {
		brief = delivery.DefaultBrief
	}
	framed := in.Shape != Warm
	turnBrief := brief
	out.BriefCount = in.BriefCount
	if in.Placement == delivery.InFraming {
		turnBrief = delivery.BriefPointer()
		switch {
		case framed:
			out.BriefCount = 0 // a new process gets the brief with its framing
		case in.BriefCount+1 >= in.BriefEvery:
			// A session that compacted its history gets the brief back.
			out.BriefCount = 0
			turnBrief = brief
		default:
			out.BriefCount = in.BriefCount + 1
		}
	}
	out.Stored = delivery.UserTurn(in.Mention, turnBrief, block)
	out.BriefSent = turnBrief == brief || framed

	if !framed && strings.TrimSpace(in.Mention.Text) != "" {
		out.Text = out.Stored
		return out, nil
	}
	system, err := in.Framing()
	if err != nil {
		return Output{}, fmt.Errorf("lease: compose: %w", err)
	}
	if in.Placement == delivery.InFraming {
		system += "\n\n" + brief
	}
	out.Framing = system
	if in.Shape == Restored && strings.TrimSpace(in.Mention.Text) != "" {
		out.Text = system + "\n\n" + out.Stored
		return out, nil
	}
	conv, err := in.Conversation()
	if err != nil {
		return Output{}, fmt.Errorf("lease: compose: %w", err)
	}
	turns := append(conv[:len(conv):len(conv)], session.Turn{Role: session.RoleUser, Text: out.Stored})
	out.Text = system + "\n\n" + delivery.BuildPrompt(turns)
	return out, nil
}
