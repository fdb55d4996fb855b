package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/residentd/residentd/internal/config"
)

func TestLoadConfigDefaultsAndPresets(t *testing.T) {
	state := t.TempDir()
	cfg, err := loadConfig("", "/opt/residentd", state)
	if err != nil {
		t.Fatal(err)
	}
	if len(cfg.Bindings) != 1 || cfg.Bindings[0].ID != "b-builtin" || cfg.Bindings[0].Command != "/opt/residentd" || cfg.StateDir != state {
		t.Fatalf("no-config bindings: %+v", cfg.Bindings)
	}
	cfg, err = loadConfig("", "/opt/residentd", state, config.ClaudeAgentACP())
	if err != nil {
		t.Fatal(err)
	}
	b, ok := cfg.Binding("b-claude")
	if !ok || b.Env["ENABLE_PROMPT_CACHING_1H"] != "1" {
		t.Fatalf("--with-claude: %+v", cfg.Bindings)
	}
	f := serveFlags{withClaude: true, withCodex: true}
	cfg, err = loadConfig("", "/opt/residentd", state, f.ready()...)
	if err != nil {
		t.Fatal(err)
	}
	if x, ok := cfg.Binding("b-codex"); !ok || x.Command != "codex-acp" || len(cfg.Bindings) != 3 {
		t.Fatalf("--with-claude --with-codex: %+v", cfg.Bindings)
	}

	// A file's own b-claude wins over the preset; b-builtin is added.
	p := filepath.Join(t.TempDir(), "c.json")
	os.WriteFile(p, []byte(`{"bindings":[{"id":"b-claude","handle":"@claude","command":"/usr/local/bin/claude-agent-acp","supervised":true,"resident":true}]}`), 0o600)
	cfg, err = loadConfig(p, "/opt/residentd", state, config.ClaudeAgentACP())
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := cfg.Binding("b-claude"); b.Command != "/usr/local/bin/claude-agent-acp" || len(cfg.Bindings) != 2 {
		t.Fatalf("file bindings: %+v", cfg.Bindings)
	}

	os.WriteFile(p, []byte(`{"bindings":[{"id":"b x","handle":"@x","command":"x"}]}`), 0o600)
	if _, err := loadConfig(p, "/opt/residentd", state); err == nil || !strings.Contains(err.Error(), `"b x"`) {
		t.Fatalf("invalid binding id: %v", err)
	}
}
