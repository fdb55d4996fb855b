package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/residentd/residentd/apitype"
	"github.com/residentd/residentd/client"
	"github.com/residentd/residentd/internal/session"
	"github.com/residentd/residentd/internal/store"
	"github.com/residentd/residentd/internal/testkit"
)

// TestFullDiskThroughTheSocket runs `residentd serve` with its state on a
// filesystem of 8 MiB of the test's own (testkit.InSmallFS: skipped where
// the machine gives none) and fills it while a turn waits for a person's
// permission. Then a push and a new turn get 507 storage_full naming the
// state file; GET /v1/health and residentd status say the disk is full;
// the metrics count the refused writes; the log has an error line with
// the file. The waiting turn, allowed, ends done with its watermark
// failed, as a turn whose commit fails does. Once space is freed the next
// push works and ends the condition, the next turn shows the lines the
// failed one did not commit, and the file, the daemon stopped, holds
// everything that was stored and passes bbolt's check.
func TestFullDiskThroughTheSocket(t *testing.T) {
	testkit.InSmallFS(t, 8<<20, func(t *testing.T, dir string) {
		d := startDaemon(t, serveOpts{state: dir, config: askConfig})
		path := filepath.Join(dir, "residentd.db")
		c := dial(t, d.sock)
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		if _, err := c.PutMessages(ctx, messages("known", 3, 200)); err != nil {
			t.Fatal(err)
		}

		// A turn waits for a person's answer; its mention is 200 KiB, so
		// its commit needs room the file has not got.
		big := strings.Repeat("long mention ", 200<<10/13)
		asked := make(chan apitype.Event, 1)
		ended := make(chan apitype.Event, 1)
		go func() {
			ev, err := c.Turn(ctx, apitype.TurnRequest{Channel: "ch-full", Binding: "b-ask", RunID: "run-full", Text: "[[permission:edit]] " + big}, func(ev apitype.Event) {
				if ev.Event == apitype.EventPermissionRequest {
					asked <- ev
				}
			})
			if err != nil {
				ev = apitype.Event{Event: "client error", Message: err.Error()}
			}
			ended <- ev
		}()
		req := testkit.Recv(t, asked, time.Minute, "permission request").Permission

		filler := fillDisk(t, dir)
		_, err := c.PutMessages(ctx, messages("while-full", 8, 60<<10))
		storageFull(t, "a push", err, path)
		_, err = c.Submit(ctx, apitype.TurnRequest{Channel: "ch-full", Binding: "b-ask", RunID: "run-refused", Text: big})
		storageFull(t, "a new turn", err, path)

		h, err := c.Health(ctx)
		if err != nil || h.StorageFull == nil || h.StorageFull.Path != path || h.StorageFull.RefusedWrites < 2 || !strings.Contains(h.StorageFull.Error, "free of") {
			t.Fatalf("health on a full disk: %+v, %v; want storage_full naming %s, 2 or more writes refused", h.StorageFull, err, path)
		}
		d.cli(t, "", exitOK, "state file "+path+": its disk is full since", "status")
		metric(t, c, "residentd_store_disk_full", func(v float64) bool { return v == 1 })
		metric(t, c, "residentd_store_no_space_total", func(v float64) bool { return v >= 2 })
		d.waitOutput(t, 10*time.Second, "state file's disk is full")
		if line := loggedAt(d, "error", "state file's disk is full", path); line == nil {
			t.Errorf("no error-level log line naming %s:\n%s", path, d.out.String())
		} else {
			t.Logf("the log line: %v", line)
		}

		if err := c.Answer(ctx, "run-full", req.ID, optionOfKind(t, req, "allow_once")); err != nil {
			t.Fatal(err)
		}
		if done := testkit.Recv(t, ended, time.Minute, "the waiting turn's end"); done.Event != apitype.EventDone || done.Watermark != apitype.WatermarkFailed {
			t.Fatalf("the turn whose commit the full disk refused ended with %+v, want done with watermark failed", done)
		}

		if err := os.Remove(filler); err != nil {
			t.Fatal(err)
		}
		if _, err := c.PutMessages(ctx, messages("after", 8, 60<<10)); err != nil {
			t.Fatalf("a push once there is room: %v", err)
		}
		if h, err := c.Health(ctx); err != nil || h.StorageFull != nil {
			t.Fatalf("health after a stored write: %+v, %v; want no storage_full", h.StorageFull, err)
		}
		metric(t, c, "residentd_store_disk_full", func(v float64) bool { return v == 0 })
		d.waitOutput(t, 10*time.Second, "state file's disk has room again")
		next, err := c.Turn(ctx, apitype.TurnRequest{Channel: "ch-full", Binding: "b-ask", Text: "@asker again"}, nil)
		if err != nil || next.Event != apitype.EventDone || next.Watermark != apitype.WatermarkCommitted || next.Context == nil || !contains(next.Context.Shown, "known-0") {
			t.Fatalf("the next turn: %+v, %v; want done, committed, showing known-0 again", next, err)
		}

		d.stopCleanly(t)
		kept(t, path)
	})
}

// messages are n messages of ch-full with ids prefix-0... and bodies of
// size bytes.
func messages(prefix string, n, size int) []apitype.Message {
	var out []apitype.Message
	for i := range n {
		out = append(out, apitype.Message{ID: fmt.Sprintf("%s-%d", prefix, i), Channel: "ch-full", Author: "ann", AuthorKind: apitype.AuthorUser,
			CreatedAt: time.Date(2026, 3, 1, 9, 0, i, 0, time.UTC), Body: strings.Repeat("m", size)})
	}
	return out
}

// fillDisk writes a file in dir until its filesystem is full and returns
// its path.
func fillDisk(t *testing.T, dir string) string {
	t.Helper()
	path := filepath.Join(dir, "filler")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	chunk := make([]byte, 4096)
	for err == nil {
		_, err = f.Write(chunk)
	}
	if !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("filling %s: %v, want ENOSPC", dir, err)
	}
	return path
}

// storageFull fails the test unless err is 507 storage_full naming path.
func storageFull(t *testing.T, what string, err error, path string) {
	t.Helper()
	var e *client.Error
	if !errors.As(err, &e) || e.Status != 507 || e.Code != apitype.CodeStorageFull || !strings.Contains(e.Message, path) {
		t.Fatalf("%s on a full disk: %v, want 507 storage_full naming %s", what, err, path)
	}
}

// metric fails the test unless the daemon's sample name satisfies ok.
func metric(t *testing.T, c *client.Client, name string, ok func(float64) bool) {
	t.Helper()
	m, err := c.Metrics(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for l := range strings.Lines(m) {
		var v float64
		if n, _ := fmt.Sscanf(l, name+" %g", &v); n == 1 {
			if !ok(v) {
				t.Fatalf("%s is %v", name, v)
			}
			return
		}
	}
	t.Fatalf("no %s in the metrics", name)
}

// loggedAt is the daemon's first log line at level whose message starts
// with msg and whose path is path, or nil.
func loggedAt(d *daemonProc, level, msg, path string) map[string]any {
	for _, l := range d.logLines() {
		if l["level"] == level && strings.HasPrefix(fmt.Sprint(l["msg"]), msg) && l["path"] == path {
			return l
		}
	}
	return nil
}

func optionOfKind(t *testing.T, req *apitype.PermissionRequest, kind string) string {
	t.Helper()
	for _, o := range req.Options {
		if o.Kind == kind {
			return o.ID
		}
	}
	t.Fatalf("no %s option in %+v", kind, req.Options)
	return ""
}

func contains(ids []string, id string) bool {
	for _, s := range ids {
		if s == id {
			return true
		}
	}
	return false
}

// kept opens the stopped daemon's file: bbolt's check passes, the messages
// pushed before and after the full disk are there, the refused ones are
// not, and the conversation holds the turn after it.
func kept(t *testing.T, path string) {
	t.Helper()
	st, err := store.Open(path, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if err := st.Check(); err != nil {
		t.Fatalf("bbolt's check after the full disk: %v", err)
	}
	for id, want := range map[string]bool{"known-0": true, "known-2": true, "after-0": true, "after-7": true, "while-full-0": false} {
		if ok, err := st.HasMessage("ch-full", id); err != nil || ok != want {
			t.Errorf("message %s stored: %v, %v; want %v", id, ok, err, want)
		}
	}
	turns, err := st.Conversation(session.Key{Channel: "ch-full", Binding: "b-ask"})
	if err != nil || len(turns) != 2 || turns[0].Text == "" {
		t.Errorf("conversation: %d turns, %v; want the one turn stored after the disk had room", len(turns), err)
	}
}
