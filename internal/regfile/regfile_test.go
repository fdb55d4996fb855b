package regfile

import (
	"bytes"
	"errors"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// specials makes, in a directory short enough for a socket's path, one of
// each kind of file a path may name, and returns their paths by name.
func specials(t *testing.T) map[string]string {
	t.Helper()
	dir, err := os.MkdirTemp("", "rf")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	p := func(name string) string { return filepath.Join(dir, name) }
	if err := os.WriteFile(p("plain"), []byte("hello"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(p("fifo"), 0o600); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("unix", p("sock"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	if err := os.Mkdir(p("dir"), 0o700); err != nil {
		t.Fatal(err)
	}
	for link, target := range map[string]string{"link-plain": p("plain"), "link-fifo": p("fifo"), "link-null": "/dev/null"} {
		if err := os.Symlink(target, p(link)); err != nil {
			t.Fatal(err)
		}
	}
	return map[string]string{
		"plain": p("plain"), "fifo": p("fifo"), "sock": p("sock"), "dir": p("dir"), "missing": p("missing"),
		"link-plain": p("link-plain"), "link-fifo": p("link-fifo"), "link-null": p("link-null"),
		"null": "/dev/null", "zero": "/dev/zero",
	}
}

// TestOpenRefusesWhatIsNotARegularFile: every kind of file but a regular
// one is refused by what it is, before anything blocks or reads; a FIFO
// with no writer does not hold the open.
func TestOpenRefusesWhatIsNotARegularFile(t *testing.T) {
	paths := specials(t)
	tests := []struct {
		path     string
		nofollow bool
		what     string // "" for opened
		notExist bool
	}{
		{path: "plain"},
		{path: "plain", nofollow: true},
		{path: "link-plain"},
		{path: "link-plain", nofollow: true, what: "a symbolic link"},
		{path: "fifo", what: "a FIFO (named pipe)"},
		{path: "fifo", nofollow: true, what: "a FIFO (named pipe)"},
		{path: "link-fifo", what: "a FIFO (named pipe)"},
		{path: "sock", what: "a Unix socket"},
		{path: "dir", what: "a directory"},
		{path: "null", what: "a character device"},
		{path: "zero", what: "a character device"},
		{path: "link-null", what: "a character device"},
		{path: "missing", notExist: true},
	}
	for _, tt := range tests {
		name := tt.path
		if tt.nofollow {
			name += " nofollow"
		}
		t.Run(name, func(t *testing.T) {
			p := paths[tt.path]
			openf := Open
			if tt.nofollow {
				openf = OpenNoFollow
			}
			f, fi, err := openf(p)
			switch {
			case tt.notExist:
				if !errors.Is(err, fs.ErrNotExist) || !strings.Contains(err.Error(), p) {
					t.Fatalf("open %s: %v, want not-exist naming the path", p, err)
				}
			case tt.what == "":
				if err != nil {
					t.Fatalf("open %s: %v", p, err)
				}
				defer f.Close()
				if !fi.Mode().IsRegular() || fi.Size() != 5 {
					t.Fatalf("open %s: mode %v size %d", p, fi.Mode(), fi.Size())
				}
				// Handed over blocking, so os reads it as a file.
				if fl, err := fcntlFlags(f); err != nil || fl&syscall.O_NONBLOCK != 0 {
					t.Fatalf("flags %#x, %v: the file is still non-blocking", fl, err)
				}
			default:
				var nr *NotRegularError
				if !errors.Is(err, ErrNotRegular) || !errors.As(err, &nr) || nr.What != tt.what || nr.Path != p {
					t.Fatalf("open %s: %v, want %s refused", p, err, tt.what)
				}
				if want := p + " is " + tt.what + ", not a regular file"; err.Error() != want {
					t.Fatalf("error %q, want %q", err, want)
				}
			}
		})
	}
}

func fcntlFlags(f *os.File) (int, error) {
	sc, err := f.SyscallConn()
	if err != nil {
		return 0, err
	}
	var fl int
	var ferr error
	err = sc.Control(func(fd uintptr) {
		r, _, e := syscall.Syscall(syscall.SYS_FCNTL, fd, syscall.F_GETFL, 0)
		fl = int(r)
		if e != 0 {
			ferr = e
		}
	})
	return fl, errors.Join(err, ferr)
}

// TestReadIsBounded: a file of max bytes reads whole, one over is refused
// naming the path and the bound; special files are refused as by Open.
func TestReadIsBounded(t *testing.T) {
	paths := specials(t)
	big := filepath.Join(t.TempDir(), "big")
	if err := os.WriteFile(big, bytes.Repeat([]byte("x"), 1025), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		path string
		max  int64
		want string // "" for read whole
	}{
		{paths["plain"], 5, ""},
		{paths["link-plain"], 5, ""},
		{paths["plain"], 4, paths["plain"] + " holds 5 bytes, more than the 4 allowed"},
		{big, 1024, big + " holds 1025 bytes, more than the 1024 allowed"},
		{big, 1025, ""},
		{paths["zero"], 1 << 20, "/dev/zero is a character device, not a regular file"},
		{paths["fifo"], 1 << 20, paths["fifo"] + " is a FIFO (named pipe), not a regular file"},
		{paths["dir"], 1 << 20, paths["dir"] + " is a directory, not a regular file"},
	}
	for _, tt := range tests {
		data, err := Read(tt.path, tt.max)
		switch {
		case tt.want == "" && err != nil:
			t.Errorf("Read(%s, %d): %v", tt.path, tt.max, err)
		case tt.want == "":
			if want, _ := os.ReadFile(tt.path); !bytes.Equal(data, want) {
				t.Errorf("Read(%s, %d): %d bytes, want the file's %d", tt.path, tt.max, len(data), len(want))
			}
		case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
			t.Errorf("Read(%s, %d) = %d bytes, %v; want an error saying %q", tt.path, tt.max, len(data), err, tt.want)
		case strings.Contains(tt.want, "allowed") && !errors.Is(err, ErrTooLarge):
			t.Errorf("Read(%s, %d): %v does not wrap ErrTooLarge", tt.path, tt.max, err)
		}
	}
}
