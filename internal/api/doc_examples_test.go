package api

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"github.com/residentd/residentd/internal/config"
	"github.com/residentd/residentd/internal/daemontest"
	"github.com/residentd/residentd/internal/testkit"
)

// docExample is one curl command of docs/API.md and the status the doc
// says it answers with (the "# 200" that ends its last line).
type docExample struct {
	line   int // where the command starts in the file, 1-based
	cmd    string
	status int
}

// statusMark ends an example: "# 200", optionally with words after it.
var statusMark = regexp.MustCompile(`\s#\s*(\d{3})\b[^'"]*$`)

// docExamples returns the commands of the ```sh blocks of doc, in order.
// Every line of such a block is a curl command (a trailing backslash joins
// the next line), a comment or blank: anything else is an error, so no
// example is skipped silently.
func docExamples(doc string) ([]docExample, error) {
	var out []docExample
	var cur *docExample
	inSh := false
	for i, l := range strings.Split(doc, "\n") {
		switch {
		case !inSh && strings.HasPrefix(l, "```sh"):
			inSh = true
			continue
		case inSh && strings.HasPrefix(l, "```"):
			if cur != nil {
				return nil, fmt.Errorf("docs/API.md:%d: the block ends inside a command", i+1)
			}
			inSh = false
			continue
		case !inSh:
			continue
		}
		t := strings.TrimSpace(l)
		if cur == nil {
			if t == "" || strings.HasPrefix(t, "#") {
				continue
			}
			if !strings.HasPrefix(t, "curl ") {
				return nil, fmt.Errorf("docs/API.md:%d: %q is not a curl command; the doc test runs only those", i+1, t)
			}
			cur = &docExample{line: i + 1}
		}
		if cur.cmd != "" {
			cur.cmd += "\n"
		}
		cur.cmd += l
		if strings.HasSuffix(l, "\\") {
			continue
		}
		m := statusMark.FindStringSubmatch(l)
		if m == nil {
			return nil, fmt.Errorf("docs/API.md:%d: the example does not end with the status it answers (\"# 200\")", cur.line)
		}
		cur.status, _ = strconv.Atoi(m[1])
		out = append(out, *cur)
		cur = nil
	}
	if inSh {
		return nil, errors.New("docs/API.md: a ```sh block is not closed")
	}
	return out, nil
}

// docConfig is the config file the examples' daemon is started with: the
// first json block of the section "The examples".
func docConfig(doc string) (string, error) {
	_, section, ok := strings.Cut(doc, "\n## The examples\n")
	if !ok {
		return "", errors.New(`docs/API.md has no section "The examples"`)
	}
	section, _, _ = strings.Cut(section, "\n## ")
	_, block, ok := strings.Cut(section, "```json\n")
	if !ok {
		return "", errors.New(`docs/API.md: "The examples" shows no json config`)
	}
	block, _, _ = strings.Cut(block, "```")
	return block, nil
}

// docDaemon is the daemon the examples run against, started as they say
// (residentd serve --config ask.json): the config file is the doc's, read
// as serve reads it, with the built-in binding b-builtin beside its
// bindings, and reloadable. The doc's bindings run `residentd agent`: a
// residentd on PATH that is the test binary as the built-in agent.
func docDaemon(t *testing.T, conf string) (sock string) {
	t.Helper()
	dir := t.TempDir()
	bin := filepath.Join(dir, "bin")
	if err := os.Mkdir(bin, 0o700); err != nil {
		t.Fatal(err)
	}
	script := fmt.Sprintf("#!/bin/sh\n%s=1 exec %q \"$@\"\n", testkit.AgentEnv, testkit.Exe(t))
	if err := os.WriteFile(filepath.Join(bin, "residentd"), []byte(script), 0o700); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", bin+string(os.PathListSeparator)+os.Getenv("PATH"))
	file := filepath.Join(dir, "ask.json")
	if err := os.WriteFile(file, []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	state := filepath.Join(dir, "state")
	fromFile := daemontest.FileLoader(file, state)
	load := func() (*config.Config, error) {
		c, err := fromFile()
		if err != nil {
			return nil, err
		}
		if _, ok := c.Binding("b-builtin"); !ok {
			b, err := daemontest.Builtin("b-builtin", state)
			if err != nil {
				return nil, err
			}
			c.Bindings = append(c.Bindings, b)
		}
		c.SetDefaults()
		return c, c.Validate()
	}
	cfg, err := load()
	if err != nil {
		t.Fatalf("the examples' config from docs/API.md: %v", err)
	}
	log := zaptest.NewLogger(t, zaptest.Level(zap.ErrorLevel))
	h := daemontest.New(t, cfg, daemontest.Options{Log: log, Reload: load, ConfigFile: file})
	level := zap.NewAtomicLevel()
	_, sock = serve(t, filepath.Join("s", "api.sock"), ServerOptions{Turns: h, Sessions: h, Channel: h.Inbox, Log: log, Level: &level,
		Metrics: h.Metrics.Handler(), Version: "test", Keepalive: time.Duration(cfg.Runs.Keepalive), Config: h.Daemon})
	return sock
}

// TestAPIDocExamplesRun runs the curl examples of docs/API.md in order,
// verbatim, with sh and S naming the socket of a daemon started with the
// doc's config file, and checks each answers with the status the doc gives
// it, one right after the other as a person pasting them would: nothing
// waits between them but what the doc shows. The examples chain: the turn
// examples name their run_id and the later ones use it.
func TestAPIDocExamplesRun(t *testing.T) {
	raw := testkit.ReadFile(t, "../../docs/API.md")
	examples, err := docExamples(string(raw))
	if err != nil {
		t.Fatal(err)
	}
	if len(examples) == 0 {
		t.Fatal("docs/API.md has no curl examples")
	}
	for _, tool := range []string{"sh", "curl"} {
		if _, err := exec.LookPath(tool); err != nil {
			if os.Getenv("CI") == "true" {
				t.Fatalf("%s is not installed; CI runs every example of docs/API.md: %v", tool, err)
			}
			t.Skipf("%s is not installed, so the %d examples of docs/API.md cannot run (CI requires it): %v", tool, len(examples), err)
		}
	}

	conf, err := docConfig(string(raw))
	if err != nil {
		t.Fatal(err)
	}
	sock := docDaemon(t, conf)
	// curl reads its config from CURL_HOME: the status goes to stderr, so
	// the command runs as written and its output stays what the doc shows.
	curlHome := t.TempDir()
	if err := os.WriteFile(filepath.Join(curlHome, ".curlrc"), []byte("write-out = \"%{stderr}doc-status %{http_code}\\n\"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	env := append(os.Environ(), "S="+sock, "CURL_HOME="+curlHome)

	for _, ex := range examples {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		cmd := exec.CommandContext(ctx, "sh", "-c", ex.cmd)
		cmd.Env = env
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err := cmd.Run()
		cancel()
		got := -1
		sc := bufio.NewScanner(&stderr)
		var other []string
		for sc.Scan() {
			if v, ok := strings.CutPrefix(sc.Text(), "doc-status "); ok {
				got, _ = strconv.Atoi(v)
			} else {
				other = append(other, sc.Text())
			}
		}
		if err != nil || got != ex.status {
			t.Fatalf("docs/API.md:%d:\n%s\nstatus %d, the doc says %d; exit: %v\nstdout: %s\nstderr: %s",
				ex.line, ex.cmd, got, ex.status, err, stdout.Bytes(), strings.Join(other, "\n"))
		}
	}
	t.Logf("ran %d examples of docs/API.md", len(examples))
}
