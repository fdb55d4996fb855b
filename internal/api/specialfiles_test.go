package api

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/residentd/residentd/apitype"
	"github.com/residentd/residentd/client"
	"github.com/residentd/residentd/internal/config"
	"github.com/residentd/residentd/internal/testkit"
)

// Paths a push or a config names that are not regular files: refused at
// once, saying what they are, through the socket of a real daemon; a flood
// of pushes naming a FIFO leaves the daemon as it was.

// specialFolder is a folder, short enough for a socket's path, holding a
// FIFO, a Unix socket (listening) and a directory, named by what each is.
func specialFolder(t *testing.T) (dir string, names map[string]string) {
	t.Helper()
	dir = testkit.ShortDir(t)
	if err := syscall.Mkfifo(filepath.Join(dir, "pipe"), 0o600); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("unix", filepath.Join(dir, "sock"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	if err := os.Mkdir(filepath.Join(dir, "sub"), 0o700); err != nil {
		t.Fatal(err)
	}
	return dir, map[string]string{"pipe": "a FIFO (named pipe)", "sock": "a Unix socket", "sub": "a directory"}
}

// unblock registers, to run before the cleanups registered so far, an
// open of fifo for reading and writing, which never waits and wakes every
// open waiting on it: a daemon whose requests blocked there then fails the
// test instead of hanging its end.
func unblock(t *testing.T, fifo string) {
	t.Cleanup(func() {
		if f, err := os.OpenFile(fifo, os.O_RDWR|syscall.O_NONBLOCK, 0); err == nil {
			f.Close()
		}
	})
}

// quickly is a context for a request that must be answered at once: one
// that blocked would fail the test at the deadline instead of hanging it.
func quickly(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// wantAPIError fails the test unless err is the API error status/code whose
// message holds every one of want.
func wantAPIError(t *testing.T, err error, status int, code string, want ...string) {
	t.Helper()
	var ae *client.Error
	if !errors.As(err, &ae) || ae.Status != status || ae.Code != code {
		t.Fatalf("got %v; want %d %s", err, status, code)
	}
	for _, w := range want {
		if !strings.Contains(ae.Message, w) {
			t.Errorf("message %q lacks %q", ae.Message, w)
		}
	}
}

// TestSpecialFilesRefusedAsAttachments: an attachment path naming a FIFO,
// a socket, a character device or a directory inside the attachments folder
// is refused at once with invalid_attachment saying what it is, and nothing
// of the batch is stored.
func TestSpecialFilesRefusedAsAttachments(t *testing.T) {
	dir, names := specialFolder(t)
	e := newEnv(t, func(c *config.Config) { c.Attachments.Dir = dir })
	unblock(t, filepath.Join(dir, "pipe"))
	// A device inside the folder takes another folder: only root makes one.
	dev := newEnv(t, func(c *config.Config) { c.Attachments.Dir = "/dev" })
	cases := []struct {
		env        *env
		path, what string
	}{
		{dev, "zero", "a character device"},
		{dev, "/dev/null", "a character device"},
	}
	for name, what := range names {
		cases = append(cases, struct {
			env        *env
			path, what string
		}{e, name, what})
	}
	for i, c := range cases {
		t.Run(c.path, func(t *testing.T) {
			id := "m" + strconv.Itoa(i)
			_, err := c.env.c.PutMessages(quickly(t), []apitype.Message{
				line("ok"+id, "fine", 1),
				attached(id, "a file", 2, apitype.Attachment{Type: "text/plain", Path: c.path}),
			})
			wantAPIError(t, err, http.StatusBadRequest, apitype.CodeInvalidAttachment,
				fmt.Sprintf(`messages[1] (id %q) attachments[0]`, id), " is "+c.what+", not a regular file", "nothing of the batch was written")
			for _, m := range []string{"ok" + id, id} {
				if has, err := c.env.inbox.HasMessage("ch", m); err != nil || has {
					t.Errorf("message %s stored (%v, %v)", m, has, err)
				}
			}
		})
	}
}

// procStatus is a number field of /proc/self/status (Threads; VmRSS in kB).
func procStatus(t *testing.T, field string) int {
	t.Helper()
	for l := range strings.SplitSeq(string(testkit.ReadFile(t, "/proc/self/status")), "\n") {
		if v, ok := strings.CutPrefix(l, field+":"); ok {
			n, err := strconv.Atoi(strings.TrimSuffix(strings.TrimSpace(v), " kB"))
			if err != nil {
				t.Fatalf("/proc/self/status %s: %q", field, v)
			}
			return n
		}
	}
	t.Fatalf("/proc/self/status has no %s", field)
	return 0
}

func openFDs(t *testing.T) int {
	t.Helper()
	fds, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(fds)
}

// TestFIFOAttachmentFlood: 1,000 concurrent pushes naming a FIFO (which
// used to block each in open(2), one OS thread apiece, until the daemon ran
// out of threads and descriptors) are each refused at once; the health
// endpoint answers during the flood and after it as before, and the
// process's threads and open descriptors end where they started.
func TestFIFOAttachmentFlood(t *testing.T) {
	if _, err := os.Stat("/proc/self/status"); err != nil {
		t.Skipf("no /proc/self/status to count threads in: %v", err)
	}
	const n = 1000
	dir, _ := specialFolder(t)
	e := newEnv(t, func(c *config.Config) { c.Attachments.Dir = dir })
	unblock(t, filepath.Join(dir, "pipe"))
	push := func(ctx context.Context, id string) error {
		_, err := e.c.PutMessages(ctx, []apitype.Message{attached(id, "flood", 1, apitype.Attachment{Type: "text/plain", Path: "pipe"})})
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	// Once first, so what any request allocates once is there before the count.
	wantAPIError(t, push(ctx, "warm"), http.StatusBadRequest, apitype.CodeInvalidAttachment, "is a FIFO (named pipe)")
	health0, err := e.c.Health(ctx)
	if err != nil {
		t.Fatal(err)
	}
	e.c.Close()
	debug.FreeOSMemory()
	threads0, fds0, rss0 := procStatus(t, "Threads"), openFDs(t), procStatus(t, "VmRSS")

	start := make(chan struct{})
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			<-start
			errs[i] = push(ctx, fmt.Sprintf("f%d", i))
		})
	}
	close(start)
	during, herr := e.c.Health(ctx)
	wg.Wait()
	if herr != nil || !during.OK {
		t.Fatalf("health during the flood: %+v, %v", during, herr)
	}
	for i, err := range errs {
		var ae *client.Error
		if !errors.As(err, &ae) || ae.Code != apitype.CodeInvalidAttachment || !strings.Contains(ae.Message, "is a FIFO (named pipe), not a regular file") {
			t.Fatalf("push %d of the flood: %v; want invalid_attachment naming the FIFO", i, err)
		}
	}
	threadsPeak := procStatus(t, "Threads")
	e.c.Close()
	// The server closes its side of each connection when it reads the
	// client's close: nothing signals that here, so poll for it.
	testkit.WaitFor(t, 30*time.Second, func() bool { return openFDs(t) <= fds0 }, func() string {
		return fmt.Sprintf("%d open descriptors after the flood, %d before", openFDs(t), fds0)
	})
	debug.FreeOSMemory()
	threads1, fds1, rss1 := procStatus(t, "Threads"), openFDs(t), procStatus(t, "VmRSS")
	t.Logf("%d pushes naming a FIFO: threads %d before, %d at the end (the runtime keeps idle ones), fds %d -> %d, RSS %d kB -> %d kB",
		n, threads0, threadsPeak, fds0, fds1, rss0, rss1)
	// Blocked opens held a thread each: n of them. A handful more is the
	// runtime serving n connections on its own threads.
	if threadsPeak > threads0+32 || threads1 > threads0+32 {
		t.Errorf("threads %d before the flood, %d after: the requests held threads", threads0, threads1)
	}
	health1, err := e.c.Health(ctx)
	if err != nil || health1.OK != health0.OK || health1.Live != health0.Live || health1.Busy != health0.Busy || health1.Queued != health0.Queued {
		t.Fatalf("health after the flood %+v (%v), before %+v", health1, err, health0)
	}
}

// TestAttachmentCountsBounded: a message may carry max_per_message
// attachments and a push max_per_push in all; one over either refuses the
// whole batch with invalid_attachment naming the bound, before anything is
// read, and stores no message of it. The defaults are 16 and 64.
func TestAttachmentCountsBounded(t *testing.T) {
	tiny := apitype.Attachment{Name: "a.txt", Type: "text/plain", Data: base64.StdEncoding.EncodeToString([]byte("hi"))}
	atts := func(k int) []apitype.Attachment {
		out := make([]apitype.Attachment, k)
		for i := range out {
			out[i] = tiny
		}
		return out
	}
	// batch is messages of the given attachment counts, ids prefix-i.
	batch := func(prefix string, counts ...int) []apitype.Message {
		var msgs []apitype.Message
		for i, k := range counts {
			msgs = append(msgs, attached(fmt.Sprintf("%s-%d", prefix, i), "files", i+1, atts(k)...))
		}
		return msgs
	}
	for _, tc := range []struct {
		name              string
		perMessage, total int // in force
		tweak             func(*config.Config)
	}{
		{"defaults", 16, 64, nil},
		{"configured", 3, 5, func(c *config.Config) { c.Attachments.MaxPerMessage, c.Attachments.MaxPerPush = 3, 5 }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var tweaks []func(*config.Config)
			if tc.tweak != nil {
				tweaks = append(tweaks, tc.tweak)
			}
			e := newEnv(t, tweaks...)
			// At the bounds: taken.
			e.push(t, batch("fits", tc.perMessage)...)
			atBound := []int{}
			for left := tc.total; left > 0; left -= min(left, tc.perMessage) {
				atBound = append(atBound, min(left, tc.perMessage))
			}
			e.push(t, batch("fills", atBound...)...)

			overPush := append([]int{0}, atBound...)
			overPush[0] = 1
			for _, c := range []struct {
				name string
				msgs []apitype.Message
				want []string
			}{
				{"one message over", batch("over", 0, tc.perMessage+1), []string{
					fmt.Sprintf(`messages[1] (id "over-1") carries %d attachments, the limit is %d per message (attachments.max_per_message)`, tc.perMessage+1, tc.perMessage)}},
				{"the push over", batch("push", overPush...), []string{
					fmt.Sprintf("the push carries %d attachments over %d messages, the limit is %d per push (attachments.max_per_push)", tc.total+1, len(overPush), tc.total)}},
			} {
				_, err := e.c.PutMessages(quickly(t), c.msgs)
				wantAPIError(t, err, http.StatusBadRequest, apitype.CodeInvalidAttachment, append(c.want, "nothing of the batch was written")...)
				for _, m := range c.msgs {
					if has, err := e.inbox.HasMessage("ch", m.ID); err != nil || has {
						t.Errorf("%s: message %s stored (%v, %v)", c.name, m.ID, has, err)
					}
				}
			}
		})
	}
}

// reloadRefused reloads over e's socket and fails the test unless the
// reload answers at once with 422 invalid_config naming e's file and every
// one of want.
func (e *reloadEnv) reloadRefused(t *testing.T, want ...string) {
	t.Helper()
	_, err := e.c.ReloadConfig(quickly(t))
	wantAPIError(t, err, http.StatusUnprocessableEntity, apitype.CodeInvalidConfig, append(want, e.file, "the config in force stays")...)
}

// TestReloadRefusesSpecialFiles: a config file, or a binding's system_file,
// that is a FIFO, a socket, a device or a directory refuses the reload at
// once with invalid_config saying what it is; the next reload of a good
// file is applied (a FIFO used to hold the reload, and every one after it).
func TestReloadRefusesSpecialFiles(t *testing.T) {
	e := newReloadEnv(t, "b-keep")
	good := testkit.ReadFile(t, e.file)
	dir, names := specialFolder(t)
	unblock(t, filepath.Join(dir, "pipe"))
	unblock(t, e.file)
	names["/dev/zero"] = "a character device"
	at := func(name string) string {
		if filepath.IsAbs(name) {
			return name
		}
		return filepath.Join(dir, name)
	}
	for name, what := range names {
		t.Run("config "+name, func(t *testing.T) {
			if err := os.Remove(e.file); err != nil {
				t.Fatal(err)
			}
			// The FIFO and the directory at the file's own path; the socket
			// and the device by a link to them, as a file a person's
			// dotfiles link in would be.
			var err error
			switch name {
			case "pipe":
				err = syscall.Mkfifo(e.file, 0o600)
			case "sub":
				err = os.Mkdir(e.file, 0o700)
			default:
				err = os.Symlink(at(name), e.file)
			}
			if err != nil {
				t.Fatal(err)
			}
			e.reloadRefused(t, "is "+what+", not a regular file")
			if err := os.Remove(e.file); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(e.file, good, 0o600); err != nil {
				t.Fatal(err)
			}
			if a := action(t, e.reload(t), "b-keep"); a.Action != apitype.ReloadUnchanged {
				t.Fatalf("the good file after it: %+v", a)
			}
		})
		t.Run("system_file "+name, func(t *testing.T) {
			e.write(t, func(c *config.Config) {
				b := e.binding(c, "b-keep")
				b.System, b.SystemFile = "", at(name)
			})
			e.reloadRefused(t, `binding "b-keep": system_file: `+at(name)+" is "+what+", not a regular file")
			if err := os.WriteFile(e.file, good, 0o600); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestReloadRefusesWhatTheFileShouldNotHold: data after the object, a
// second object, a key twice and numbers out of range each refuse the
// reload with 422 invalid_config naming the file and the problem; the
// config in force stays (max_live 4 in health), and a good file reloads.
func TestReloadRefusesWhatTheFileShouldNotHold(t *testing.T) {
	e := newReloadEnv(t, "b-keep")
	good := testkit.ReadFile(t, e.file)
	obj := strings.TrimSpace(string(good))
	// with is the good file with setting (a dotted path) set to the JSON v.
	with := func(setting, v string) string {
		var m map[string]any
		if err := json.Unmarshal(good, &m); err != nil {
			t.Fatal(err)
		}
		obj := m
		path := strings.Split(setting, ".")
		for _, k := range path[:len(path)-1] {
			if obj[k] == nil {
				obj[k] = map[string]any{}
			}
			obj = obj[k].(map[string]any)
		}
		obj[path[len(path)-1]] = json.RawMessage(v)
		b, err := json.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	for _, tc := range []struct{ name, body, want string }{
		{"trailing data", obj + "\nx", "data after the config object"},
		{"two objects", obj + `{"max_live":8}`, `data after the config object, at byte ` + strconv.Itoa(len(obj)) + ` ("{\"max_live\":8}")`},
		{"null", "null", "the file must hold one JSON object"},
		{"a key twice", `{"max_live":2,"max_live":8,` + strings.TrimPrefix(obj, "{"), `key "max_live" is given twice`},
		{"negative max_live", with("max_live", "-5"), "max_live -5 must not be negative"},
		{"negative queue_len", with("queue_len", "-1"), "queue_len -1 must not be negative"},
		{"negative idle_timeout", with("idle_timeout", `"-1m"`), `idle_timeout "-1m0s" must not be negative`},
		{"negative runs.events", with("runs.events", "-1"), "runs.events -1 must not be negative"},
		{"negative context.limit", with("context.limit", "-1"), "context.limit -1 must not be negative"},
		{"negative attachments", with("attachments.max_per_push", "-1"), "attachments.max_per_push -1 must not be negative"},
		{"warn_at over 1", with("budgets.warn_at", "1.5"), "warn_at 1.5 must be a share between 0 and 1"},
	} {
		if err := os.WriteFile(e.file, []byte(tc.body), 0o600); err != nil {
			t.Fatal(err)
		}
		t.Run(tc.name, func(t *testing.T) { e.reloadRefused(t, tc.want) })
	}
	if h, err := e.c.Health(quickly(t)); err != nil || h.MaxLive != 4 {
		t.Fatalf("health after refused reloads: %+v, %v; want max_live 4 in force", h, err)
	}
	if err := os.WriteFile(e.file, good, 0o600); err != nil {
		t.Fatal(err)
	}
	if a := action(t, e.reload(t), "b-keep"); a.Action != apitype.ReloadUnchanged {
		t.Fatalf("the good file again: %+v", a)
	}
}

// TestTurnWithSpecialSystemFile: a system_file that becomes a FIFO (or a
// device, a socket, a directory) after the daemon read it fails the next
// cold turn at once, the error saying what it is, and the key's next turn
// runs again once the file is back.
func TestTurnWithSpecialSystemFile(t *testing.T) {
	e := newReloadEnv(t, "b-frame")
	framing := filepath.Join(e.dir, "framing.txt")
	if err := os.WriteFile(framing, []byte("You are @agent, framed by a file."), 0o600); err != nil {
		t.Fatal(err)
	}
	e.write(t, func(c *config.Config) {
		b := e.binding(c, "b-frame")
		b.System, b.SystemFile = "", framing
	})
	if a := action(t, e.reload(t), "b-frame"); a.Action != apitype.ReloadNewSession {
		t.Fatalf("b-frame: %+v", a)
	}
	unblock(t, framing)
	dir, names := specialFolder(t)
	names["/dev/zero"] = "a character device"
	i := 0
	for name, what := range names {
		t.Run(name, func(t *testing.T) {
			i++
			if err := os.Remove(framing); err != nil {
				t.Fatal(err)
			}
			var err error
			switch {
			case name == "pipe":
				err = syscall.Mkfifo(framing, 0o600)
			case filepath.IsAbs(name):
				err = os.Symlink(name, framing)
			default:
				err = os.Symlink(filepath.Join(dir, name), framing)
			}
			if err != nil {
				t.Fatal(err)
			}
			ch := "ch-" + strconv.Itoa(i) // a new key: a cold turn reads the framing
			_, err = e.c.Turn(quickly(t), apitype.TurnRequest{Channel: ch, Binding: "b-frame", MessageID: "m1", Text: "@agent m1"}, nil)
			if err == nil || !strings.Contains(err.Error(), "system_file") || !strings.Contains(err.Error(), "is "+what+", not a regular file") {
				t.Fatalf("cold turn with the framing %s: %v; want it refused at once saying so", what, err)
			}
			if err := os.Remove(framing); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(framing, []byte("You are @agent, framed by a file."), 0o600); err != nil {
				t.Fatal(err)
			}
			if r := e.mustTurn(t, ch, "b-frame", "m2"); r.done.Shape != "cold" {
				t.Fatalf("the turn after the file is back: %s", r.done.Shape)
			}
			recs := records(t, e.rec("b-frame"))
			if last := recs[len(recs)-1]; !strings.HasPrefix(last["prompt"].(string), "You are @agent, framed by a file.") {
				t.Fatalf("the turn after the file is back was not sent the framing: %.80q", last["prompt"])
			}
		})
	}
}
