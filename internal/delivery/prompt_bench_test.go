package delivery_test

import (
	"fmt"
	"testing"

	"github.com/residentd/residentd/internal/config"
	"github.com/residentd/residentd/internal/delivery"
	"github.com/residentd/residentd/internal/lease"
)

// BenchmarkPromptShaping is the daemon's prompt step on a 40-turn
// conversation: flatten the replay, take the newest user turn, and let the
// lease pick the shape (cold, so the replay is really built into the text).
func BenchmarkPromptShaping(b *testing.B) {
	conv := make([]delivery.Turn, 0, 40)
	for i := range 20 {
		p := delivery.Payload{ChannelID: "ch-backend", MessageID: fmt.Sprintf("m%03d", i), RunID: fmt.Sprintf("run-%02d", i),
			BindingID: "b-claude", Runtime: "cli:claude:agent", Supervised: true, Resident: true,
			ChannelAgents: []delivery.Agent{{Handle: "@claude", Reachable: true}}, MaxRecipients: 3,
			Text: "@claude why is the refund spec flaky? look at the last runs"}
		block := delivery.HeaderNew + "\n- [user] aiko: I think the cache key needs the locale, otherwise ja users get en pages"
		conv = append(conv,
			delivery.Turn{Role: delivery.RoleUser, Text: delivery.UserTurn(p, delivery.DefaultBrief, block)},
			delivery.Turn{Role: delivery.RoleAssistant, Text: "The refund spec shares a fixture that is not reset between examples."})
	}
	for _, shape := range []lease.Shape{lease.Cold, lease.Warm} {
		b.Run(shape.String(), func(b *testing.B) {
			l := lease.New(shape, "nat-1")
			b.ReportAllocs()
			n := 0
			for range b.N {
				// As the daemon does: the replay is built only when it is sent.
				newest, replay := delivery.LatestUserTurn(conv), ""
				if l.NeedsReplay(newest) {
					replay = delivery.BuildPrompt(conv)
				}
				n += len(l.Prompt(config.BuiltinFraming, replay, newest))
			}
			if n == 0 {
				b.Fatal("empty prompt")
			}
		})
	}
}
