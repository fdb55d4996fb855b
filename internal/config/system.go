package config

import "github.com/residentd/residentd/internal/delivery"

// Where a binding's framing goes (SystemPlacement).
const (
	SystemInPrompt = "system_prompt" // the session's system prompt where the agent takes one (the default)
	SystemInTurn   = "turn"          // the first turn of a cold or restored process
)

// Forms reports whether b's agents are told that a person may fill in a
// form (Elicitation, on by default).
func (b Binding) Forms() bool { return b.Elicitation == nil || *b.Elicitation }

// SystemPrompt is the text a session of b gets as its system prompt when
// its agent takes one: the framing, and the brief after it when the brief
// goes in the framing. "" when b puts the framing in the turn, or has
// none.
func (b Binding) SystemPrompt() (string, error) {
	if b.SystemPlacement == SystemInTurn {
		return "", nil
	}
	text, err := b.Framing()
	if err != nil || text == "" {
		return "", err
	}
	if b.BriefPlacement == delivery.InFraming {
		brief := b.Brief
		if brief == "" {
			brief = delivery.DefaultBrief
		}
		text += "\n\n" + brief
	}
	return text, nil
}
