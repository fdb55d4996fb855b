package main

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
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

func TestInstallAndUninstallUser(t *testing.T) {
	home := t.TempDir()
	t.Setenv("HOME", home)
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	state := t.TempDir()

	var out bytes.Buffer
	if err := cmdInstall([]string{"--user", "--state", state, "--config", "rel/config.json"}, &out, false); err != nil {
		t.Fatalf("install: %v\n%s", err, out.String())
	}
	written := linesWith(out.String(), "wrote")
	if len(written) == 0 {
		t.Fatalf("install printed no written files:\n%s", out.String())
	}
	wd, _ := os.Getwd()
	for _, p := range written {
		if !strings.HasPrefix(p, home+string(filepath.Separator)) {
			t.Errorf("wrote %s outside $HOME", p)
		}
	}
	unit, err := os.ReadFile(written[0])
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{self, "serve", "--state " + state, "--config " + filepath.Join(wd, "rel", "config.json"), "--metrics-addr 127.0.0.1:9464"} {
		if !strings.Contains(string(unit), want) {
			t.Errorf("%s lacks %q:\n%s", written[0], want, unit)
		}
	}
	switch runtime.GOOS {
	case "linux":
		if !strings.Contains(out.String(), "systemctl --user daemon-reload && systemctl --user enable --now residentd.socket residentd.service") ||
			!strings.Contains(out.String(), "journalctl --user -u residentd") {
			t.Errorf("install does not say what to run next:\n%s", out.String())
		}
	case "darwin":
		if !strings.Contains(out.String(), "launchctl bootstrap gui/$(id -u) ") || !strings.Contains(out.String(), "RESIDENTD_SOCKET=") {
			t.Errorf("install does not say what to run next:\n%s", out.String())
		}
	}

	out.Reset()
	if err := cmdInstall([]string{"--user"}, &out, true); err != nil {
		t.Fatalf("uninstall: %v", err)
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
	out.Reset()
	if err := cmdInstall(nil, &out, true); err != nil || !strings.Contains(out.String(), "nothing to remove") {
		t.Errorf("second uninstall: %v\n%s", err, out.String())
	}
}

func TestInstallRejectsBadInput(t *testing.T) {
	t.Setenv("HOME", t.TempDir())
	for _, args := range [][]string{
		{"--user=false"},
		{"--binary", filepath.Join(t.TempDir(), "missing")},
		{"--binary", t.TempDir()},
		{"extra"},
	} {
		var out bytes.Buffer
		if err := cmdInstall(args, &out, false); !errors.Is(err, errUsage) {
			t.Errorf("install %q: err %v, want a usage error", args, err)
		}
	}
	if files, _ := filepath.Glob(filepath.Join(os.Getenv("HOME"), "*")); len(files) != 0 {
		t.Errorf("a refused install wrote %q", files)
	}
}
