package service

import (
	"bytes"
	"encoding/xml"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// The embedded templates must be the files shipped in the repository.
func TestTemplatesMatchRepository(t *testing.T) {
	for embedded, repo := range map[string]string{
		"templates/residentd.service":   "../../systemd/residentd.service",
		"templates/residentd.socket":    "../../systemd/residentd.socket",
		"templates/dev.residentd.plist": "../../deploy/launchd/dev.residentd.plist",
	} {
		e, err := templates.ReadFile(embedded)
		if err != nil {
			t.Fatal(err)
		}
		r, err := os.ReadFile(repo)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(e, r) {
			t.Errorf("%s differs from %s: copy the repository file over the embedded one", embedded, repo)
		}
	}
}

func readFile(t *testing.T, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestInstallLinux(t *testing.T) {
	home := t.TempDir()
	o := InstallOptions{
		Binary: "/opt/resident d/bin/residentd", Config: "/etc/residentd/config.json",
		StateDir: "/var/lib/100%/state", MetricsAddr: "127.0.0.1:9464", Home: home, GOOS: "linux",
	}
	written, next, err := Install(o)
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(home, ".config", "systemd", "user")
	want := []string{filepath.Join(dir, "residentd.service"), filepath.Join(dir, "residentd.socket")}
	if !slices.Equal(written, want) {
		t.Errorf("written = %q, want %q", written, want)
	}
	if next != "systemctl --user daemon-reload && systemctl --user enable --now residentd.socket residentd.service" {
		t.Errorf("next = %q", next)
	}
	svc := readFile(t, want[0])
	for _, line := range []string{
		`ExecStart="/opt/resident d/bin/residentd" serve --config /etc/residentd/config.json --state /var/lib/100%%/state --metrics-addr 127.0.0.1:9464`,
		"Type=notify", "NotifyAccess=main", "WatchdogSec=30s", "KillMode=mixed", "TimeoutStopSec=20s",
		"Restart=on-failure", "RuntimeDirectory=residentd", "StateDirectory=residentd", "UMask=0077",
		"NoNewPrivileges=yes",
	} {
		if !hasLine(svc, line) {
			t.Errorf("service unit lacks line %q", line)
		}
	}
	for _, l := range strings.Split(svc, "\n") {
		for _, banned := range []string{"MemoryDenyWriteExecute=", "PrivateTmp=", "ProtectSystem=", "ExecStart=%h"} {
			if strings.HasPrefix(l, banned) {
				t.Errorf("service unit sets %q", l)
			}
		}
	}
	sock := readFile(t, want[1])
	if !hasLine(sock, "ListenStream=%t/residentd/residentd.sock") || !hasLine(sock, "SocketMode=0600") {
		t.Errorf("socket unit:\n%s", sock)
	}

	// Simulate `systemctl enable`, then uninstall removes units and links.
	for _, l := range []struct{ wants, unit string }{{"default.target.wants", "residentd.service"}, {"sockets.target.wants", "residentd.socket"}} {
		os.MkdirAll(filepath.Join(dir, l.wants), 0o755)
		if err := os.Symlink(filepath.Join(dir, l.unit), filepath.Join(dir, l.wants, l.unit)); err != nil {
			t.Fatal(err)
		}
	}
	removed, next, err := Uninstall(InstallOptions{Home: home, GOOS: "linux"})
	if err != nil {
		t.Fatal(err)
	}
	if len(removed) != 4 {
		t.Errorf("removed %q, want the 2 units and 2 links", removed)
	}
	if !strings.Contains(next, "systemctl --user stop residentd.socket residentd.service") {
		t.Errorf("uninstall next = %q", next)
	}
	left, _ := filepath.Glob(filepath.Join(dir, "*", "residentd.*"))
	left2, _ := filepath.Glob(filepath.Join(dir, "residentd.*"))
	if len(left)+len(left2) != 0 {
		t.Errorf("left behind: %q %q", left, left2)
	}
	// Idempotent.
	if removed, _, err := Uninstall(InstallOptions{Home: home, GOOS: "linux"}); err != nil || len(removed) != 0 {
		t.Errorf("second uninstall: %q, %v", removed, err)
	}
}

func TestInstallLinuxSocketOverride(t *testing.T) {
	home := t.TempDir()
	written, _, err := Install(InstallOptions{Binary: "/usr/bin/residentd", SocketPath: "/run/x/r.sock", Home: home, GOOS: "linux"})
	if err != nil {
		t.Fatal(err)
	}
	if sock := readFile(t, written[1]); !hasLine(sock, "ListenStream=/run/x/r.sock") {
		t.Errorf("socket unit:\n%s", sock)
	}
	if svc := readFile(t, written[0]); !hasLine(svc, "ExecStart=/usr/bin/residentd serve") {
		t.Errorf("service unit:\n%s", svc)
	}
}

func hasLine(text, line string) bool {
	return slices.Contains(strings.Split(text, "\n"), line)
}

// plistNode is a generic plist element: key/string/true/false/integer/dict/array.
type plistNode struct {
	XMLName  xml.Name
	Text     string      `xml:",chardata"`
	Children []plistNode `xml:",any"`
}

// decodePlist turns a <dict> into a Go map of key -> value node.
func dictOf(t *testing.T, n plistNode) map[string]plistNode {
	t.Helper()
	if n.XMLName.Local != "dict" {
		t.Fatalf("want dict, got %s", n.XMLName.Local)
	}
	m := map[string]plistNode{}
	for i := 0; i+1 < len(n.Children); i += 2 {
		if n.Children[i].XMLName.Local != "key" {
			t.Fatalf("dict entry %d is %s, want key", i, n.Children[i].XMLName.Local)
		}
		m[n.Children[i].Text] = n.Children[i+1]
	}
	if len(n.Children)%2 != 0 {
		t.Fatal("dict with a key and no value")
	}
	return m
}

func TestInstallDarwin(t *testing.T) {
	home := t.TempDir()
	o := InstallOptions{Binary: "/Users/a&b/bin/residentd", Config: "/Users/a&b/.config/residentd.json", MetricsAddr: "127.0.0.1:9464", Home: home, GOOS: "darwin"}
	written, next, err := Install(o)
	if err != nil {
		t.Fatal(err)
	}
	plist := filepath.Join(home, "Library", "LaunchAgents", "dev.residentd.plist")
	if !slices.Equal(written, []string{plist}) {
		t.Fatalf("written = %q", written)
	}
	if next != "launchctl bootstrap gui/$(id -u) "+plist {
		t.Errorf("next = %q", next)
	}
	data, err := os.ReadFile(plist)
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		XMLName xml.Name    `xml:"plist"`
		Dict    []plistNode `xml:",any"`
	}
	dec := xml.NewDecoder(bytes.NewReader(data))
	dec.Strict = true
	if err := dec.Decode(&doc); err != nil {
		t.Fatalf("rendered plist does not parse: %v\n%s", err, data)
	}
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			break
		}
		if cd, ok := tok.(xml.CharData); err != nil || !ok || len(bytes.TrimSpace(cd)) != 0 {
			t.Fatalf("trailing content after </plist>: %v %v", tok, err)
		}
	}
	if len(doc.Dict) != 1 {
		t.Fatalf("plist has %d top-level elements", len(doc.Dict))
	}
	d := dictOf(t, doc.Dict[0])

	str := func(key string) string {
		t.Helper()
		n, ok := d[key]
		if !ok || n.XMLName.Local != "string" {
			t.Errorf("%s: missing or not a string (%v)", key, n.XMLName.Local)
		}
		return n.Text
	}
	if got := str("Label"); got != "dev.residentd" {
		t.Errorf("Label = %q", got)
	}
	sockPath := filepath.Join(home, "Library", "Caches", "residentd", "s.sock")
	var args []string
	for _, c := range d["ProgramArguments"].Children {
		args = append(args, c.Text)
	}
	wantArgs := []string{o.Binary, "serve", "--socket", sockPath, "--config", o.Config, "--metrics-addr", "127.0.0.1:9464"}
	if !slices.Equal(args, wantArgs) {
		t.Errorf("ProgramArguments = %q, want %q", args, wantArgs)
	}
	if d["RunAtLoad"].XMLName.Local != "true" {
		t.Errorf("RunAtLoad = <%s/>", d["RunAtLoad"].XMLName.Local)
	}
	if ka := dictOf(t, d["KeepAlive"]); ka["SuccessfulExit"].XMLName.Local != "false" {
		t.Errorf("KeepAlive.SuccessfulExit = <%s/>", ka["SuccessfulExit"].XMLName.Local)
	}
	if got := str("ProcessType"); got != "Background" {
		t.Errorf("ProcessType = %q", got)
	}
	logDir := filepath.Join(home, "Library", "Logs", "residentd")
	if got := str("StandardOutPath"); got != filepath.Join(logDir, "residentd.log") {
		t.Errorf("StandardOutPath = %q", got)
	}
	if got := str("StandardErrorPath"); got != filepath.Join(logDir, "residentd.err.log") {
		t.Errorf("StandardErrorPath = %q", got)
	}
	if env := dictOf(t, d["EnvironmentVariables"]); !strings.Contains(env["PATH"].Text, "/opt/homebrew/bin") {
		t.Errorf("PATH = %q", env["PATH"].Text)
	}
	for _, dir := range []string{logDir, filepath.Dir(sockPath)} {
		fi, err := os.Stat(dir)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm() != 0o700 {
			t.Errorf("%s mode %v, want 0700", dir, fi.Mode().Perm())
		}
	}

	removed, next, err := Uninstall(InstallOptions{Home: home, GOOS: "darwin"})
	if err != nil || !slices.Equal(removed, []string{plist}) {
		t.Errorf("uninstall: %q, %v", removed, err)
	}
	if next != "launchctl bootout gui/$(id -u)/dev.residentd" {
		t.Errorf("uninstall next = %q", next)
	}
	if _, err := os.Stat(plist); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("plist still there: %v", err)
	}
}

func TestInstallErrors(t *testing.T) {
	home := t.TempDir()
	long := "/" + strings.Repeat("x", 100) + "/s.sock"
	for _, tc := range []struct {
		name string
		o    InstallOptions
		want error
	}{
		{"no binary", InstallOptions{Home: home, GOOS: "linux"}, ErrInstallOptions},
		{"relative binary", InstallOptions{Binary: "bin/residentd", Home: home, GOOS: "linux"}, ErrInstallOptions},
		{"relative config", InstallOptions{Binary: "/b", Config: "c.json", Home: home, GOOS: "darwin"}, ErrInstallOptions},
		{"windows", InstallOptions{Binary: "/b", Home: home, GOOS: "windows"}, ErrUnsupportedOS},
		{"darwin socket too long", InstallOptions{Binary: "/b", SocketPath: long, Home: home, GOOS: "darwin"}, ErrSocketPathTooLong},
		{"darwin home too long", InstallOptions{Binary: "/b", Home: "/" + strings.Repeat("h", 80), GOOS: "darwin"}, ErrSocketPathTooLong},
		{"linux socket too long", InstallOptions{Binary: "/b", SocketPath: long + "yyyy", Home: home, GOOS: "linux"}, ErrSocketPathTooLong},
	} {
		t.Run(tc.name, func(t *testing.T) {
			written, _, err := Install(tc.o)
			if !errors.Is(err, tc.want) {
				t.Errorf("err = %v, want %v", err, tc.want)
			}
			if len(written) != 0 {
				t.Errorf("wrote %q despite the error", written)
			}
		})
	}
	if entries, _ := os.ReadDir(home); len(entries) != 0 {
		t.Errorf("failed installs left %d entries in home", len(entries))
	}
}

func TestSystemdQuote(t *testing.T) {
	for in, want := range map[string]string{
		"/usr/bin/residentd": "/usr/bin/residentd",
		"/a b/c":             `"/a b/c"`,
		`/a"b`:               `"/a\"b"`,
		"/100%":              "/100%%",
		"/$HOME":             "/$$HOME",
		`/a\b`:               `"/a\\b"`,
	} {
		if got := systemdQuote(in); got != want {
			t.Errorf("systemdQuote(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestSystemdAnalyzeVerify runs systemd's own checker on the rendered units.
// The rendered files are checked (not the repository ones) because verify
// insists ExecStart exists; rendering only rewrites that line.
func TestSystemdAnalyzeVerify(t *testing.T) {
	bin, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Skip("systemd-analyze is not on PATH; unit files not verified")
	}
	home := t.TempDir()
	exe := filepath.Join(t.TempDir(), "residentd")
	if err := os.WriteFile(exe, []byte("#!/bin/sh\nexit 0\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	written, _, err := Install(InstallOptions{Binary: exe, Config: "/etc/residentd.json", Home: home, GOOS: "linux"})
	if err != nil {
		t.Fatal(err)
	}
	// A user manager needs a runtime dir; the test gets a private one.
	runtimeDir := t.TempDir()
	cmd := exec.Command(bin, append([]string{"verify", "--user"}, written...)...)
	cmd.Env = append(os.Environ(), "XDG_RUNTIME_DIR="+runtimeDir, "HOME="+home, "SYSTEMD_LOG_COLOR=0")
	out, err := cmd.CombinedOutput()
	// verify exits 0 on unknown keys and bad values, only warning; any output is a finding.
	if err != nil || len(bytes.TrimSpace(out)) != 0 {
		t.Errorf("systemd-analyze verify --user: %v\n%s", err, out)
	}
}
