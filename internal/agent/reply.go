package agent

import (
	"encoding/json"
	"fmt"
	"strings"
)

// Summary is the deterministic reply of the built-in agent: one line that
// tells a test what shape of prompt arrived, so prompt-shape bugs show up in
// the reply instead of needing a model.
func Summary(prompt, framing string, turn int) string {
	framed := "no"
	if framing != "" && strings.HasPrefix(prompt, framing) {
		framed = "yes"
	}
	var users, assistants, context int
	mention := "-"
	for _, line := range strings.Split(prompt, "\n") {
		if rest, ok := strings.CutPrefix(line, "User: "); ok {
			// A replayed turn with the brief in the framing starts with
			// its mention line.
			users++
			line = rest
		}
		switch {
		case strings.HasPrefix(line, "Assistant: "):
			assistants++
		case strings.HasPrefix(line, "- ["):
			context++
		case strings.HasPrefix(line, `{"channel_id"`), strings.HasPrefix(line, `{"message_id"`):
			mention = mentionID(line)
		}
	}
	return fmt.Sprintf("builtin turn=%d framing=%s users=%d assistants=%d mention=%s context=%d",
		turn, framed, users, assistants, mention, context)
}

// mentionID reads message_id from a mention line (either placement's); "-" when the line
// is not a JSON object with a string message_id.
func mentionID(line string) string {
	var payload struct {
		MessageID *string `json:"message_id"`
	}
	if err := json.Unmarshal([]byte(line), &payload); err != nil || payload.MessageID == nil || *payload.MessageID == "" {
		return "-"
	}
	return *payload.MessageID
}

// chunks splits s into up to three parts at rune boundaries so the reply
// streams as several agent_message_chunk updates whose concatenation is s.
func chunks(s string) []string {
	runes := []rune(s)
	if len(runes) < 3 {
		return []string{s}
	}
	a, b := len(runes)/3, 2*len(runes)/3
	return []string{string(runes[:a]), string(runes[a:b]), string(runes[b:])}
}
