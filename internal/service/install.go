package service

import (
	"bytes"
	"embed"
	"encoding/xml"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"text/template"
)

// Embedded copies of systemd/residentd.{service,socket} and
// deploy/launchd/dev.residentd.plist; a test keeps them identical.
//
//go:embed templates/residentd.service templates/residentd.socket templates/dev.residentd.plist
var templates embed.FS

// Errors for install classes the caller may want to tell apart.
var (
	ErrUnsupportedOS     = errors.New("service: unsupported OS")
	ErrSocketPathTooLong = errors.New("service: socket path too long")
	ErrInstallOptions    = errors.New("service: bad install options")
	errTemplateDrift     = errors.New("service: unit template lacks the line the installer rewrites")
)

const (
	// LaunchdLabel is the LaunchAgent's label and plist base name.
	LaunchdLabel = "dev.residentd"

	unitService = "residentd.service"
	unitSocket  = "residentd.socket"

	// The lines of the systemd templates the installer rewrites.
	templateExecStart = "ExecStart=%h/.local/bin/residentd serve"
	templateListen    = "ListenStream=%t/residentd/residentd.sock"

	// sun_path holds 104 bytes on macOS and 108 on Linux, NUL included.
	maxSocketPathDarwin = 103
	maxSocketPathLinux  = 107
)

// InstallOptions says where things are. Binary is required and absolute;
// Config, StateDir and MetricsAddr are passed to `serve` as --config, --state
// and --metrics-addr when set (deploy/prometheus scrapes 127.0.0.1:9464);
// SocketPath overrides the default socket (on darwin it is always passed, as
// launchd has no socket activation here). Home and GOOS default to the
// current user's home and runtime.GOOS.
type InstallOptions struct {
	Binary, Config, StateDir, SocketPath string
	Home                                 string
	GOOS                                 string
	MetricsAddr                          string
}

func (o InstallOptions) withDefaults() (InstallOptions, error) {
	if o.GOOS == "" {
		o.GOOS = runtime.GOOS
	}
	if o.Home == "" {
		h, err := os.UserHomeDir()
		if err != nil {
			return o, fmt.Errorf("%w: home directory: %w", ErrInstallOptions, err)
		}
		o.Home = h
	}
	if o.Binary == "" {
		return o, fmt.Errorf("%w: binary path is empty", ErrInstallOptions)
	}
	for _, p := range []struct{ name, v string }{
		{"binary", o.Binary}, {"config", o.Config}, {"state dir", o.StateDir}, {"socket", o.SocketPath}, {"home", o.Home},
	} {
		// A service starts in / (launchd) or $HOME (systemd): relative paths would point elsewhere.
		if p.v != "" && !filepath.IsAbs(p.v) {
			return o, fmt.Errorf("%w: %s path %q is not absolute", ErrInstallOptions, p.name, p.v)
		}
	}
	return o, nil
}

// Install writes the service definition for o.GOOS and returns the files
// written and the command the user runs next to start it.
func Install(o InstallOptions) (written []string, next string, err error) {
	o, err = o.withDefaults()
	if err != nil {
		return nil, "", err
	}
	switch o.GOOS {
	case "linux":
		return installSystemd(o)
	case "darwin":
		return installLaunchd(o)
	default:
		return nil, "", fmt.Errorf("%w: %q (want linux or darwin)", ErrUnsupportedOS, o.GOOS)
	}
}

// Uninstall removes what Install wrote (missing files are fine) and returns
// what it removed and the command that stops the running service.
func Uninstall(o InstallOptions) (removed []string, next string, err error) {
	if o.GOOS == "" {
		o.GOOS = runtime.GOOS
	}
	if o.Home == "" {
		if o.Home, err = os.UserHomeDir(); err != nil {
			return nil, "", fmt.Errorf("%w: home directory: %w", ErrInstallOptions, err)
		}
	}
	var paths []string
	switch o.GOOS {
	case "linux":
		dir := systemdUserDir(o.Home)
		paths = []string{filepath.Join(dir, unitService), filepath.Join(dir, unitSocket)}
		// `systemctl enable` links the units into *.wants; drop those too so
		// no dangling link is left behind.
		for _, u := range []string{unitService, unitSocket} {
			links, _ := filepath.Glob(filepath.Join(dir, "*.wants", u))
			paths = append(paths, links...)
		}
		next = "systemctl --user stop " + unitSocket + " " + unitService + " && systemctl --user daemon-reload"
	case "darwin":
		paths = []string{launchdPlistPath(o.Home)}
		next = "launchctl bootout gui/$(id -u)/" + LaunchdLabel
	default:
		return nil, "", fmt.Errorf("%w: %q (want linux or darwin)", ErrUnsupportedOS, o.GOOS)
	}
	for _, p := range paths {
		switch err := os.Remove(p); {
		case err == nil:
			removed = append(removed, p)
		case errors.Is(err, fs.ErrNotExist):
		default:
			return removed, next, fmt.Errorf("service: uninstall: remove %q: %w", p, err)
		}
	}
	return removed, next, nil
}

func systemdUserDir(home string) string { return filepath.Join(home, ".config", "systemd", "user") }

func launchdPlistPath(home string) string {
	return filepath.Join(home, "Library", "LaunchAgents", LaunchdLabel+".plist")
}

func installSystemd(o InstallOptions) ([]string, string, error) {
	if len(o.SocketPath) > maxSocketPathLinux {
		return nil, "", fmt.Errorf("%w: %q is %d bytes, the limit is %d", ErrSocketPathTooLong, o.SocketPath, len(o.SocketPath), maxSocketPathLinux)
	}
	svc, sock, err := renderSystemd(o)
	if err != nil {
		return nil, "", err
	}
	dir := systemdUserDir(o.Home)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, "", fmt.Errorf("service: install: create %q: %w", dir, err)
	}
	var written []string
	for _, f := range []struct {
		name string
		data []byte
	}{{unitService, svc}, {unitSocket, sock}} {
		p := filepath.Join(dir, f.name)
		if err := writeFileAtomic(p, f.data, 0o644); err != nil {
			return written, "", err
		}
		written = append(written, p)
	}
	return written, "systemctl --user daemon-reload && systemctl --user enable --now " + unitSocket + " " + unitService, nil
}

// ServeArgs is the command line the installed service runs.
func (o InstallOptions) ServeArgs() []string {
	return append([]string{o.Binary, "serve"}, o.serveFlags()...)
}

// serveFlags are the optional `serve` flags, shared by both service formats.
func (o InstallOptions) serveFlags() []string {
	var f []string
	for _, kv := range [][2]string{{"--config", o.Config}, {"--state", o.StateDir}, {"--metrics-addr", o.MetricsAddr}} {
		if kv[1] != "" {
			f = append(f, kv[0], kv[1])
		}
	}
	return f
}

// renderSystemd substitutes the real ExecStart (and ListenStream when a
// socket path is given) into the embedded unit templates.
func renderSystemd(o InstallOptions) (service, socket []byte, err error) {
	svc, err := templates.ReadFile("templates/" + unitService)
	if err != nil {
		return nil, nil, fmt.Errorf("service: read template %q: %w", unitService, err)
	}
	sock, err := templates.ReadFile("templates/" + unitSocket)
	if err != nil {
		return nil, nil, fmt.Errorf("service: read template %q: %w", unitSocket, err)
	}
	args := o.ServeArgs()
	quoted := make([]string, len(args))
	for i, a := range args {
		quoted[i] = systemdQuote(a)
	}
	if service, err = replaceLine(svc, templateExecStart, "ExecStart="+strings.Join(quoted, " ")); err != nil {
		return nil, nil, err
	}
	socket = sock
	if o.SocketPath != "" {
		if socket, err = replaceLine(sock, templateListen, "ListenStream="+strings.ReplaceAll(o.SocketPath, "%", "%%")); err != nil {
			return nil, nil, err
		}
	}
	return service, socket, nil
}

func replaceLine(data []byte, old, new string) ([]byte, error) {
	lines := strings.Split(string(data), "\n")
	n := 0
	for i, l := range lines {
		if l == old {
			lines[i] = new
			n++
		}
	}
	if n != 1 {
		return nil, fmt.Errorf("%w: %q found %d times", errTemplateDrift, old, n)
	}
	return []byte(strings.Join(lines, "\n")), nil
}

// systemdQuote makes one ExecStart argument: % and $ are escaped (specifier
// and variable expansion), and arguments with blanks or quotes are quoted.
func systemdQuote(s string) string {
	s = strings.ReplaceAll(s, "%", "%%")
	s = strings.ReplaceAll(s, "$", "$$")
	if s != "" && !strings.ContainsAny(s, " \t\"'\\;") {
		return s
	}
	s = strings.ReplaceAll(s, `\`, `\\`)
	s = strings.ReplaceAll(s, `"`, `\"`)
	return `"` + s + `"`
}

// plistData feeds deploy/launchd/dev.residentd.plist.
type plistData struct {
	Label, Binary, SocketPath    string
	Flags                        []string
	Path, StdoutPath, StderrPath string
}

// DarwinSocketPath is the default socket for the LaunchAgent: short, because
// macOS caps socket paths at 104 bytes.
func DarwinSocketPath(home string) string {
	return filepath.Join(home, "Library", "Caches", "residentd", "s.sock")
}

func installLaunchd(o InstallOptions) ([]string, string, error) {
	if o.SocketPath == "" {
		o.SocketPath = DarwinSocketPath(o.Home)
	}
	if len(o.SocketPath) > maxSocketPathDarwin {
		return nil, "", fmt.Errorf("%w: %q is %d bytes, macOS allows %d; pass a shorter socket path", ErrSocketPathTooLong, o.SocketPath, len(o.SocketPath), maxSocketPathDarwin)
	}
	logDir := filepath.Join(o.Home, "Library", "Logs", "residentd")
	data, err := renderPlist(plistData{
		Label:      LaunchdLabel,
		Binary:     o.Binary,
		SocketPath: o.SocketPath,
		Flags:      o.serveFlags(),
		Path:       filepath.Join(o.Home, ".local", "bin") + ":/opt/homebrew/bin:/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin",
		StdoutPath: filepath.Join(logDir, "residentd.log"),
		StderrPath: filepath.Join(logDir, "residentd.err.log"),
	})
	if err != nil {
		return nil, "", err
	}
	// launchd neither creates the log directory nor the socket's; the socket
	// directory is private because the socket is the API's only access control.
	for _, d := range []struct {
		path string
		mode os.FileMode
	}{
		{filepath.Dir(launchdPlistPath(o.Home)), 0o755},
		{logDir, 0o700},
		{filepath.Dir(o.SocketPath), 0o700},
	} {
		if err := os.MkdirAll(d.path, d.mode); err != nil {
			return nil, "", fmt.Errorf("service: install: create %q: %w", d.path, err)
		}
	}
	p := launchdPlistPath(o.Home)
	if err := writeFileAtomic(p, data, 0o644); err != nil {
		return nil, "", err
	}
	return []string{p}, "launchctl bootstrap gui/$(id -u) " + p, nil
}

func renderPlist(d plistData) ([]byte, error) {
	src, err := templates.ReadFile("templates/" + LaunchdLabel + ".plist")
	if err != nil {
		return nil, fmt.Errorf("service: read plist template: %w", err)
	}
	t, err := template.New("plist").Funcs(template.FuncMap{"xml": xmlEscape}).Option("missingkey=error").Parse(string(src))
	if err != nil {
		return nil, fmt.Errorf("service: parse plist template: %w", err)
	}
	var buf bytes.Buffer
	if err := t.Execute(&buf, d); err != nil {
		return nil, fmt.Errorf("service: render plist: %w", err)
	}
	return buf.Bytes(), nil
}

func xmlEscape(s string) (string, error) {
	var b strings.Builder
	if err := xml.EscapeText(&b, []byte(s)); err != nil {
		return "", err
	}
	return b.String(), nil
}

// writeFileAtomic replaces path in one rename so a crash never leaves a
// half-written unit that the service manager would then refuse.
func writeFileAtomic(path string, data []byte, mode os.FileMode) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return fmt.Errorf("service: install: write %q: %w", path, err)
	}
	defer os.Remove(tmp.Name()) // no-op after a successful rename
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return fmt.Errorf("service: install: write %q: %w", path, err)
	}
	if err := tmp.Chmod(mode); err != nil {
		tmp.Close()
		return fmt.Errorf("service: install: chmod %q: %w", path, err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("service: install: write %q: %w", path, err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("service: install: rename into %q: %w", path, err)
	}
	return nil
}
