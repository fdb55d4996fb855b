package acp

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/residentd/residentd/internal/testkit"
)

// TestReadTextFileRefusesSpecialFiles: an agent's fs/read_text_file of a
// FIFO, a socket, a character device or a directory inside its working
// directory is refused at once, saying what the path is. A FIFO used to
// hold the request until a writer came; /dev/zero used to be read until
// memory ran out.
func TestReadTextFileRefusesSpecialFiles(t *testing.T) {
	dir := testkit.ShortDir(t)
	if err := syscall.Mkfifo(filepath.Join(dir, "pipe"), 0o600); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("unix", filepath.Join(dir, "sock"))
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	if err := os.Mkdir(filepath.Join(dir, "sub"), 0o700); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		dir, path, what string
	}{
		{dir, "pipe", "a FIFO (named pipe)"},
		{dir, "sock", "a Unix socket"},
		{dir, "sub", "a directory"},
		// A device inside the working directory takes /dev as one: only
		// root can make one elsewhere.
		{"/dev", "/dev/zero", "a character device"},
		{"/dev", "null", "a character device"},
	} {
		t.Run(tt.path, func(t *testing.T) {
			spec := builtinSpec(t)
			spec.Dir = tt.dir
			a := start(t, spec)
			t.Cleanup(func() { // should a read block, wake it so the test fails instead of hanging
				if f, err := os.OpenFile(filepath.Join(dir, "pipe"), os.O_RDWR|syscall.O_NONBLOCK, 0); err == nil {
					f.Close()
				}
			})
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			var c collector
			if _, err := a.Prompt(ctx, newSession(t, a), "[[read:"+tt.path+"]]", c.on); err != nil {
				t.Fatalf("Prompt: %v", err)
			}
			thoughts := strings.Join(c.texts("agent_thought_chunk"), "\n")
			if want := " is " + tt.what + ", not a regular file"; !strings.Contains(thoughts, want) {
				t.Fatalf("thoughts %q, want %q", thoughts, want)
			}
		})
	}
}
