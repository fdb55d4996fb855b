package acp

import (
	"context"
	"encoding/json"
	"path/filepath"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/residentd/residentd/internal/testkit"
)

// initialize tells the agent what residentd handles beyond the SDK's
// types: clientCapabilities.session.compaction and .notices, and
// .subagents, beside the typed capabilities.
func TestInitializeAdvertisesSessionCapabilities(t *testing.T) {
	out := filepath.Join(t.TempDir(), "initialize.json")
	// An "agent" that keeps the first line it is sent and exits.
	spec := Spec{Command: "sh", Args: []string{"-c", `head -n 1 > "$0"`, out}, Dir: t.TempDir(), StartTimeout: 10 * time.Second, Grace: time.Second}
	if a, err := Start(context.Background(), spec, zap.NewNop()); err == nil {
		_ = a.Close()
		t.Fatal("an agent that never answered initialize started")
	}
	b := testkit.ReadFile(t, out)
	var req struct {
		Method string `json:"method"`
		Params struct {
			ClientCapabilities map[string]json.RawMessage `json:"clientCapabilities"`
		} `json:"params"`
	}
	if err := json.Unmarshal(b, &req); err != nil {
		t.Fatalf("initialize line %s: %v", b, err)
	}
	caps := req.Params.ClientCapabilities
	var session struct {
		Compaction, Notices *struct{}
	}
	if req.Method != "initialize" || json.Unmarshal(caps["session"], &session) != nil || session.Compaction == nil || session.Notices == nil || string(caps["subagents"]) != "{}" || caps["fs"] == nil {
		t.Fatalf("initialize sent %s", b)
	}
}
