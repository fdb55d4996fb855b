package service

import (
	"bytes"
	"context"
	"embed"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"text/template"
)

// The unit and plist templates: the one source of the files in systemd/ and
// deploy/launchd/ (a test renders them with RepoFiles' defaults and compares)
// and of what Install writes.
//
//go:embed templates/residentd.service.tmpl templates/residentd.socket.tmpl templates/dev.residentd.plist.tmpl
var templates embed.FS

// Errors for install classes the caller may want to tell apart.
var (
	ErrUnsupportedOS     = errors.New("service: unsupported OS")
	ErrSocketPathTooLong = errors.New("service: socket path too long")
	ErrInstallOptions    = errors.New("service: bad install options")
	// ErrNoUserManager: `systemctl --user` reaches no user service manager
	// (no login session, no D-Bus, or no systemctl at all).
	ErrNoUserManager = errors.New("service: systemctl --user does not reach a user service manager")
)

const (
	// LaunchdLabel is the LaunchAgent's label and plist base name.
	LaunchdLabel = "dev.residentd"

	unitService = "residentd.service"
	unitSocket  = "residentd.socket"

	// defaultListen is the socket unit's ListenStream= unless told otherwise.
	defaultListen = "%t/residentd/residentd.sock"

	// sun_path holds 104 bytes on macOS and 108 on Linux, NUL included.
	maxSocketPathDarwin = 103
	maxSocketPathLinux  = 107
)

// Systemctl runs `systemctl --user ARGS…` and returns its combined output;
// a non-nil error means it did not exit 0.
type Systemctl func(ctx context.Context, args ...string) ([]byte, error)

// ExecSystemctl is the Systemctl that runs the systemctl found on PATH.
func ExecSystemctl(ctx context.Context, args ...string) ([]byte, error) {
	return exec.CommandContext(ctx, "systemctl", append([]string{"--user"}, args...)...).CombinedOutput()
}

// InstallOptions says where things are. Binary is required and absolute;
// Config, StateDir and MetricsAddr are passed to `serve` as --config, --state
// and --metrics-addr when set (deploy/prometheus scrapes 127.0.0.1:9464);
// SocketPath overrides the default socket (on darwin it is always passed, as
// launchd has no socket activation here). Home and GOOS default to the
// current user's home and runtime.GOOS; ConfigHome ($XDG_CONFIG_HOME, where
// the systemd user units go) to Home/.config.
type InstallOptions struct {
	Binary, Config, StateDir, SocketPath string
	Home, ConfigHome                     string
	GOOS                                 string
	MetricsAddr                          string
	// Path is the PATH the service and its agents run with: the installing
	// user's. Entries that are not absolute are dropped (the service starts
	// elsewhere); empty means /usr/local/bin:/usr/bin:/bin.
	Path string
	// Systemctl reaches the user manager (Linux); nil is ExecSystemctl.
	Systemctl Systemctl
	// Out hears what Uninstall did with the running units; nil discards it.
	Out io.Writer
}

// DefaultPath is the PATH of a service whose installer had none.
const DefaultPath = "/usr/local/bin:/usr/bin:/bin"

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
	if o.ConfigHome == "" {
		o.ConfigHome = filepath.Join(o.Home, ".config")
	}
	if o.Systemctl == nil {
		o.Systemctl = ExecSystemctl
	}
	if o.Out == nil {
		o.Out = io.Discard
	}
	for _, p := range []struct{ name, v string }{
		{"binary", o.Binary}, {"config", o.Config}, {"state dir", o.StateDir}, {"socket", o.SocketPath},
		{"home", o.Home}, {"config home", o.ConfigHome},
	} {
		// A service starts in / (launchd) or $HOME (systemd): relative paths would point elsewhere.
		if p.v != "" && !filepath.IsAbs(p.v) {
			return o, fmt.Errorf("%w: %s path %q is not absolute", ErrInstallOptions, p.name, p.v)
		}
	}
	o.Path, _ = CleanPath(o.Path)
	return o, nil
}

// CleanPath returns path without empty, relative and repeated entries (a
// service does not start in the installer's directory), DefaultPath when
// nothing is left, and the entries it dropped.
func CleanPath(path string) (clean string, dropped []string) {
	var keep []string
	for _, d := range filepath.SplitList(path) {
		switch {
		case !filepath.IsAbs(d):
			dropped = append(dropped, d)
		case !slices.Contains(keep, filepath.Clean(d)):
			keep = append(keep, filepath.Clean(d))
		}
	}
	if len(keep) == 0 {
		return DefaultPath, dropped
	}
	return strings.Join(keep, string(filepath.ListSeparator)), dropped
}

// Install writes the service definition for o.GOOS and returns the files
// written and what the user does next: on Linux the commands that start the
// units when `systemctl --user` works, else what to do instead.
func Install(ctx context.Context, o InstallOptions) (written []string, next string, err error) {
	if o.Binary == "" {
		return nil, "", fmt.Errorf("%w: binary path is empty", ErrInstallOptions)
	}
	o, err = o.withDefaults()
	if err != nil {
		return nil, "", err
	}
	switch o.GOOS {
	case "linux":
		return installSystemd(ctx, o)
	case "darwin":
		return installLaunchd(o)
	default:
		return nil, "", fmt.Errorf("%w: %q (want linux or darwin)", ErrUnsupportedOS, o.GOOS)
	}
}

// CheckUserManager reports whether `systemctl --user` works here: it runs
// `systemctl --user show-environment`, which needs a running user manager.
func CheckUserManager(ctx context.Context, run Systemctl) error {
	if run == nil {
		run = ExecSystemctl
	}
	out, err := run(ctx, "show-environment")
	if err != nil {
		msg := firstLine(out)
		if msg != "" {
			msg = ": " + msg
		}
		return fmt.Errorf("%w: systemctl --user show-environment: %w%s", ErrNoUserManager, err, msg)
	}
	return nil
}

func firstLine(b []byte) string {
	l, _, _ := strings.Cut(strings.TrimSpace(string(b)), "\n")
	return l
}

// Uninstall stops and disables the running units (Linux, when the user
// manager answers; units it does not know are fine), then removes what
// Install wrote (missing files are fine). It returns what it removed and
// what is left for the user to do, if anything.
func Uninstall(ctx context.Context, o InstallOptions) (removed []string, next string, err error) {
	o.Binary = "/" // not needed to remove
	if o, err = o.withDefaults(); err != nil {
		return nil, "", err
	}
	var paths []string
	switch o.GOOS {
	case "linux":
		dir := systemdUserDir(o.ConfigHome)
		paths = []string{filepath.Join(dir, unitService), filepath.Join(dir, unitSocket)}
		// `systemctl enable` links the units into *.wants; drop those too so
		// no dangling link is left behind.
		for _, u := range []string{unitService, unitSocket} {
			links, _ := filepath.Glob(filepath.Join(dir, "*.wants", u))
			paths = append(paths, links...)
		}
		if !slices.ContainsFunc(paths, exists) {
			return nil, "", nil
		}
		next, err = stopUnits(ctx, o)
		if err != nil {
			return nil, next, err
		}
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
			return removed, next, fmt.Errorf("service: uninstall: remove %q: %w; remove it by hand", p, err)
		}
	}
	if o.GOOS == "linux" && next == "" && len(removed) > 0 {
		// The manager forgets the removed units; failing that only leaves
		// `systemctl --user status` showing them as not found.
		if out, err := o.Systemctl(ctx, "daemon-reload"); err != nil {
			fmt.Fprintf(o.Out, "systemctl --user daemon-reload: %v %s (run it yourself)\n", err, firstLine(out))
		}
	}
	return removed, next, nil
}

func exists(p string) bool {
	_, err := os.Lstat(p)
	return err == nil
}

// stopUnits runs `systemctl --user disable --now` on both units. Without a
// user manager there is nothing running to stop from here, and next says
// what to run once there is one.
func stopUnits(ctx context.Context, o InstallOptions) (next string, err error) {
	if err := CheckUserManager(ctx, o.Systemctl); err != nil {
		fmt.Fprintf(o.Out, "not stopping the units: %v\n", err)
		return "if residentd still runs in another session, stop it there: systemctl --user disable --now " + unitSocket + " " + unitService, nil
	}
	out, err := o.Systemctl(ctx, "disable", "--now", unitSocket, unitService)
	if err != nil {
		// A unit the manager does not know (never loaded, already gone) is
		// what uninstall wants anyway; say it and go on.
		fmt.Fprintf(o.Out, "systemctl --user disable --now %s %s: %v %s (going on)\n", unitSocket, unitService, err, firstLine(out))
		return "", nil
	}
	fmt.Fprintf(o.Out, "stopped and disabled %s %s\n", unitSocket, unitService)
	return "", nil
}

func systemdUserDir(configHome string) string { return filepath.Join(configHome, "systemd", "user") }

func launchdPlistPath(home string) string {
	return filepath.Join(home, "Library", "LaunchAgents", LaunchdLabel+".plist")
}

// EnableCommand is what Install's next is when the user manager answers:
// the command that starts the units now and at every login.
func EnableCommand() string {
	return "systemctl --user daemon-reload && systemctl --user enable --now " + unitSocket + " " + unitService
}

func installSystemd(ctx context.Context, o InstallOptions) ([]string, string, error) {
	if len(o.SocketPath) > maxSocketPathLinux {
		return nil, "", fmt.Errorf("%w: %q is %d bytes, the limit is %d; pass a shorter --socket", ErrSocketPathTooLong, o.SocketPath, len(o.SocketPath), maxSocketPathLinux)
	}
	svc, sock, err := renderSystemd(o, false)
	if err != nil {
		return nil, "", err
	}
	dir := systemdUserDir(o.ConfigHome)
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
	if err := CheckUserManager(ctx, o.Systemctl); err != nil {
		return written, fmt.Sprintf("%v.\n"+
			"The units are written, but this session has no user service manager to start\n"+
			"them. Log in to one that has (a desktop or ssh login; to keep the daemon\n"+
			"running without a login: sudo loginctl enable-linger $USER, then log in\n"+
			"again) and run `residentd install --user` there: it checks again and says\n"+
			"how to start the units. Until then, run the daemon in the foreground:\n  %s",
			err, strings.Join(o.ServeArgs(), " ")), nil
	}
	return written, EnableCommand(), nil
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

// unitData feeds the systemd templates; every field is already escaped.
type unitData struct {
	Repo      bool   // rendering the repository's copy
	ExecStart string // the quoted command line
	// ExecReload is `residentd reload` on the service's socket: a
	// synchronous reload whose refusal fails `systemctl reload`.
	ExecReload string
	PathEnv    string // PATH=… as one Environment= word
	Listen     string // ListenStream=
}

// renderSystemd renders the unit templates for o (already defaulted).
func renderSystemd(o InstallOptions, repo bool) (service, socket []byte, err error) {
	args := o.ServeArgs()
	quoted := make([]string, len(args))
	for i, a := range args {
		quoted[i] = systemdQuote(a)
	}
	reload := []string{systemdQuote(o.Binary), "reload"}
	if o.SocketPath != "" {
		reload = append(reload, "--socket", systemdQuote(o.SocketPath))
	}
	d := unitData{Repo: repo, ExecStart: strings.Join(quoted, " "), ExecReload: strings.Join(reload, " "), PathEnv: envQuote("PATH=" + o.Path), Listen: defaultListen}
	if o.SocketPath != "" {
		d.Listen = strings.ReplaceAll(o.SocketPath, "%", "%%")
	}
	if service, err = render(unitService+".tmpl", d); err != nil {
		return nil, nil, err
	}
	if socket, err = render(unitSocket+".tmpl", d); err != nil {
		return nil, nil, err
	}
	return service, socket, nil
}

// render executes one embedded template.
func render(name string, data any) ([]byte, error) {
	src, err := templates.ReadFile("templates/" + name)
	if err != nil {
		return nil, fmt.Errorf("service: read template %q: %w", name, err)
	}
	t, err := template.New(name).Funcs(template.FuncMap{"xml": xmlEscape}).Option("missingkey=error").Parse(string(src))
	if err != nil {
		return nil, fmt.Errorf("service: parse template %q: %w", name, err)
	}
	var buf bytes.Buffer
	if err := t.Execute(&buf, data); err != nil {
		return nil, fmt.Errorf("service: render %q: %w", name, err)
	}
	return buf.Bytes(), nil
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

// envQuote makes one Environment= assignment: specifiers are expanded there
// (so % is doubled) but variables are not; blanks and quotes need quoting.
func envQuote(s string) string {
	s = strings.ReplaceAll(s, "%", "%%")
	if !strings.ContainsAny(s, " \t\"'\\") {
		return s
	}
	s = strings.ReplaceAll(s, `\`, `\\`)
	s = strings.ReplaceAll(s, `"`, `\"`)
	return `"` + s + `"`
}

// plistData feeds the plist template.
type plistData struct {
	Repo                         bool
	Label, Binary, SocketPath    string
	Flags                        []string
	Path, StdoutPath, StderrPath string
}

// DarwinSocketPath is the default socket for the LaunchAgent: short, because
// macOS caps socket paths at 104 bytes.
func DarwinSocketPath(home string) string {
	return filepath.Join(home, "Library", "Caches", "residentd", "s.sock")
}

func darwinLogDir(home string) string { return filepath.Join(home, "Library", "Logs", "residentd") }

func renderLaunchd(o InstallOptions, repo bool) ([]byte, error) {
	logDir := darwinLogDir(o.Home)
	return render(LaunchdLabel+".plist.tmpl", plistData{
		Repo:       repo,
		Label:      LaunchdLabel,
		Binary:     o.Binary,
		SocketPath: o.SocketPath,
		Flags:      o.serveFlags(),
		Path:       o.Path,
		StdoutPath: filepath.Join(logDir, "residentd.log"),
		StderrPath: filepath.Join(logDir, "residentd.err.log"),
	})
}

func installLaunchd(o InstallOptions) ([]string, string, error) {
	if o.SocketPath == "" {
		o.SocketPath = DarwinSocketPath(o.Home)
	}
	if len(o.SocketPath) > maxSocketPathDarwin {
		return nil, "", fmt.Errorf("%w: %q is %d bytes, macOS allows %d; pass a shorter --socket", ErrSocketPathTooLong, o.SocketPath, len(o.SocketPath), maxSocketPathDarwin)
	}
	data, err := renderLaunchd(o, false)
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
		{darwinLogDir(o.Home), 0o700},
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

// RepoFiles renders the templates for the documented defaults, keyed by
// their path in the repository: the systemd units for a binary at
// ~/.local/bin/residentd (%h) with the default socket and DefaultPath, and
// the plist for the home directory /Users/USER with its PATH.
func RepoFiles() (map[string][]byte, error) {
	sys := InstallOptions{Binary: "%h/.local/bin/residentd", Path: "%h/.local/bin:" + DefaultPath, GOOS: "linux"}
	args := sys.ServeArgs()
	svc, sock, err := renderSystemd(sys, true)
	if err != nil {
		return nil, err
	}
	// The binary's %h is a specifier here, not a literal percent sign.
	svc = bytes.Replace(svc, []byte("ExecStart="+systemdQuote(args[0])), []byte("ExecStart="+args[0]), 1)
	svc = bytes.Replace(svc, []byte("ExecReload="+systemdQuote(args[0])), []byte("ExecReload="+args[0]), 1)
	svc = bytes.Replace(svc, []byte("Environment="+envQuote("PATH="+sys.Path)), []byte("Environment=PATH="+sys.Path), 1)
	home := "/Users/USER"
	mac := InstallOptions{
		Binary: home + "/.local/bin/residentd", Home: home, GOOS: "darwin", SocketPath: DarwinSocketPath(home),
		Path: home + "/.local/bin:/opt/homebrew/bin:/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin",
	}
	plist, err := renderLaunchd(mac, true)
	if err != nil {
		return nil, err
	}
	return map[string][]byte{
		"systemd/" + unitService:                    svc,
		"systemd/" + unitSocket:                     sock,
		"deploy/launchd/" + LaunchdLabel + ".plist": plist,
	}, nil
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

// CopyFile copies the executable src to dst (atomically, mode 0755),
// creating dst's directory. `install` uses it to put a binary that lives in
// a build cache or temporary directory somewhere that lasts.
func CopyFile(src, dst string) error {
	data, err := os.ReadFile(src)
	if err != nil {
		return fmt.Errorf("service: copy binary: %w", err)
	}
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return fmt.Errorf("service: copy binary: create %q: %w", filepath.Dir(dst), err)
	}
	return writeFileAtomic(dst, data, 0o755)
}
