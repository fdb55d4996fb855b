package api

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/residentd/residentd/apitype"
	"github.com/residentd/residentd/client"
	"github.com/residentd/residentd/internal/permission"
	"github.com/residentd/residentd/internal/testkit"
)

// docExample is one curl command of docs/API.md and the status the doc
// says it answers with (the "# 200" that ends its last line).
type docExample struct {
	line   int // where the command starts in the file, 1-based
	cmd    string
	status int
}

var (
	// statusMark ends an example: "# 200", optionally with words after it.
	statusMark = regexp.MustCompile(`\s#\s*(\d{3})\b[^'"]*$`)
	// answerPath is a permission answer; it runs once the request is out.
	answerPath = regexp.MustCompile(`/v1/runs/([^/\s'"]+)/permissions/([^/\s'"?]+)`)
)

// docExamples returns the commands of the ```sh blocks of doc, in order.
// Every line of such a block is a curl command (a trailing backslash joins
// the next line), a comment or blank: anything else is an error, so no
// example is skipped silently.
func docExamples(doc string) ([]docExample, error) {
	var out []docExample
	var cur *docExample
	inSh := false
	for i, l := range strings.Split(doc, "\n") {
		switch {
		case !inSh && strings.HasPrefix(l, "```sh"):
			inSh = true
			continue
		case inSh && strings.HasPrefix(l, "```"):
			if cur != nil {
				return nil, fmt.Errorf("docs/API.md:%d: the block ends inside a command", i+1)
			}
			inSh = false
			continue
		case !inSh:
			continue
		}
		t := strings.TrimSpace(l)
		if cur == nil {
			if t == "" || strings.HasPrefix(t, "#") {
				continue
			}
			if !strings.HasPrefix(t, "curl ") {
				return nil, fmt.Errorf("docs/API.md:%d: %q is not a curl command; the doc test runs only those", i+1, t)
			}
			cur = &docExample{line: i + 1}
		}
		if cur.cmd != "" {
			cur.cmd += "\n"
		}
		cur.cmd += l
		if strings.HasSuffix(l, "\\") {
			continue
		}
		m := statusMark.FindStringSubmatch(l)
		if m == nil {
			return nil, fmt.Errorf("docs/API.md:%d: the example does not end with the status it answers (\"# 200\")", cur.line)
		}
		cur.status, _ = strconv.Atoi(m[1])
		out = append(out, *cur)
		cur = nil
	}
	if inSh {
		return nil, errors.New("docs/API.md: a ```sh block is not closed")
	}
	return out, nil
}

// docDaemon is the daemon the examples run against: the built-in agent as
// b-builtin, and as b-ask with the ask policy for the permission examples.
func docDaemon(t *testing.T) (sock string) {
	t.Helper()
	return newEnv(t, withAsk(permission.Ask, 5*time.Minute)).sock
}

// TestAPIDocExamplesRun runs the curl examples of docs/API.md in order,
// verbatim, with sh and S naming a daemon's socket, and checks each
// answers with the status the doc gives it. The examples chain: the turn
// examples name their run_id and the later ones use it.
func TestAPIDocExamplesRun(t *testing.T) {
	raw := testkit.ReadFile(t, "../../docs/API.md")
	examples, err := docExamples(string(raw))
	if err != nil {
		t.Fatal(err)
	}
	if len(examples) == 0 {
		t.Fatal("docs/API.md has no curl examples")
	}
	for _, tool := range []string{"sh", "curl"} {
		if _, err := exec.LookPath(tool); err != nil {
			if os.Getenv("CI") == "true" {
				t.Fatalf("%s is not installed; CI runs every example of docs/API.md: %v", tool, err)
			}
			t.Skipf("%s is not installed, so the %d examples of docs/API.md cannot run (CI requires it): %v", tool, len(examples), err)
		}
	}

	sock := docDaemon(t)
	// curl reads its config from CURL_HOME: the status goes to stderr, so
	// the command runs as written and its output stays what the doc shows.
	curlHome := t.TempDir()
	if err := os.WriteFile(filepath.Join(curlHome, ".curlrc"), []byte("write-out = \"%{stderr}doc-status %{http_code}\\n\"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	env := append(os.Environ(), "S="+sock, "CURL_HOME="+curlHome)

	for _, ex := range examples {
		if m := answerPath.FindStringSubmatch(ex.cmd); m != nil {
			awaitPermissionRequest(t, sock, m[1], m[2])
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		cmd := exec.CommandContext(ctx, "sh", "-c", ex.cmd)
		cmd.Env = env
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err := cmd.Run()
		cancel()
		got := -1
		sc := bufio.NewScanner(&stderr)
		var other []string
		for sc.Scan() {
			if v, ok := strings.CutPrefix(sc.Text(), "doc-status "); ok {
				got, _ = strconv.Atoi(v)
			} else {
				other = append(other, sc.Text())
			}
		}
		if err != nil || got != ex.status {
			t.Fatalf("docs/API.md:%d:\n%s\nstatus %d, the doc says %d; exit: %v\nstdout: %s\nstderr: %s",
				ex.line, ex.cmd, got, ex.status, err, stdout.Bytes(), strings.Join(other, "\n"))
		}
	}
	t.Logf("ran %d examples of docs/API.md", len(examples))
}

// awaitPermissionRequest follows run until it asks request, as the person
// who answers it would have read it in the stream first.
func awaitPermissionRequest(t *testing.T, sock, runID, request string) {
	t.Helper()
	c := &client.Client{Socket: sock}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	asked := make(chan struct{})
	var once sync.Once
	followed := make(chan error, 1)
	go func() {
		_, err := c.Follow(ctx, runID, 0, func(ev apitype.Event) {
			if ev.Event == apitype.EventPermissionRequest && ev.Permission != nil && ev.Permission.ID == request {
				once.Do(func() { close(asked) })
			}
		})
		followed <- err
	}()
	select {
	case <-asked:
		cancel()
		<-followed
	case err := <-followed:
		t.Fatalf("run %q ended without asking %q: %v", runID, request, err)
	}
}
