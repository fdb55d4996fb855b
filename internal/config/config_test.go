package config

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/residentd/residentd/internal/delivery"
	"github.com/residentd/residentd/internal/permission"
)

func TestExampleConfigLoadsAndValidates(t *testing.T) {
	c, err := Load(filepath.Join("..", "..", "deploy", "config.example.json"))
	if err != nil {
		t.Fatal(err)
	}
	c.SetDefaults()
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	b, ok := c.Binding("b-claude")
	if !ok || b.Env["ENABLE_PROMPT_CACHING_1H"] != "1" || !b.KeepsSession() || !b.RestoreOn() {
		t.Fatalf("b-claude = %+v", b)
	}
	if time.Duration(c.IdleTimeout) != 30*time.Minute || c.Context.Limit != 12 {
		t.Fatalf("config = %+v", c)
	}
}

func TestReadyClaudeBindingMatchesExample(t *testing.T) {
	b := ClaudeAgentACP()
	if b.Env["ENABLE_PROMPT_CACHING_1H"] != "1" || b.Command != "claude-agent-acp" || !b.KeepsSession() {
		t.Fatalf("ClaudeAgentACP = %+v", b)
	}
}

func TestDefaults(t *testing.T) {
	c := &Config{Bindings: []Binding{Builtin("/bin/residentd", "/state")}}
	c.SetDefaults()
	if c.MaxLive != 4 || time.Duration(c.IdleTimeout) != 30*time.Minute || c.Context != (Context{Fetch: 30, Limit: 12, MaxChars: 600, MaxIDs: 200}) {
		t.Fatalf("defaults = %+v", c)
	}
	b := c.Bindings[0]
	if b.Permission != permission.Deny || b.BriefPlacement != delivery.InTurn || b.BriefEvery != 10 || !b.OmitOwn() || !b.ToolsOn() {
		t.Fatalf("binding defaults = %+v", b)
	}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
}

func TestValidateNamesTheProblem(t *testing.T) {
	ok := Binding{ID: "b", Handle: "@a", Command: "x", Permission: permission.Deny, BriefPlacement: delivery.InTurn}
	tests := []struct {
		name string
		mut  func(*Config)
		want string
	}{
		{"no bindings", func(c *Config) { c.Bindings = nil }, "no bindings"},
		{"bad id", func(c *Config) { c.Bindings[0].ID = "b c" }, `id "b c"`},
		{"duplicate", func(c *Config) { c.Bindings = append(c.Bindings, ok) }, "defined twice"},
		{"no command", func(c *Config) { c.Bindings[0].Command = "" }, "no command"},
		{"handle", func(c *Config) { c.Bindings[0].Handle = "claude" }, "must start with '@'"},
		{"permission", func(c *Config) { c.Bindings[0].Permission = "yolo" }, "permission"},
		{"placement", func(c *Config) { c.Bindings[0].BriefPlacement = "top" }, "brief_placement"},
		{"system twice", func(c *Config) { c.Bindings[0].System, c.Bindings[0].SystemFile = "a", "b" }, "both system and system_file"},
		{"system_file missing", func(c *Config) { c.Bindings[0].System, c.Bindings[0].SystemFile = "", "/nonexistent/framing.txt" }, `system_file "/nonexistent/framing.txt" is not a readable file`},
		{"system_file a directory", func(c *Config) { c.Bindings[0].System, c.Bindings[0].SystemFile = "", os.TempDir() }, "is not a readable file"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := &Config{Bindings: []Binding{ok}}
			tt.mut(c)
			err := c.Validate()
			if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Validate = %v, want ErrInvalid mentioning %q", err, tt.want)
			}
		})
	}
}

func TestLoadRefusesUnknownFieldsAndBadDurations(t *testing.T) {
	dir := t.TempDir()
	for name, body := range map[string]string{
		"unknown":  `{"bindings":[],"max_lives":3}`,
		"duration": `{"idle_timeout":30}`,
		"syntax":   `{"bindings":[`,
	} {
		p := filepath.Join(dir, name+".json")
		os.WriteFile(p, []byte(body), 0o600)
		if _, err := Load(p); err == nil {
			t.Errorf("%s: Load accepted %s", name, body)
		}
	}
}

func TestFramingFromFile(t *testing.T) {
	p := filepath.Join(t.TempDir(), "system.txt")
	os.WriteFile(p, []byte("framing from a file"), 0o600)
	got, err := Binding{ID: "b", SystemFile: p}.Framing()
	if err != nil || got != "framing from a file" {
		t.Fatalf("Framing = %q, %v", got, err)
	}
	if _, err := (Binding{ID: "b", SystemFile: p + ".missing"}).Framing(); err == nil || !strings.Contains(err.Error(), `binding "b"`) {
		t.Fatalf("missing file: %v", err)
	}
}
