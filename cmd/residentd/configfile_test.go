package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/residentd/residentd/apitype"
	"github.com/residentd/residentd/client"
	"github.com/residentd/residentd/internal/testkit"
)

// The config file as serve reads it: refused with the file and the reason
// when it should not be read or holds what it should not, and found at the
// default path install uses when serve is given none.

// TestServeRefusesABadConfig: a config that is not a regular file, holds
// more than one JSON object or a key twice, or a number out of its range
// (the file's or the command line's) stops serve at once with exit code 1,
// naming the file and the problem; nothing is served.
func TestServeRefusesABadConfig(t *testing.T) {
	dir := testkit.ShortDir(t)
	fifo, sock, sub := filepath.Join(dir, "fifo"), filepath.Join(dir, "sock"), filepath.Join(dir, "sub")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	if err := os.Mkdir(sub, 0o700); err != nil {
		t.Fatal(err)
	}
	file := func(body string) string { return writeConfig(t, body) }
	binding := `"bindings":[{"id":"b-x","handle":"@x","command":$EXE}]`
	for _, tc := range []struct {
		name, config, want string
		flags              []string
	}{
		{"a FIFO", fifo, fifo + " is a FIFO (named pipe), not a regular file", nil},
		{"a socket", sock, sock + " is a Unix socket, not a regular file", nil},
		{"a device", "/dev/null", "/dev/null is a character device, not a regular file", nil},
		{"a directory", sub, sub + " is a directory, not a regular file", nil},
		{"trailing data", file(`{` + binding + `} x`), "data after the config object", nil},
		{"two objects", file(`{` + binding + `}{"max_live":8}`), "data after the config object", nil},
		{"a key twice", file(`{"max_live":2,"max_live":8,` + binding + `}`), `key "max_live" is given twice`, nil},
		{"negative max_live", file(`{"max_live":-5,` + binding + `}`), "invalid configuration: max_live -5 must not be negative", nil},
		{"negative idle_timeout", file(`{"idle_timeout":"-1m",` + binding + `}`), `idle_timeout "-1m0s" must not be negative`, nil},
		{"warn_at over 1", file(`{"budgets":{"warn_at":1.5},` + binding + `}`), "warn_at 1.5 must be a share between 0 and 1", nil},
		{"system_file a FIFO", file(`{"bindings":[{"id":"b-x","handle":"@x","command":$EXE,"system_file":"` + fifo + `"}]}`),
			`binding "b-x": system_file: ` + fifo + " is a FIFO (named pipe), not a regular file", nil},
		{"--max-live over max_processes", file(`{"max_processes":5,` + binding + `}`), "max_processes 5 is below max_live 8", []string{"--max-live", "8"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := startProc(t, serveArgs(t.TempDir(), filepath.Join(testkit.ShortDir(t), "s.sock"), append(tc.flags, "--config", tc.config)...), childEnv())
			if code := p.wait(t, 30*time.Second); code != exitError {
				t.Fatalf("exit code %d, want %d. Output:\n%s", code, exitError, p.out.String())
			}
			out := p.out.String()
			if !strings.Contains(out, "residentd: config") || !strings.Contains(out, tc.config) || !strings.Contains(out, tc.want) {
				t.Fatalf("output does not name the file %s and say %q:\n%s", tc.config, tc.want, out)
			}
			if strings.Contains(out, `"serving"`) {
				t.Fatalf("served with a refused config:\n%s", out)
			}
		})
	}
	var out, errOut bytes.Buffer
	if code := run([]string{"serve", "--max-live", "-5"}, strings.NewReader(""), &out, &errOut); code != exitUsage || !strings.Contains(errOut.String(), "--max-live -5") {
		t.Fatalf("serve --max-live -5: exit %d, %q; want %d naming the flag", code, errOut.String(), exitUsage)
	}
}

// logged is the first of p's JSON log lines whose msg is msg, or nil.
func logged(p *proc, msg string) map[string]any {
	for _, l := range p.logLines() {
		if l["msg"] == msg {
			return l
		}
	}
	return nil
}

// TestServeReadsTheDefaultConfigFile: serve given no --config reads
// $XDG_CONFIG_HOME/residentd/config.json, or ~/.config/residentd/config.json
// without it (the file install passes), says so in its log, and reloads
// it; with nothing there it runs the built-in default and says that; a
// FIFO there is refused, not passed over.
func TestServeReadsTheDefaultConfigFile(t *testing.T) {
	exe, err := json.Marshal(testkit.Exe(t))
	if err != nil {
		t.Fatal(err)
	}
	config := []byte(`{"bindings":[{"id":"b-extra","handle":"@extra","command":` + string(exe) + `}]}`)
	// place puts the config under home's config folder.
	place := func(t *testing.T, configHome string) string {
		p := filepath.Join(configHome, "residentd", "config.json")
		if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, config, 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	serveIn := func(t *testing.T, env ...string) (*proc, string) {
		sock := filepath.Join(testkit.ShortDir(t), "s.sock")
		return startProc(t, serveArgs(t.TempDir(), sock), childEnv(env...)), sock
	}
	for _, tc := range []struct {
		name string
		env  func(t *testing.T) (env []string, file string)
	}{
		{"XDG_CONFIG_HOME", func(t *testing.T) ([]string, string) {
			ch := t.TempDir()
			return []string{"XDG_CONFIG_HOME=" + ch}, place(t, ch)
		}},
		{"HOME", func(t *testing.T) ([]string, string) {
			home := t.TempDir()
			return []string{"HOME=" + home, "XDG_CONFIG_HOME="}, place(t, filepath.Join(home, ".config"))
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env, file := tc.env(t)
			p, sock := serveIn(t, env...)
			if h := waitHealthy(t, p, sock); h.Bindings != 2 {
				t.Fatalf("health %+v: want b-extra from %s and b-builtin", h, file)
			}
			p.waitOutput(t, 30*time.Second, `"serving"`)
			if l := logged(p, "reading the default config file (no --config given)"); l == nil || l["config"] != file {
				t.Errorf("no log line saying it read %s: %v\n%s", file, l, p.out.String())
			}
			if l := logged(p, "serving"); l == nil || l["config"] != file {
				t.Errorf("the serving line does not name %s: %v", file, l)
			}
			out, err := dial(t, sock).ReloadConfig(context.Background())
			if err != nil || out.File != file {
				t.Fatalf("reload: %+v, %v; want %s read again", out, err, file)
			}
			p.stopCleanly(t)
		})
	}
	// Nothing there: an empty config home, or one whose residentd is a file.
	for _, fileThere := range []bool{false, true} {
		t.Run(map[bool]string{false: "none", true: "none under a file"}[fileThere], func(t *testing.T) {
			ch := t.TempDir()
			if fileThere {
				if err := os.WriteFile(filepath.Join(ch, "residentd"), config, 0o600); err != nil {
					t.Fatal(err)
				}
			}
			p, sock := serveIn(t, "XDG_CONFIG_HOME="+ch)
			if h := waitHealthy(t, p, sock); h.Bindings != 1 {
				t.Fatalf("health %+v: want b-builtin only", h)
			}
			p.waitOutput(t, 30*time.Second, `"serving"`)
			if l := logged(p, "serving"); l == nil || l["config"] != "none (the built-in binding only)" {
				t.Errorf("the serving line: %v, want no config named", l)
			}
			_, err := dial(t, sock).ReloadConfig(context.Background())
			var ce *client.Error
			if !errors.As(err, &ce) || ce.Status != http.StatusConflict || ce.Code != apitype.CodeNoConfigFile {
				t.Fatalf("reload: %v, want 409 no_config_file", err)
			}
			p.stopCleanly(t)
		})
	}
	t.Run("a FIFO there", func(t *testing.T) {
		ch := testkit.ShortDir(t)
		fifo := filepath.Join(ch, "residentd", "config.json")
		if err := os.Mkdir(filepath.Dir(fifo), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := syscall.Mkfifo(fifo, 0o600); err != nil {
			t.Fatal(err)
		}
		p, _ := serveIn(t, "XDG_CONFIG_HOME="+ch)
		if code := p.wait(t, 30*time.Second); code != exitError || !strings.Contains(p.out.String(), fifo+" is a FIFO (named pipe), not a regular file") {
			t.Fatalf("exit code %d, want %d refusing the FIFO at the default path. Output:\n%s", code, exitError, p.out.String())
		}
	})
}
