package config

import (
	"encoding/json"
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
	if !ok || b.Env["ENABLE_PROMPT_CACHING_1H"] != "1" || !b.KeepsSession() || !b.RestoreOn() || b.SessionOptions["model"] != "sonnet" || b.BriefPlacement != "framing" {
		t.Fatalf("b-claude = %+v", b)
	}
	if bu := c.Budgets; bu.Bindings["b-claude"] != 20 || bu.ChannelDefault != 5 || bu.WarnAt != 0.8 {
		t.Fatalf("budgets = %+v", bu)
	}
	if time.Duration(c.IdleTimeout) != 30*time.Minute || c.Context.Limit != 12 || c.YieldAfter != 4 || c.RestoreFailures != 3 || c.Context.Fetch != 0 {
		t.Fatalf("config = %+v", c)
	}
	if g, ok := c.Binding("b-gemini"); !ok || g.RestoreOn() || !strings.Contains(g.Comment, "session/load") {
		t.Fatalf("b-gemini = %+v: want restore off, with the reason in its comment", g)
	}
	if x, ok := c.Binding("b-codex"); !ok || x.Command != "codex-acp" || !x.KeepsSession() {
		t.Fatalf("b-codex = %+v", x)
	}
}

func TestReadyClaudeBindingMatchesExample(t *testing.T) {
	b := ClaudeAgentACP()
	if b.Env["ENABLE_PROMPT_CACHING_1H"] != "1" || b.Command != "claude-agent-acp" || !b.KeepsSession() || b.Bursts != BurstsCoalesce {
		t.Fatalf("ClaudeAgentACP = %+v", b)
	}
	c, err := Load(filepath.Join("..", "..", "deploy", "config.example.json"))
	if err != nil {
		t.Fatal(err)
	}
	if x, _ := c.Binding("b-claude"); x.Bursts != b.Bursts {
		t.Fatalf("the example's b-claude has bursts %q, the ready binding %q", x.Bursts, b.Bursts)
	}
}

func TestDefaults(t *testing.T) {
	c := &Config{Bindings: []Binding{Builtin("/bin/residentd", "/state"), {ID: "b-fresh", Handle: "@fresh", Command: "agent"}}}
	c.SetDefaults()
	if c.MaxLive != 4 || c.YieldAfter != 4 || time.Duration(c.IdleTimeout) != 30*time.Minute || c.Context != (Context{Limit: 12, MaxChars: 600, MaxIDs: 200}) {
		t.Fatalf("defaults = %+v", c)
	}
	if bu := c.Budgets; bu.Currency != "USD" || bu.WarnAt != 0.8 || bu.Reset != "" || len(bu.Bindings)+len(bu.Channels) != 0 || bu.ChannelDefault != 0 {
		t.Fatalf("budget defaults = %+v", bu)
	}
	// A resident binding gets the brief with its framing; one that starts
	// fresh every turn keeps the source's brief in every turn.
	b := c.Bindings[0]
	if b.Permission != permission.Deny || b.BriefPlacement != delivery.InFraming || b.BriefEvery != 10 || !b.OmitOwn() || !b.ToolsOn() || b.RestoreMethod != RestoreAuto || b.Scope != ScopeChannel {
		t.Fatalf("binding defaults = %+v", b)
	}
	if f := c.Bindings[1]; f.BriefPlacement != delivery.InTurn {
		t.Fatalf("a binding that keeps no session defaults to brief placement %q, want turn", f.BriefPlacement)
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
		{"negative limit", func(c *Config) { c.Bindings[0].Limits.PidsMax = -1 }, "limits must not be negative"},
		{"negative price", func(c *Config) { c.Bindings[0].Prices = &Prices{Input: 3, Output: -1} }, "prices must be 0 or more"},
		{"tiny memory", func(c *Config) { c.Bindings[0].Limits.MemoryMax = 4096 }, "limits.memory_max 4096 bytes is too small"},
		{"cpu weight", func(c *Config) { c.Bindings[0].Limits.CPUWeight = 20000 }, "limits.cpu_weight 20000 must be 1..10000"},
		{"system_file a directory", func(c *Config) { c.Bindings[0].System, c.Bindings[0].SystemFile = "", os.TempDir() }, "is not a readable file"},
		{"restore method", func(c *Config) { c.Bindings[0].RestoreMethod = "replay" }, `restore_method "replay": use auto, resume or load`},
		{"scope", func(c *Config) { c.Bindings[0].Scope = "message" }, `scope "message": use channel or thread`},
		{"empty option value", func(c *Config) { c.Bindings[0].SessionOptions = map[string]string{"model": ""} }, `session_options: option "model" = ""`},
		{"budget of an unknown binding", func(c *Config) { c.Budgets.Bindings = map[string]float64{"b-nope": 5} }, `budgets: bindings: "b-nope" is not a configured binding`},
		{"zero budget", func(c *Config) { c.Budgets.Bindings = map[string]float64{"b": 0} }, `binding "b": a daily limit must be more than 0`},
		{"negative channel budget", func(c *Config) { c.Budgets.Channels = map[string]float64{"ch": -2} }, `channel "ch": a daily limit must be more than 0`},
		{"budget timezone", func(c *Config) { c.Budgets.Timezone = "Mars/Olympus" }, `budgets: timezone "Mars/Olympus"`},
		{"budget reset", func(c *Config) { c.Budgets.Reset = "25:00" }, `reset "25:00" must be a time of day`},
		{"budget warning share", func(c *Config) { c.Budgets.WarnAt = 80 }, "warn_at 80 must be a share between 0 and 1"},
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
		"size":     `{"bindings":[{"id":"b","limits":{"memory_max":"2T"}}]}`,
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

func TestParseBytes(t *testing.T) {
	for in, want := range map[string]int64{"512": 512, "64K": 64 << 10, "512M": 512 << 20, "2G": 2 << 30, "2gb": 2 << 30, " 1m ": 1 << 20} {
		if got, err := ParseBytes(in); err != nil || got != want {
			t.Errorf("ParseBytes(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "G", "1.5G", "-1M", "2T", "1 G", "0x10"} {
		if got, err := ParseBytes(in); err == nil {
			t.Errorf("ParseBytes(%q) = %d, want an error", in, got)
		}
	}
	var l Limits
	if err := json.Unmarshal([]byte(`{"memory_max":"1G","pids_max":256,"cpu_weight":50,"nofile":4096}`), &l); err != nil || l.MemoryMax != 1<<30 || l.PidsMax != 256 {
		t.Errorf("limits = %+v, %v", l, err)
	}
	if err := json.Unmarshal([]byte(`{"memory_max":1048576}`), &l); err != nil || l.MemoryMax != 1<<20 {
		t.Errorf("numeric memory_max = %+v, %v", l, err)
	}
}
