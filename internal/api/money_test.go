package api

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/residentd/residentd/apitype"
	"github.com/residentd/residentd/internal/config"
)

// TestMoneyIsExactOverTheSocket: three turns of 0.4 USD (the built-in
// agent reports its running total as a binary float, 1.2000000000000002
// after the third) show exactly 0.4 a turn and 1.2 in all, in the done
// events, the sessions listing and the budget, as decimal strings.
func TestMoneyIsExactOverTheSocket(t *testing.T) {
	e := newEnv(t, func(c *config.Config) {
		c.Bindings[0].Args = append(c.Bindings[0].Args, "--cost", "0.4")
		c.Budgets = config.Budgets{Timezone: "UTC", Bindings: map[string]float64{"b-builtin": 1.2}}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for i := range 3 {
		ev, err := e.c.Turn(ctx, apitype.TurnRequest{Channel: "ch", Binding: "b-builtin", Text: fmt.Sprint("@agent turn ", i)}, nil)
		if err != nil || ev.Usage == nil || ev.Usage.Cost == nil || ev.Usage.Cost.String() != "0.4" {
			t.Fatalf("turn %d: %+v %v, want a cost of exactly 0.4", i, ev.Usage, err)
		}
	}
	status, body := e.rawBody(t, http.MethodGet, "/v1/sessions", "")
	if status != 200 || !bytes.Contains(body, []byte(`"cost":"1.2"`)) {
		t.Fatalf("sessions %d %s: want the process's cost as \"1.2\"", status, body)
	}
	status, body = e.rawBody(t, http.MethodGet, "/v1/budgets", "")
	if status != 200 || !bytes.Contains(body, []byte(`"spent":"1.2","limit":"1.2"`)) || !bytes.Contains(body, []byte(`"level":"exceeded"`)) {
		t.Fatalf("budgets %d %s: want spent exactly 1.2 of 1.2, exceeded", status, body)
	}
	// Exactly at the limit is spent: the fourth turn is refused.
	_, err := e.c.Turn(ctx, apitype.TurnRequest{Channel: "ch", Binding: "b-builtin", Text: "@agent one more"}, nil)
	if err == nil || !bytes.Contains([]byte(err.Error()), []byte("spent 1.2 USD of its daily budget of 1.2 USD")) {
		t.Fatalf("a turn at exactly the limit: %v, want budget_exceeded saying 1.2 of 1.2", err)
	}
}
