package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"github.com/residentd/residentd/internal/service"
)

// defaultMetricsAddr is where deploy/prometheus scrapes an installed daemon.
const defaultMetricsAddr = "127.0.0.1:9464"

// errInstallCheck marks an install refused because the service would not
// start or would not find its agents.
var errInstallCheck = errors.New("install refused")

// installFlags are what install and uninstall take: uninstall only --user.
type installFlags struct {
	user bool
	service.InstallOptions
}

func (f *installFlags) bindUser(fs *flag.FlagSet) {
	fs.BoolVar(&f.user, "user", true, "install for the current user (the only mode)")
}

func (f *installFlags) bind(fs *flag.FlagSet) {
	f.bindUser(fs)
	fs.StringVar(&f.Binary, "binary", "", "residentd binary the service runs (default: this executable, copied to ~/.local/bin when it lives in a build cache or temporary directory)")
	fs.StringVar(&f.Config, "config", "", "config file passed to serve --config (default: $XDG_CONFIG_HOME/residentd/config.json when it exists)")
	fs.StringVar(&f.StateDir, "state", "", "state directory passed to serve --state")
	fs.StringVar(&f.SocketPath, "socket", "", "socket path (default: systemd %t/residentd/residentd.sock; macOS ~/Library/Caches/residentd/s.sock)")
	fs.StringVar(&f.MetricsAddr, "metrics-addr", defaultMetricsAddr, `serve /metrics here ("" to disable)`)
}

// forUser fills in the user's directories the service definition goes
// under; a service for all users is refused.
func (f *installFlags) forUser() error {
	if !f.user {
		return fmt.Errorf("%w: only per-user services are supported (--user)", errUsage)
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return fmt.Errorf("home directory: %w; set HOME", err)
	}
	f.Home, f.ConfigHome = home, configHome(home)
	return nil
}

// runUninstall stops and deletes what install wrote. Like install, it
// runs to its end on a signal: it is not given the signals' context.
func runUninstall(_ context.Context, e *cmdEnv, f *installFlags) error {
	if err := f.forUser(); err != nil {
		return err
	}
	stdout := e.stdout
	f.Out = stdout
	removed, next, err := service.Uninstall(context.Background(), f.InstallOptions)
	for _, p := range removed {
		fmt.Fprintf(stdout, "removed %s\n", p)
	}
	if err != nil {
		return err
	}
	if len(removed) == 0 {
		fmt.Fprintln(stdout, "nothing to remove: no residentd service was installed")
	}
	if next != "" {
		fmt.Fprintf(stdout, "\nstill to do:\n  %s\n", next)
	}
	return nil
}

// runInstall writes the per-user service definition: systemd user units
// on Linux, a LaunchAgent on macOS. A signal does not cut it short: the
// units are written and systemd told of them whole.
func runInstall(_ context.Context, e *cmdEnv, f *installFlags) error {
	if err := f.forUser(); err != nil {
		return err
	}
	ctx, stdout, o := context.Background(), e.stdout, &f.InstallOptions
	if err := installBinary(ctx, o, stdout); err != nil {
		return err
	}
	if err := absInstallPaths(o); err != nil {
		return err
	}
	path, dropped := service.CleanPath(os.Getenv("PATH"))
	if len(dropped) > 0 {
		fmt.Fprintf(stdout, "left out of the service's PATH (not absolute): %q\n", dropped)
	}
	o.Path = path
	if err := checkConfig(o, stdout); err != nil {
		return err
	}
	written, next, err := service.Install(ctx, *o)
	for _, p := range written {
		fmt.Fprintf(stdout, "wrote %s\n", p)
	}
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "\nservice PATH (yours, recorded now; install again after changing it):\n  %s\n", o.Path)
	fmt.Fprintf(stdout, "\nservice runs: %s\n", strings.Join(o.ServeArgs(), " "))
	switch runtime.GOOS {
	case "linux":
		if next != service.EnableCommand() {
			fmt.Fprintf(stdout, "\n%s\n", next) // what to do without a user manager
			return nil
		}
		fmt.Fprintf(stdout, "\nto start it now and at every login:\n  %s\n", next)
		fmt.Fprintln(stdout, "then:\n  systemctl --user status residentd\n  journalctl --user -u residentd -f")
		if o.SocketPath != "" {
			fmt.Fprintf(stdout, "clients need the socket: export RESIDENTD_SOCKET=%s\n", o.SocketPath)
		}
	case "darwin":
		fmt.Fprintf(stdout, "\nto start it now and at every login:\n  %s\n", next)
		sock := o.SocketPath
		if sock == "" {
			sock = service.DarwinSocketPath(o.Home)
		}
		fmt.Fprintf(stdout, "then:\n  launchctl print gui/$(id -u)/%s\n  tail -f ~/Library/Logs/residentd/residentd.err.log\n", service.LaunchdLabel)
		fmt.Fprintf(stdout, "clients need the socket: export RESIDENTD_SOCKET=%s\n", sock)
	}
	return nil
}

// configHome is $XDG_CONFIG_HOME when it is absolute (the XDG rule), else
// ~/.config.
func configHome(home string) string {
	if d := os.Getenv("XDG_CONFIG_HOME"); filepath.IsAbs(d) {
		return d
	}
	return filepath.Join(home, ".config")
}

// userBinDir is where the XDG base directory spec puts a user's executables.
func userBinDir(home string) string { return filepath.Join(home, ".local", "bin") }

// installBinary picks the binary the service runs: --binary as given, else
// this executable, copied to ~/.local/bin/residentd first when it lives
// where it will not last (the Go build cache of `go run`, a temporary
// directory).
func installBinary(ctx context.Context, o *service.InstallOptions, stdout io.Writer) error {
	if o.Binary != "" {
		return nil
	}
	self, err := os.Executable()
	if err != nil {
		return fmt.Errorf("find own executable: %w; pass --binary", err)
	}
	if s, err := filepath.EvalSymlinks(self); err == nil {
		self = s
	}
	o.Binary = self
	where := transientDir(ctx, self)
	if where == "" {
		return nil
	}
	dst := filepath.Join(userBinDir(o.Home), "residentd")
	if err := service.CopyFile(self, dst); err != nil {
		return fmt.Errorf("%w; pass --binary with a residentd that lasts", err)
	}
	fmt.Fprintf(stdout, "copied %s to %s: this executable is in %s, which does not last\n", self, dst, where)
	o.Binary = dst
	return nil
}

// transientDir names the short-lived place exe is in, or returns "".
func transientDir(ctx context.Context, exe string) string {
	if c := goCache(ctx); c != "" && within(exe, c) {
		return "the Go build cache (" + c + ")"
	}
	if strings.Contains(filepath.ToSlash(exe), "/go-build") {
		return "a Go build directory"
	}
	if within(exe, os.TempDir()) {
		return "a temporary directory (" + os.TempDir() + ")"
	}
	return ""
}

// goCache is `go env GOCACHE`, or "" without a go command.
func goCache(ctx context.Context) string {
	if c := os.Getenv("GOCACHE"); filepath.IsAbs(c) {
		return c
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, "go", "env", "GOCACHE").Output()
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(out))
}

// within reports whether path is inside dir (both resolved).
func within(path, dir string) bool {
	if d, err := filepath.EvalSymlinks(dir); err == nil {
		dir = d
	}
	rel, err := filepath.Rel(dir, path)
	return err == nil && rel != "." && rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator))
}

// absInstallPaths makes every path absolute (a service starts in / or
// $HOME, where relative paths would mean something else) and checks the
// binary.
func absInstallPaths(o *service.InstallOptions) error {
	for _, p := range []*string{&o.Binary, &o.Config, &o.StateDir, &o.SocketPath} {
		if *p == "" {
			continue
		}
		abs, err := filepath.Abs(*p)
		if err != nil {
			return fmt.Errorf("%w: path %q: %w", errUsage, *p, err)
		}
		*p = abs
	}
	fi, err := os.Stat(o.Binary)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return fmt.Errorf("%w: --binary %s does not exist", errUsage, o.Binary)
	case err != nil:
		return fmt.Errorf("--binary %s: %w", o.Binary, err)
	case fi.IsDir() || fi.Mode().Perm()&0o111 == 0:
		return fmt.Errorf("%w: --binary %s is not an executable file", errUsage, o.Binary)
	}
	return nil
}

// checkConfig defaults --config to $XDG_CONFIG_HOME/residentd/config.json
// when that exists, loads it as serve will, and checks that every binding's
// command is found on the service's PATH.
func checkConfig(o *service.InstallOptions, stdout io.Writer) error {
	if o.Config == "" {
		def := configFileIn(o.ConfigHome)
		if _, err := os.Stat(def); err != nil {
			fmt.Fprintf(stdout, "no config file (%s does not exist): the service runs the built-in agent only\n", def)
			return nil
		}
		o.Config = def
		fmt.Fprintf(stdout, "using config %s\n", def)
	}
	if _, err := os.Stat(o.Config); err != nil {
		return fmt.Errorf("%w: config file: %w; write it (see deploy/config.example.json) or leave out --config to run the built-in agent only", errInstallCheck, err)
	}
	state := o.StateDir
	if state == "" {
		state = defaultStateDir()
	}
	cfg, err := loadConfig(o.Config, o.Binary, state)
	if err != nil {
		return fmt.Errorf("%w: %s: %w; fix it and run install again", errInstallCheck, o.Config, err)
	}
	for _, b := range cfg.Bindings {
		path := o.Path
		if p, ok := b.Env["PATH"]; ok {
			path = p
		}
		if _, err := lookPath(b.Command, path, b.Dir); err != nil {
			return fmt.Errorf("%w: binding %q: %w. The service runs with PATH=%s; install the command, give its absolute path in %s, or run install from a shell whose PATH finds it", errInstallCheck, b.ID, err, path, o.Config)
		}
	}
	return nil
}

// lookPath finds cmd as the service will: a name with a slash is a path
// (relative to dir, the binding's working directory, when given), any other
// name is searched on path.
func lookPath(cmd, path, dir string) (string, error) {
	isExec := func(p string) bool {
		fi, err := os.Stat(p)
		return err == nil && !fi.IsDir() && fi.Mode().Perm()&0o111 != 0
	}
	if strings.Contains(cmd, "/") {
		p := cmd
		if !filepath.IsAbs(p) && dir != "" {
			p = filepath.Join(dir, p)
		}
		if isExec(p) {
			return p, nil
		}
		return "", fmt.Errorf("command %s is not an executable file", cmd)
	}
	for _, d := range filepath.SplitList(path) {
		if p := filepath.Join(d, cmd); d != "" && isExec(p) {
			return p, nil
		}
	}
	return "", fmt.Errorf("command %q is not on the service's PATH", cmd)
}
