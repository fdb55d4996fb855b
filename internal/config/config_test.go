package config

import (
	"encoding/json"
	"errors"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/residentd/residentd/internal/delivery"
	"github.com/residentd/residentd/internal/permission"
	"github.com/residentd/residentd/internal/regfile"
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
	if g, ok := c.Binding("b-gemini"); !ok || !g.RestoreOn() || time.Duration(g.StartTimeout) != DefaultStartTimeout || !strings.Contains(g.Comment, "session/load") {
		t.Fatalf("b-gemini = %+v: want restores on (by session/load, its comment says) and the default start_timeout", g)
	}
	if x, ok := c.Binding("b-codex"); !ok || x.Command != "codex-acp" || !x.KeepsSession() || x.Prices == nil || x.Prices.Output == 0 {
		t.Fatalf("b-codex = %+v: want codex-acp, resident, with prices (it reports tokens and no cost)", x)
	}
}

func TestReadyCodexBindingMatchesExample(t *testing.T) {
	b := CodexACP()
	if b.ID != "b-codex" || b.Command != "codex-acp" || !b.KeepsSession() || b.Bursts != BurstsCoalesce || b.Prices != nil {
		t.Fatalf("CodexACP = %+v", b)
	}
	c, err := Load(filepath.Join("..", "..", "deploy", "config.example.json"))
	if err != nil {
		t.Fatal(err)
	}
	if x, _ := c.Binding("b-codex"); x.Bursts != b.Bursts || x.Command != b.Command {
		t.Fatalf("the example's b-codex has bursts %q, the ready binding %q", x.Bursts, b.Bursts)
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
		{"system_file missing", func(c *Config) { c.Bindings[0].System, c.Bindings[0].SystemFile = "", "/nonexistent/framing.txt" }, `system_file: stat /nonexistent/framing.txt: no such file or directory; fix the path or use system`},
		{"negative limit", func(c *Config) { c.Bindings[0].Limits.PidsMax = -1 }, "limits must not be negative"},
		{"negative price", func(c *Config) { c.Bindings[0].Prices = &Prices{Input: 3, Output: -1} }, "prices must be 0 or more"},
		{"tiny memory", func(c *Config) { c.Bindings[0].Limits.MemoryMax = 4096 }, "limits.memory_max 4096 bytes is too small"},
		{"cpu weight", func(c *Config) { c.Bindings[0].Limits.CPUWeight = 20000 }, "limits.cpu_weight 20000 must be 1..10000"},
		{"system_file a directory", func(c *Config) { c.Bindings[0].System, c.Bindings[0].SystemFile = "", os.TempDir() }, "system_file: " + os.TempDir() + " is a directory, not a regular file"},
		{"restore method", func(c *Config) { c.Bindings[0].RestoreMethod = "replay" }, `restore_method "replay": use auto, resume or load`},
		{"scope", func(c *Config) { c.Bindings[0].Scope = "message" }, `scope "message": use channel or thread`},
		{"empty option value", func(c *Config) { c.Bindings[0].SessionOptions = map[string]string{"model": ""} }, `session_options: option "model" = ""`},
		{"budget of an unknown binding", func(c *Config) { c.Budgets.Bindings = map[string]float64{"b-nope": 5} }, `budgets: bindings: "b-nope" is not a configured binding`},
		{"zero budget", func(c *Config) { c.Budgets.Bindings = map[string]float64{"b": 0} }, `binding "b": a daily limit must be more than 0`},
		{"negative channel budget", func(c *Config) { c.Budgets.Channels = map[string]float64{"ch": -2} }, `channel "ch": a daily limit must be more than 0`},
		{"budget timezone", func(c *Config) { c.Budgets.Timezone = "Mars/Olympus" }, `budgets: timezone "Mars/Olympus"`},
		{"budget reset", func(c *Config) { c.Budgets.Reset = "25:00" }, `reset "25:00" must be a time of day`},
		{"budget warning share", func(c *Config) { c.Budgets.WarnAt = 80 }, "warn_at 80 must be a share between 0 and 1"},
		{"residency policy", func(c *Config) { c.Residency = "lru" }, `residency: residency policy "lru" is not one of cache, `},
		{"memory pressure", func(c *Config) { c.MemoryPressure = 100 }, "memory_pressure 100 must be a percentage"},
		{"tiny max memory", func(c *Config) { c.MaxMemory = 4096 }, "max_memory 4096 bytes is too small"},
		{"cache ttl", func(c *Config) { c.Bindings[0].CacheTTL = "an hour" }, `cache_ttl "an hour": use "5m", "1h"`},
		{"zero cache ttl", func(c *Config) { c.Bindings[0].CacheTTL = "0s" }, `cache_ttl "0s"`},
		{"idle compaction", func(c *Config) { c.Bindings[0].IdleCompaction = "never" }, `idle_compaction "never": use daemon, agent or off`},
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

// load reads body as a config file the way serve does: Load, then the
// defaults, then Validate.
func load(t *testing.T, body string) (*Config, error) {
	t.Helper()
	p := filepath.Join(t.TempDir(), "config.json")
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := Load(p)
	if err != nil {
		if !strings.Contains(err.Error(), p) {
			t.Errorf("Load error %q does not name the file %s", err, p)
		}
		return nil, err
	}
	c.SetDefaults()
	return c, c.Validate()
}

const oneBinding = `"bindings":[{"id":"b","handle":"@b","command":"x"}]`

// TestLoadIsStrict: a file holds one JSON object and nothing else, with
// no key twice in any object; whitespace around it is fine.
func TestLoadIsStrict(t *testing.T) {
	tests := []struct {
		name, body, want string // want "" loads
	}{
		{"one object", `{` + oneBinding + `}`, ""},
		{"whitespace around", " \n\t{" + oneBinding + "}\r\n\n", ""},
		{"one key in several objects", `{"bindings":[{"id":"a","handle":"@a","command":"x","env":{"A":"1"}},{"id":"b","handle":"@b","command":"x","env":{"A":"1"}}],"context":{"limit":3}}`, ""},
		{"trailing data", `{` + oneBinding + `} x`, "data after the config object, at byte 54 (\"x\")"},
		{"two objects", `{"max_live":2,` + oneBinding + `}{"max_live":8}`, `data after the config object, at byte 66 ("{\"max_live\":8}")`},
		{"a trailing comma", `{` + oneBinding + `},`, "data after the config object"},
		{"an array after", `{` + oneBinding + "}\n[]", "data after the config object"},
		{"null", `null`, `the file must hold one JSON object {…}; it starts with "null"`},
		{"empty", ``, "the file must hold one JSON object"},
		{"only whitespace", " \n ", "the file must hold one JSON object"},
		{"an array", `[{` + oneBinding + `}]`, "the file must hold one JSON object"},
		{"a string", `"config"`, "the file must hold one JSON object"},
		{"a key twice", `{"max_live":2,"max_live":8,` + oneBinding + `}`, `key "max_live" is given twice (at max_live); keep one`},
		{"a key twice in a binding", `{"bindings":[{"id":"b","handle":"@b","command":"x","command":"y"}]}`, `key "command" is given twice (at bindings[0].command)`},
		{"a key twice in env", `{"bindings":[{"id":"a","handle":"@a","command":"x"},{"id":"b","handle":"@b","command":"x","env":{"A":"1","A":"2"}}]}`, `key "A" is given twice (at bindings[1].env.A)`},
		{"a key twice in a section", `{"context":{"limit":3,"limit":4},` + oneBinding + `}`, `key "limit" is given twice (at context.limit)`},
		{"unknown field", `{"max_lives":3,` + oneBinding + `}`, `unknown field "max_lives"`},
		{"nested deep", `{"bindings":` + strings.Repeat("[", 100000) + strings.Repeat("]", 100000) + `}`, "exceeded max depth"},
		{"nested past the depth walked", `{"bindings":[{"id":"b","handle":"@b","command":"x","env":{"A":` + strings.Repeat("[", 70) + strings.Repeat("]", 70) + `}}]}`, "cannot unmarshal array"},
		{"duration as a number", `{"idle_timeout":30,` + oneBinding + `}`, "duration must be a string"},
		{"syntax", `{"bindings":[`, "unexpected EOF"},
		{"size", `{"bindings":[{"id":"b","handle":"@b","command":"x","limits":{"memory_max":"2T"}}]}`, `size "2T"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := load(t, tt.body)
			switch {
			case tt.want == "" && err != nil:
				t.Fatalf("load %.200s: %.300v", tt.body, err)
			case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
				t.Fatalf("load %.200s: %.300v, want an error saying %q", tt.body, err, tt.want)
			}
		})
	}
}

// TestNumbersOutOfRangeRefused: every setting that counts, sizes or times
// something refuses a negative value by name, where it used to become the
// default; the shares and bounded settings refuse what is outside them.
// 0 keeps meaning the default.
func TestNumbersOutOfRangeRefused(t *testing.T) {
	tests := []struct{ setting, want string }{
		{`"max_live":-5`, "max_live -5 must not be negative (0, or leaving it out, gives the default)"},
		{`"idle_timeout":"-30m"`, `idle_timeout "-30m0s" must not be negative`},
		{`"queue_len":-1`, "queue_len -1 must not be negative"},
		{`"queue_timeout":"-1s"`, `queue_timeout "-1s" must not be negative`},
		{`"agent_grace":"-5s"`, `agent_grace "-5s" must not be negative`},
		{`"yield_after":-4`, "yield_after -4 must not be negative"},
		{`"restore_failures":-3`, "restore_failures -3 must not be negative"},
		{`"restore_timeout":"-1m"`, `restore_timeout "-1m0s" must not be negative`},
		{`"background_limit":"-2h"`, `background_limit "-2h0m0s" must not be negative`},
		{`"agent_cancel_grace":"-1ms"`, `agent_cancel_grace "-1ms" must not be negative`},
		{`"max_processes":-1`, "max_processes -1 must not be negative"},
		{`"max_live":6,"max_processes":5`, "max_processes 5 is below max_live 6"},
		{`"context":{"fetch":-1}`, "context.fetch -1 must not be negative"},
		{`"context":{"limit":-12}`, "context.limit -12 must not be negative"},
		{`"context":{"max_chars":-600}`, "context.max_chars -600 must not be negative"},
		{`"context":{"max_ids":-200}`, "context.max_ids -200 must not be negative"},
		{`"runs":{"events":-1}`, "runs.events -1 must not be negative"},
		{`"runs":{"bytes":-1}`, "runs.bytes -1 must not be negative"},
		{`"runs":{"retention":"-15m"}`, `runs.retention "-15m0s" must not be negative`},
		{`"runs":{"ended":-256}`, "runs.ended -256 must not be negative"},
		{`"runs":{"keepalive":"-15s"}`, `runs.keepalive "-15s" must not be negative`},
		{`"runs":{"pending_permissions":-16}`, "runs.pending_permissions -16 must not be negative"},
		{`"attachments":{"max_bytes":-1}`, "attachments.max_bytes -1 must not be negative"},
		{`"attachments":{"max_per_message":-16}`, "attachments.max_per_message -16 must not be negative"},
		{`"attachments":{"max_per_push":-64}`, "attachments.max_per_push -64 must not be negative"},
		{`"budgets":{"warn_at":-0.5}`, "warn_at -0.5 must be a share between 0 and 1"},
		{`"budgets":{"warn_at":1}`, "warn_at 1 must be a share between 0 and 1"},
		{`"budgets":{"warn_at":1.5}`, "warn_at 1.5 must be a share between 0 and 1"},
		{`"budgets":{"channel_default":-5}`, "channel_default -5 must not be negative"},
		{`"budgets":{"bindings":{"b":-1}}`, `binding "b": a daily limit must be more than 0`},
		{`"max_memory":-1`, "max_memory -1 must not be negative"},
		{`"memory_pressure":-5`, "memory_pressure -5 must be a percentage"},
	}
	bindingTests := []struct{ field, want string }{
		{`"brief_every":-10`, `binding "b": brief_every -10 must not be negative`},
		{`"turn_timeout":"-10m"`, `binding "b": turn_timeout "-10m0s" must not be negative`},
		{`"permission_timeout":"-5m"`, `binding "b": permission_timeout "-5m0s" must not be negative`},
		{`"start_timeout":"-90s"`, `binding "b": start_timeout "-1m30s" must not be negative`},
		{`"spare":-1`, `binding "b": spare -1 must be 0 to 2`},
		{`"spare":3`, `binding "b": spare 3 must be 0 to 2`},
		{`"limits":{"pids_max":-1}`, "limits must not be negative"},
		{`"limits":{"memory_max":-1}`, "limits must not be negative"},
		{`"limits":{"cpu_weight":-1}`, "limits.cpu_weight -1 must be 1..10000"},
		{`"limits":{"nofile":-1}`, "cannot unmarshal number -1"},
		{`"prices":{"input":-3}`, "prices must be 0 or more"},
		{`"prices":{"cache_write_1h":-6}`, "prices must be 0 or more"},
	}
	for _, bt := range bindingTests {
		tests = append(tests, struct{ setting, want string }{`"bindings":[{"id":"b","handle":"@b","command":"x",` + bt.field + `}]`, bt.want})
	}
	for _, tt := range tests {
		t.Run(tt.setting, func(t *testing.T) {
			body := `{` + tt.setting + `,` + oneBinding + `}`
			if strings.HasPrefix(tt.setting, `"bindings"`) {
				body = `{` + tt.setting + `}`
			}
			_, err := load(t, body)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("load %s: %v, want an error saying %q", body, err, tt.want)
			}
		})
	}
}

// TestZeroMeansTheDefault: a file that gives every number as 0 runs with
// the defaults of a file that gives none.
func TestZeroMeansTheDefault(t *testing.T) {
	zeros := `{"max_live":0,"idle_timeout":"0s","queue_len":0,"queue_timeout":"0s","agent_grace":"0s","yield_after":0,
		"restore_failures":0,"restore_timeout":"0s","background_limit":"0s","agent_cancel_grace":"0s","max_processes":0,
		"context":{"fetch":0,"limit":0,"max_chars":0,"max_ids":0},
		"runs":{"events":0,"bytes":0,"retention":"0s","ended":0,"keepalive":"0s","pending_permissions":0},
		"attachments":{"max_bytes":0,"max_per_message":0,"max_per_push":0},"budgets":{"warn_at":0},
		"bindings":[{"id":"b","handle":"@b","command":"x","brief_every":0,"turn_timeout":"0s","permission_timeout":"0s","start_timeout":"0s"}]}`
	got, err := load(t, zeros)
	if err != nil {
		t.Fatal(err)
	}
	want, err := load(t, `{`+oneBinding+`}`)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("zeros load as\n%+v\nnone as\n%+v", got, want)
	}
	if a := got.Attachments; a.MaxBytes != DefaultAttachmentMaxBytes || a.MaxPerMessage != 16 || a.MaxPerPush != 64 {
		t.Fatalf("attachment defaults %+v", a)
	}
}

// special makes one of each file that is not a regular one, in a
// directory short enough for a socket's path, by name.
func special(t *testing.T) map[string]string {
	t.Helper()
	dir, err := os.MkdirTemp("", "rc")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	fifo, sock, sub := filepath.Join(dir, "fifo"), filepath.Join(dir, "sock"), filepath.Join(dir, "dir")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	if err := os.Mkdir(sub, 0o700); err != nil {
		t.Fatal(err)
	}
	return map[string]string{
		"a FIFO (named pipe)": fifo, "a Unix socket": sock, "a character device": "/dev/zero", "a directory": sub,
	}
}

// TestSpecialFilesRefused: a config file, and a system_file, that is a
// FIFO, a socket, a device or a directory is refused at once, saying
// what it is; a FIFO does not block the read (this test would hang).
func TestSpecialFilesRefused(t *testing.T) {
	for what, p := range special(t) {
		t.Run(what, func(t *testing.T) {
			want := p + " is " + what + ", not a regular file"
			if _, err := Load(p); err == nil || err.Error() != "config: "+want {
				t.Errorf("Load(%s) = %v, want %q", p, err, "config: "+want)
			}
			b := Binding{ID: "b", Handle: "@b", Command: "x", SystemFile: p}
			c := &Config{Bindings: []Binding{b}}
			c.SetDefaults()
			if err := c.Validate(); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), `binding "b": system_file: `+want+"; fix the path or use system") {
				t.Errorf("Validate: %v, want the system_file refused as %s", err, what)
			}
			if _, err := b.Framing(); !errors.Is(err, regfile.ErrNotRegular) || !strings.Contains(err.Error(), want) {
				t.Errorf("Framing: %v, want %q", err, want)
			}
		})
	}
	big := filepath.Join(t.TempDir(), "big.txt")
	if err := os.WriteFile(big, make([]byte, MaxFileBytes+1), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(big); !errors.Is(err, regfile.ErrTooLarge) {
		t.Errorf("Load of %d bytes: %v", MaxFileBytes+1, err)
	}
	if _, err := (Binding{ID: "b", SystemFile: big}).Framing(); !errors.Is(err, regfile.ErrTooLarge) {
		t.Errorf("Framing of %d bytes: %v", MaxFileBytes+1, err)
	}
}

// TestBindingTTL: cache_ttl wins; unset, the TTL claude-agent-acp's CLI
// takes from the binding's env, in the CLI's order; auto is the daemon's
// choice, from 5 minutes.
func TestBindingTTL(t *testing.T) {
	for _, tt := range []struct {
		b    Binding
		want time.Duration
		auto bool
	}{
		{Binding{}, 5 * time.Minute, false},
		{Binding{CacheTTL: "3s"}, 3 * time.Second, false},
		{Binding{CacheTTL: "1h", Env: map[string]string{"FORCE_PROMPT_CACHING_5M": "1"}}, time.Hour, false},
		{Binding{CacheTTL: "auto"}, 5 * time.Minute, true},
		{Binding{Env: map[string]string{"ENABLE_PROMPT_CACHING_1H": "1"}}, time.Hour, false},
		{Binding{Env: map[string]string{"ENABLE_PROMPT_CACHING_1H": "0"}}, 5 * time.Minute, false},
		{Binding{Env: map[string]string{"ENABLE_PROMPT_CACHING_1H": "true", "FORCE_PROMPT_CACHING_5M": "yes"}}, 5 * time.Minute, false},
		{Binding{Env: map[string]string{"CLAUDE_CODE_PROMPT_CACHE_TTL": "1h"}}, time.Hour, false},
		{ClaudeAgentACP(), time.Hour, false},
	} {
		if got, auto := tt.b.TTL(); got != tt.want || auto != tt.auto {
			t.Errorf("TTL of %+v = %s %v, want %s %v", tt.b, got, auto, tt.want, tt.auto)
		}
	}
}
