package config

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// jsonBlock is a fenced JSON example of a markdown file.
var jsonBlock = regexp.MustCompile("(?s)```json\n(.*?)```")

// TestDocConfigExamplesLoad: every JSON example in the docs that is a
// config file ({"bindings":…}) or one binding ({"id":…}) loads and
// validates as serve would load it, so a documented field cannot be
// misspelled or outdated.
func TestDocConfigExamplesLoad(t *testing.T) {
	files, err := filepath.Glob("../../docs/*.md")
	if err != nil {
		t.Fatal(err)
	}
	files = append(files, "../../README.md")
	n := 0
	for _, f := range files {
		raw, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range jsonBlock.FindAllStringSubmatch(string(raw), -1) {
			body := strings.TrimSpace(m[1])
			switch {
			case strings.HasPrefix(body, `{"id":`):
				body = `{"bindings":[` + body + `]}`
			case strings.HasPrefix(body, "{") && strings.Contains(body, `"bindings":`) && strings.Contains(body, `"command":`):
			default:
				continue // a request, response or event, not a config
			}
			n++
			path := filepath.Join(t.TempDir(), "config.json")
			if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
				t.Fatal(err)
			}
			c, err := Load(path)
			if err == nil {
				c.SetDefaults()
				err = c.Validate()
			}
			if err != nil {
				t.Errorf("%s: the example\n%s\ndoes not load: %v", filepath.Base(f), body, err)
			}
		}
	}
	if n == 0 {
		t.Fatal("no config examples found in the docs")
	}
	t.Logf("%d config examples load", n)
}
