package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strings"

	"github.com/residentd/residentd/internal/service"
)

// defaultMetricsAddr is where deploy/prometheus scrapes an installed daemon.
const defaultMetricsAddr = "127.0.0.1:9464"

// cmdInstall writes (or, with remove, deletes) the per-user service
// definition: systemd user units on Linux, a LaunchAgent on macOS.
func cmdInstall(args []string, stdout io.Writer, remove bool) error {
	name := "install"
	if remove {
		name = "uninstall"
	}
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stdout)
	user := fs.Bool("user", true, "install for the current user (the only mode)")
	var o service.InstallOptions
	if !remove {
		fs.StringVar(&o.Binary, "binary", "", "residentd binary the service runs (default: this executable)")
		fs.StringVar(&o.Config, "config", "", "config file passed to serve --config")
		fs.StringVar(&o.StateDir, "state", "", "state directory passed to serve --state")
		fs.StringVar(&o.SocketPath, "socket", "", "socket path (default: systemd %t/residentd/residentd.sock; macOS ~/Library/Caches/residentd/s.sock)")
		fs.StringVar(&o.MetricsAddr, "metrics-addr", defaultMetricsAddr, `serve /metrics here ("" to disable)`)
	}
	if err := parse(fs, args); err != nil {
		return err
	}
	if err := noArgs(fs); err != nil {
		return err
	}
	if !*user {
		return fmt.Errorf("%w: only per-user services are supported (--user)", errUsage)
	}
	if remove {
		removed, next, err := service.Uninstall(o)
		for _, p := range removed {
			fmt.Fprintf(stdout, "removed %s\n", p)
		}
		if err != nil {
			return err
		}
		if len(removed) == 0 {
			fmt.Fprintln(stdout, "nothing to remove: no residentd service was installed")
		}
		fmt.Fprintf(stdout, "\nto stop a running daemon:\n  %s\n", next)
		return nil
	}

	if err := absInstallPaths(&o); err != nil {
		return err
	}
	written, next, err := service.Install(o)
	for _, p := range written {
		fmt.Fprintf(stdout, "wrote %s\n", p)
	}
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "\nservice runs: %s\n\nto start it now and at every login:\n  %s\n", strings.Join(o.ServeArgs(), " "), next)
	switch runtime.GOOS {
	case "linux":
		fmt.Fprintln(stdout, "then:\n  systemctl --user status residentd\n  journalctl --user -u residentd -f")
		if o.SocketPath != "" {
			fmt.Fprintf(stdout, "clients need the socket: export RESIDENTD_SOCKET=%s\n", o.SocketPath)
		}
	case "darwin":
		sock := o.SocketPath
		if sock == "" {
			sock = service.DarwinSocketPath(o.Home)
		}
		fmt.Fprintf(stdout, "then:\n  launchctl print gui/$(id -u)/%s\n  tail -f ~/Library/Logs/residentd/residentd.err.log\n", service.LaunchdLabel)
		fmt.Fprintf(stdout, "clients need the socket: export RESIDENTD_SOCKET=%s\n", sock)
	}
	return nil
}

// absInstallPaths fills in the binary and makes every path absolute: a
// service starts in / or $HOME, where relative paths would mean something else.
func absInstallPaths(o *service.InstallOptions) error {
	if o.Binary == "" {
		self, err := os.Executable()
		if err != nil {
			return fmt.Errorf("find own executable (pass --binary): %w", err)
		}
		o.Binary = self
	}
	for _, p := range []*string{&o.Binary, &o.Config, &o.StateDir, &o.SocketPath} {
		if *p == "" {
			continue
		}
		abs, err := filepath.Abs(*p)
		if err != nil {
			return fmt.Errorf("%w: path %q: %v", errUsage, *p, err)
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
	if o.Home == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			return fmt.Errorf("home directory: %w", err)
		}
		o.Home = home
	}
	return nil
}
