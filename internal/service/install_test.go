package service

import (
	"bytes"
	"context"
	"encoding/xml"
	"errors"
	"flag"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the repository's unit files from the templates")

// The unit files in the repository are the templates rendered for the
// documented defaults; `go generate ./internal/service` (go test -update)
// rewrites them.
func TestRepoFilesAreRendered(t *testing.T) {
	files, err := RepoFiles()
	if err != nil {
		t.Fatal(err)
	}
	if len(files) != 3 {
		t.Fatalf("RepoFiles renders %d files, want the 2 units and the plist", len(files))
	}
	for rel, want := range files {
		p := filepath.Join("..", "..", filepath.FromSlash(rel))
		if *update {
			if err := os.WriteFile(p, want, 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		got, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s is not what internal/service/templates renders; run `go generate ./internal/service` and commit the result", rel)
		}
		if strings.HasSuffix(rel, ".plist") {
			dec := xml.NewDecoder(bytes.NewReader(want))
			dec.Strict = true
			for {
				if _, err := dec.Token(); err == io.EOF {
					break
				} else if err != nil {
					t.Fatalf("%s is not XML: %v", rel, err)
				}
			}
		}
	}
}

// systemctlOK is a user manager that answers everything.
func systemctlOK(calls *[][]string) Systemctl {
	return func(_ context.Context, args ...string) ([]byte, error) {
		*calls = append(*calls, args)
		return nil, nil
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
	var calls [][]string
	o := InstallOptions{
		Binary: "/opt/resident d/bin/residentd", Config: "/etc/residentd/config.json",
		StateDir: "/var/lib/100%/state", MetricsAddr: "127.0.0.1:9464", Home: home, GOOS: "linux",
		Path: "/home/u/.local/bin:bin::/usr/bin:/home/u/.local/bin:/opt/100%/b b", Systemctl: systemctlOK(&calls),
	}
	written, next, err := Install(context.Background(), o)
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
		`Environment="PATH=/home/u/.local/bin:/usr/bin:/opt/100%%/b b"`,
		// systemctl reload waits for the reload and fails with its reason.
		`ExecReload="/opt/resident d/bin/residentd" reload`,
		"Type=notify", "NotifyAccess=main", "WatchdogSec=30s", "KillMode=mixed", "TimeoutStopSec=20s",
		"Restart=on-failure", "StateDirectory=residentd", "UMask=0077", "Delegate=yes",
		"NoNewPrivileges=yes",
	} {
		if !hasLine(svc, line) {
			t.Errorf("service unit lacks line %q", line)
		}
	}
	for _, l := range strings.Split(svc, "\n") {
		// RuntimeDirectory= would take the socket's directory away whenever
		// the service stops.
		for _, banned := range []string{"MemoryDenyWriteExecute=", "PrivateTmp=", "ProtectSystem=", "ExecStart=%h", "RuntimeDirectory"} {
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
	if !slices.EqualFunc(calls, [][]string{{"show-environment"}}, slices.Equal) {
		t.Errorf("install ran systemctl --user %q, want show-environment only", calls)
	}
	calls = nil
	var out bytes.Buffer
	removed, next, err := Uninstall(context.Background(), InstallOptions{Home: home, GOOS: "linux", Systemctl: systemctlOK(&calls), Out: &out})
	if err != nil {
		t.Fatal(err)
	}
	if len(removed) != 4 {
		t.Errorf("removed %q, want the 2 units and 2 links", removed)
	}
	if next != "" {
		t.Errorf("uninstall left %q to do", next)
	}
	wantCalls := [][]string{{"show-environment"}, {"disable", "--now", "residentd.socket", "residentd.service"}, {"daemon-reload"}}
	if !slices.EqualFunc(calls, wantCalls, slices.Equal) {
		t.Errorf("uninstall ran systemctl --user %q, want %q", calls, wantCalls)
	}
	left, _ := filepath.Glob(filepath.Join(dir, "*", "residentd.*"))
	left2, _ := filepath.Glob(filepath.Join(dir, "residentd.*"))
	if len(left)+len(left2) != 0 {
		t.Errorf("left behind: %q %q", left, left2)
	}
	// Idempotent.
	calls = nil
	if removed, _, err := Uninstall(context.Background(), InstallOptions{Home: home, GOOS: "linux", Systemctl: systemctlOK(&calls)}); err != nil || len(removed) != 0 || len(calls) != 0 {
		t.Errorf("second uninstall: %q, %v, ran %q", removed, err, calls)
	}
}

func TestInstallLinuxSocketOverride(t *testing.T) {
	home := t.TempDir()
	var calls [][]string
	written, _, err := Install(context.Background(), InstallOptions{Binary: "/usr/bin/residentd", SocketPath: "/run/x/r.sock", Home: home, GOOS: "linux", Systemctl: systemctlOK(&calls)})
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
	o := InstallOptions{Binary: "/Users/a&b/bin/residentd", Config: "/Users/a&b/.config/residentd.json", MetricsAddr: "127.0.0.1:9464", Home: home, GOOS: "darwin",
		Path: "/Users/a&b/.local/bin:/opt/homebrew/bin:/usr/bin"}
	written, next, err := Install(context.Background(), o)
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
	if env := dictOf(t, d["EnvironmentVariables"]); env["PATH"].Text != o.Path {
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

	removed, next, err := Uninstall(context.Background(), InstallOptions{Home: home, GOOS: "darwin"})
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
			written, _, err := Install(context.Background(), tc.o)
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
	var calls [][]string
	written, _, err := Install(context.Background(), InstallOptions{Binary: exe, Config: "/etc/residentd.json", Home: home, GOOS: "linux", Path: os.Getenv("PATH"), Systemctl: systemctlOK(&calls)})
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

// Without a user manager, install writes the units and says what to do
// instead of how to enable them; uninstall removes the files and says
// what is left.
func TestInstallLinuxWithoutUserManager(t *testing.T) {
	home := t.TempDir()
	var calls [][]string
	noManager := func(_ context.Context, args ...string) ([]byte, error) {
		calls = append(calls, args)
		return []byte("Failed to connect to bus: No medium found\n"), errors.New("exit status 1")
	}
	written, next, err := Install(context.Background(), InstallOptions{Binary: "/usr/bin/residentd", Home: home, ConfigHome: filepath.Join(home, "cfg"), GOOS: "linux", Systemctl: noManager})
	if err != nil {
		t.Fatal(err)
	}
	if len(written) != 2 || !strings.HasPrefix(written[0], filepath.Join(home, "cfg", "systemd", "user")+"/") {
		t.Errorf("written = %q, want the units under $XDG_CONFIG_HOME/systemd/user", written)
	}
	for _, want := range []string{"No medium found", "loginctl enable-linger", "residentd install --user", "/usr/bin/residentd serve"} {
		if !strings.Contains(next, want) {
			t.Errorf("next lacks %q:\n%s", want, next)
		}
	}
	if strings.Contains(next, "enable --now") {
		t.Errorf("next tells to enable units no manager can start:\n%s", next)
	}
	var out bytes.Buffer
	calls = nil
	removed, next, err := Uninstall(context.Background(), InstallOptions{Home: home, ConfigHome: filepath.Join(home, "cfg"), GOOS: "linux", Systemctl: noManager, Out: &out})
	if err != nil || !slices.Equal(removed, written) {
		t.Fatalf("uninstall removed %q, %v; want %q", removed, err, written)
	}
	if !slices.EqualFunc(calls, [][]string{{"show-environment"}}, slices.Equal) {
		t.Errorf("uninstall without a manager ran %q", calls)
	}
	if !strings.Contains(out.String(), "not stopping the units") || !strings.Contains(next, "disable --now") {
		t.Errorf("uninstall output %q, next %q", out.String(), next)
	}
}

// A manager that does not know the units (never loaded) does not stop the
// uninstall.
func TestUninstallToleratesUnknownUnits(t *testing.T) {
	home := t.TempDir()
	var calls [][]string
	written, _, err := Install(context.Background(), InstallOptions{Binary: "/usr/bin/residentd", Home: home, GOOS: "linux", Systemctl: systemctlOK(&calls)})
	if err != nil {
		t.Fatal(err)
	}
	unknown := func(_ context.Context, args ...string) ([]byte, error) {
		if args[0] == "disable" {
			return []byte("Failed to disable unit: Unit file residentd.socket does not exist.\n"), errors.New("exit status 1")
		}
		return nil, nil
	}
	var out bytes.Buffer
	removed, next, err := Uninstall(context.Background(), InstallOptions{Home: home, GOOS: "linux", Systemctl: unknown, Out: &out})
	if err != nil || !slices.Equal(removed, written) || next != "" {
		t.Fatalf("uninstall: removed %q, next %q, %v", removed, next, err)
	}
	if !strings.Contains(out.String(), "does not exist") || !strings.Contains(out.String(), "going on") {
		t.Errorf("uninstall output %q", out.String())
	}
}

func TestCleanPath(t *testing.T) {
	for in, want := range map[string]string{
		"/a:/b:/a/:bin::.:/c": "/a:/b:/c",
		"":                    DefaultPath,
		"bin:.":               DefaultPath,
	} {
		if got, _ := CleanPath(in); got != want {
			t.Errorf("CleanPath(%q) = %q, want %q", in, got, want)
		}
	}
	if _, dropped := CleanPath("/a:bin::."); !slices.Equal(dropped, []string{"bin", "", "."}) {
		t.Errorf("dropped %q", dropped)
	}
}
