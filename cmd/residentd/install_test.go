package main

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/residentd/residentd/internal/service"
)

// linesWith returns the second word of each output line starting with verb.
func linesWith(out, verb string) []string {
	var paths []string
	for line := range strings.SplitSeq(out, "\n") {
		if p, ok := strings.CutPrefix(line, verb+" "); ok {
			paths = append(paths, p)
		}
	}
	return paths
}

// fakeSystemctl puts a systemctl on PATH that appends its arguments, and
// whether the service unit file existed at the time, to a log; it exits
// with code. It returns the log's path.
func fakeSystemctl(t *testing.T, code int, output string) string {
	t.Helper()
	bin := t.TempDir()
	log := filepath.Join(t.TempDir(), "systemctl.log")
	script := `#!/bin/sh
unit="${XDG_CONFIG_HOME:-$HOME/.config}/systemd/user/residentd.service"
if [ -e "$unit" ]; then has=unit; else has=nounit; fi
echo "$* [$has]" >> "` + log + `"
printf '%s' '` + output + `'
exit ` + string(rune('0'+code)) + `
`
	if err := os.WriteFile(filepath.Join(bin, "systemctl"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", bin+string(filepath.ListSeparator)+os.Getenv("PATH"))
	return log
}

func readLog(t *testing.T, p string) []string {
	t.Helper()
	b, err := os.ReadFile(p)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	return strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
}

// userEnv gives the test a home and config home of its own.
func userEnv(t *testing.T) (home, cfgHome string) {
	t.Helper()
	home = t.TempDir()
	cfgHome = filepath.Join(t.TempDir(), "xdg-config")
	t.Setenv("HOME", home)
	t.Setenv("XDG_CONFIG_HOME", cfgHome)
	return home, cfgHome
}

func TestInstallAndUninstallUser(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the systemd install is Linux's")
	}
	home, cfgHome := userEnv(t)
	log := fakeSystemctl(t, 0, "")
	state := t.TempDir()
	// The config's one agent is found only on the PATH install records.
	agentDir := t.TempDir()
	if err := os.WriteFile(filepath.Join(agentDir, "fake-agent"), []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", os.Getenv("PATH")+string(filepath.ListSeparator)+agentDir+string(filepath.ListSeparator)+"relative/bin")
	cfgDir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(cfgDir, "rel"), 0o755); err != nil {
		t.Fatal(err)
	}
	cfg := `{"bindings": [{"id": "b-fake", "handle": "@fake", "command": "fake-agent"}]}`
	if err := os.WriteFile(filepath.Join(cfgDir, "rel", "config.json"), []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Chdir(cfgDir)

	var out bytes.Buffer
	if err := execCommand("install", []string{"--user", "--state", state, "--config", "rel/config.json"}, &out); err != nil {
		t.Fatalf("install: %v\n%s", err, out.String())
	}
	written := linesWith(out.String(), "wrote")
	unitDir := filepath.Join(cfgHome, "systemd", "user")
	if len(written) != 2 || filepath.Dir(written[0]) != unitDir {
		t.Fatalf("install wrote %q, want the units in %s:\n%s", written, unitDir, out.String())
	}
	// The test binary lives in the build cache's temporary tree: install
	// copies it to ~/.local/bin and the unit runs the copy.
	copied := filepath.Join(home, ".local", "bin", "residentd")
	if fi, err := os.Stat(copied); err != nil || fi.Mode().Perm()&0o111 == 0 {
		t.Fatalf("no executable copy at %s (%v):\n%s", copied, err, out.String())
	}
	if !strings.Contains(out.String(), "copied ") || !strings.Contains(out.String(), "does not last") {
		t.Errorf("install does not say it copied the binary:\n%s", out.String())
	}
	unit, err := os.ReadFile(written[0])
	if err != nil {
		t.Fatal(err)
	}
	wantPath, _ := service.CleanPath(os.Getenv("PATH"))
	if !strings.HasSuffix(wantPath, ":"+agentDir) {
		t.Fatalf("the recorded PATH %q lacks the agent's directory", wantPath)
	}
	for _, want := range []string{
		"ExecStart=" + copied + " serve --config " + filepath.Join(cfgDir, "rel", "config.json") + " --state " + state + " --metrics-addr 127.0.0.1:9464",
		"Environment=PATH=" + wantPath,
	} {
		if !strings.Contains(string(unit), "\n"+want+"\n") {
			t.Errorf("%s lacks the line %q:\n%s", written[0], want, unit)
		}
	}
	for _, want := range []string{"service PATH", wantPath, "left out of the service's PATH", "relative/bin",
		"systemctl --user daemon-reload && systemctl --user enable --now residentd.socket residentd.service",
		"journalctl --user -u residentd"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("install output lacks %q:\n%s", want, out.String())
		}
	}
	if got := readLog(t, log); strings.Join(got, "\n") != "--user show-environment [unit]" {
		t.Errorf("install ran systemctl %q, want one show-environment", got)
	}

	// Uninstall stops and disables the units while their files still exist,
	// then removes them and reloads.
	os.Remove(log)
	out.Reset()
	if err := execCommand("uninstall", []string{"--user"}, &out); err != nil {
		t.Fatalf("uninstall: %v\n%s", err, out.String())
	}
	want := []string{"--user show-environment [unit]", "--user disable --now residentd.socket residentd.service [unit]", "--user daemon-reload [nounit]"}
	if got := readLog(t, log); strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("uninstall ran systemctl\n%q\nwant\n%q", got, want)
	}
	removed := linesWith(out.String(), "removed")
	if strings.Join(removed, "\n") != strings.Join(written, "\n") {
		t.Errorf("removed %q, wrote %q", removed, written)
	}
	for _, p := range written {
		if _, err := os.Stat(p); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s still there after uninstall (%v)", p, err)
		}
	}
	os.Remove(log)
	out.Reset()
	if err := execCommand("uninstall", nil, &out); err != nil || !strings.Contains(out.String(), "nothing to remove") {
		t.Errorf("second uninstall: %v\n%s", err, out.String())
	}
	if got := readLog(t, log); len(got) != 0 {
		t.Errorf("uninstall with nothing installed ran systemctl %q", got)
	}
}

// Without a user manager install says what to do instead of how to enable.
func TestInstallWithoutUserManager(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the systemd install is Linux's")
	}
	userEnv(t)
	log := fakeSystemctl(t, 1, "Failed to connect to bus: No medium found")
	var out bytes.Buffer
	if err := execCommand("install", []string{"--metrics-addr", ""}, &out); err != nil {
		t.Fatalf("install: %v\n%s", err, out.String())
	}
	if len(linesWith(out.String(), "wrote")) != 2 {
		t.Errorf("install did not write the units:\n%s", out.String())
	}
	for _, want := range []string{"No medium found", "no user service manager", "loginctl enable-linger", "in the foreground"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("install output lacks %q:\n%s", want, out.String())
		}
	}
	if strings.Contains(out.String(), "enable --now") || strings.Contains(out.String(), "journalctl") {
		t.Errorf("install prints enable instructions no manager can follow:\n%s", out.String())
	}
	if got := readLog(t, log); len(got) != 1 || !strings.HasPrefix(got[0], "--user show-environment") {
		t.Errorf("install ran systemctl %q", got)
	}
}

// An install whose service would not start, or not find its agents, is
// refused before anything is written, saying what to do.
func TestInstallChecksConfig(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the systemd install is Linux's")
	}
	_, cfgHome := userEnv(t)
	fakeSystemctl(t, 0, "")
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	for _, tc := range []struct {
		name string
		args []string
		want []string
	}{
		{"missing", []string{"--config", filepath.Join(dir, "none.json")}, []string{"none.json", "no such file", "deploy/config.example.json"}},
		{"not JSON", []string{"--config", write("bad.json", "{bindings")}, []string{"bad.json", "fix it"}},
		{"unknown field", []string{"--config", write("unknown.json", `{"bindingz": []}`)}, []string{"bindingz"}},
		{"command not on PATH", []string{"--config", write("agent.json", `{"bindings": [{"id": "b-x", "handle": "@x", "command": "no-such-agent-here"}]}`)},
			[]string{`binding "b-x"`, `"no-such-agent-here" is not on the service's PATH`, "PATH=", "absolute path"}},
		{"absolute command missing", []string{"--config", write("abs.json", `{"bindings": [{"id": "b-y", "handle": "@y", "command": "/nonexistent/agent"}]}`)},
			[]string{`binding "b-y"`, "/nonexistent/agent is not an executable"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out bytes.Buffer
			err := execCommand("install", tc.args, &out)
			if !errors.Is(err, errInstallCheck) {
				t.Fatalf("err %v, want an install check error\n%s", err, out.String())
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
			if _, err := os.Stat(filepath.Join(cfgHome, "systemd")); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("a refused install wrote units (%v)", err)
			}
		})
	}

	// $XDG_CONFIG_HOME/residentd/config.json is the default config.
	if err := os.MkdirAll(filepath.Join(cfgHome, "residentd"), 0o755); err != nil {
		t.Fatal(err)
	}
	def := filepath.Join(cfgHome, "residentd", "config.json")
	if err := os.WriteFile(def, []byte(`{"max_live": 2, "bindings": []}`), 0o600); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := execCommand("install", nil, &out); err != nil {
		t.Fatalf("install with the default config: %v\n%s", err, out.String())
	}
	if !strings.Contains(out.String(), "using config "+def) || !strings.Contains(out.String(), "--config "+def) {
		t.Errorf("install did not pick up %s:\n%s", def, out.String())
	}
}

func TestInstallRejectsBadInput(t *testing.T) {
	home, _ := userEnv(t)
	fakeSystemctl(t, 0, "")
	for _, args := range [][]string{
		{"--user=false"},
		{"--binary", filepath.Join(t.TempDir(), "missing")},
		{"--binary", t.TempDir()},
		{"extra"},
	} {
		var out bytes.Buffer
		if err := execCommand("install", args, &out); !errors.Is(err, errUsage) {
			t.Errorf("install %q: err %v, want a usage error", args, err)
		}
	}
	if files, _ := filepath.Glob(filepath.Join(home, "*")); len(files) != 0 {
		t.Errorf("a refused install wrote %q", files)
	}
}

func TestTransientDir(t *testing.T) {
	t.Setenv("GOCACHE", "/home/u/.cache/go-build")
	for exe, transient := range map[string]bool{
		"/home/u/.cache/go-build/ab/exe/residentd":         true,
		"/srv/tmp/go-build123/b001/exe/residentd":          true,
		filepath.Join(os.TempDir(), "x", "residentd"):      true,
		"/home/u/.local/bin/residentd":                     false,
		"/usr/local/bin/residentd":                         false,
		filepath.Join(os.TempDir()+"-not", "residentd"):    false,
		"/home/u/.cache/go-buildish-not-a-cache/residentd": true, // a /go-build path is taken for one
	} {
		if got := transientDir(t.Context(), exe) != ""; got != transient {
			t.Errorf("transientDir(%q) says transient=%v, want %v", exe, got, transient)
		}
	}
}
