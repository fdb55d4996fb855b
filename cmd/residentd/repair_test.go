package main

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/residentd/residentd/apitype"
	"github.com/residentd/residentd/client"
	"github.com/residentd/residentd/internal/channel"
	"github.com/residentd/residentd/internal/store"
)

// stateWithChannels writes a state file with perChannel messages in each
// channel (enough that each one's msgs bucket is a branch page over leaf
// pages) and returns the page size and the last leaf page of ch's msgs,
// found through bbolt's page API and the branch page's header.
func stateWithChannels(t *testing.T, path string, perChannel int, ch string, channels ...string) (pageSize int, lastLeaf uint64) {
	t.Helper()
	st, err := store.Open(path, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	for _, c := range channels {
		var msgs []channel.Message
		for i := range perChannel {
			msgs = append(msgs, channel.Message{ID: fmt.Sprintf("%s-%04d", c, i), Channel: c, Author: "ann", AuthorKind: channel.KindUser,
				CreatedAt: t0.Add(time.Duration(i) * time.Second), Body: strings.Repeat("x", 200)})
		}
		if _, err := st.PutMessages(msgs); err != nil {
			t.Fatal(err)
		}
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	pageSize = db.Info().PageSize
	err = db.View(func(tx *bolt.Tx) error {
		root := tx.Bucket([]byte("channels")).Bucket([]byte(ch)).Bucket([]byte("msgs")).Root()
		info, err := tx.Page(int(root))
		if err != nil || info.Type != "branch" {
			return fmt.Errorf("msgs root page %d of %s: %+v, %v; want a branch", root, ch, info, err)
		}
		raw := make([]byte, pageSize)
		f, err := os.Open(path)
		if err != nil {
			return err
		}
		defer f.Close()
		if _, err := f.ReadAt(raw, int64(root)*int64(pageSize)); err != nil {
			return err
		}
		// The last branch element (16 bytes each after the 16-byte page
		// header) ends with its child's page id.
		lastLeaf = binary.LittleEndian.Uint64(raw[16+(info.Count-1)*16+8:])
		if li, err := tx.Page(int(lastLeaf)); err != nil || li.Type != "leaf" {
			return fmt.Errorf("page %d: %+v, %v; want a leaf", lastLeaf, li, err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return pageSize, lastLeaf
}

// TestDamagedStateFileUnderARunningDaemon: a page of one channel damaged
// under a running daemon fails the requests that read it with 500
// store_damaged — a push and a turn in that channel — while the daemon
// keeps serving the other channel, logs the damage and counts it in
// /metrics. Restarted, the daemon refuses the file, naming `residentd
// repair` and the file; `residentd repair` keeps the damaged file, says
// what was lost, and the daemon starts on the repaired one.
func TestDamagedStateFileUnderARunningDaemon(t *testing.T) {
	state := t.TempDir()
	path := filepath.Join(state, "residentd.db")
	pageSize, leaf := stateWithChannels(t, path, 300, "ch-a", "ch-a", "ch-b")
	d := startDaemon(t, serveOpts{state: state})

	// The page's header now names another page; bbolt panics on it.
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt(bytes.Repeat([]byte{0xFF}, 8), int64(leaf)*int64(pageSize)); err != nil {
		t.Fatal(err)
	}
	f.Close()

	c := dial(t, d.sock)
	ctx := context.Background()
	newest := func(ch, id string) []apitype.Message {
		return []apitype.Message{{ID: id, Channel: ch, Author: "ann", AuthorKind: apitype.AuthorUser, CreatedAt: time.Date(2026, 2, 1, 0, 0, 0, 0, time.UTC), Body: "after the damage"}}
	}
	_, err = c.PutMessages(ctx, newest("ch-a", "a-new"))
	var apiErr *client.Error
	if !errors.As(err, &apiErr) || apiErr.Status != 500 || apiErr.Code != apitype.CodeStoreDamaged || !strings.Contains(apiErr.Message, "residentd repair "+path) {
		t.Fatalf("push into the damaged channel: %v, want 500 store_damaged naming the repair", err)
	}
	ev, err := c.Turn(ctx, apitype.TurnRequest{Channel: "ch-a", Binding: "b-builtin", Text: "@agent hello"}, nil)
	if err == nil && (ev.Event != apitype.EventError || ev.Code != apitype.CodeStoreDamaged) {
		t.Fatalf("turn in the damaged channel ended with %+v, want an error event store_damaged", ev)
	}
	if err != nil && !client.IsCode(err, apitype.CodeStoreDamaged) {
		t.Fatalf("turn in the damaged channel: %v, want store_damaged", err)
	}

	// The daemon is up and the other channel works, turns included.
	if _, err := c.PutMessages(ctx, newest("ch-b", "b-new")); err != nil {
		t.Fatalf("push into the intact channel: %v", err)
	}
	if ev, err := c.Turn(ctx, apitype.TurnRequest{Channel: "ch-b", Binding: "b-builtin", Text: "@agent hello"}, nil); err != nil || ev.Event != apitype.EventDone {
		t.Fatalf("turn in the intact channel: %+v, %v", ev, err)
	}
	if h, err := c.Health(ctx); err != nil || h.Pid != d.cmd.Process.Pid {
		t.Fatalf("health after the damage: %+v, %v", h, err)
	}
	m, err := c.Metrics(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(m, "\nresidentd_store_damage_total 2\n") {
		t.Errorf("metrics do not count the two damaged requests:\n%s", grepLines(m, "residentd_store_damage"))
	}
	d.waitOutput(t, 10*time.Second, "store reported damage")
	d.stopCleanly(t)

	// Restarted, the daemon refuses the file and says what to do.
	refused := d.again(t)
	if code := refused.wait(t, 30*time.Second); code != exitError {
		t.Fatalf("start on the damaged file: exit %d, want %d. Output:\n%s", code, exitError, refused.out.String())
	}
	if out := refused.out.String(); !strings.Contains(out, "residentd repair "+path) || !strings.Contains(out, fmt.Sprintf("page %d", leaf)) {
		t.Fatalf("the refusal does not name the repair, the file and the page:\n%s", out)
	}

	var checkOut, checkErr bytes.Buffer
	if code := run([]string{"repair", "--check", path}, strings.NewReader(""), &checkOut, &checkErr); code != exitError ||
		!strings.Contains(checkOut.String(), fmt.Sprintf("lost: page %d", leaf)) || !strings.Contains(checkErr.String(), "residentd repair "+path) {
		t.Fatalf("repair --check of the damaged file: exit %d\n%s%s", code, checkOut.String(), checkErr.String())
	}
	if m, _ := filepath.Glob(path + ".*"); len(m) != 0 {
		t.Fatalf("repair --check left %v", m)
	}

	rep := startProc(t, []string{"repair", "--state", state}, childEnv())
	if code := rep.wait(t, 30*time.Second); code != exitOK {
		t.Fatalf("repair: exit %d. Output:\n%s", code, rep.out.String())
	}
	out := rep.out.String()
	kept, _ := filepath.Glob(path + ".damaged-*")
	if len(kept) != 1 || !strings.Contains(out, "kept as "+kept[0]) || !strings.Contains(out, fmt.Sprintf("lost: page %d of bucket \"channels/ch-a/msgs\" (leaf)", leaf)) {
		t.Fatalf("repair's report (kept %v):\n%s", kept, out)
	}

	waitHealthy(t, d.again(t), d.sock)
	c2 := dial(t, d.sock)
	if res, err := c2.PutMessages(ctx, newest("ch-a", "a-new")); err != nil || res.Added != 1 {
		t.Fatalf("push into the repaired channel: %+v, %v", res, err)
	}
	if res, err := c2.PutMessages(ctx, newest("ch-b", "b-new")); err != nil || res.Duplicates != 1 {
		t.Fatalf("ch-b's message pushed before the repair is not in the repaired file: %+v, %v", res, err)
	}
}

// grepLines is the lines of s that hold sub.
func grepLines(s, sub string) string {
	var b strings.Builder
	for l := range strings.Lines(s) {
		if strings.Contains(l, sub) {
			b.WriteString(l)
		}
	}
	return b.String()
}

// TestRepairCheckOnly: repair --check reports and changes nothing; exit 0
// on an intact file.
func TestRepairCheckOnly(t *testing.T) {
	state := t.TempDir()
	path := filepath.Join(state, "residentd.db")
	stateWithChannels(t, path, 300, "ch-a", "ch-a")
	var out, errOut bytes.Buffer
	if code := run([]string{"repair", "--check", path}, strings.NewReader(""), &out, &errOut); code != exitOK {
		t.Fatalf("repair --check: exit %d: %s", code, errOut.String())
	}
	if !strings.Contains(out.String(), "no damage found") {
		t.Errorf("repair --check output:\n%s", out.String())
	}
	if m, _ := filepath.Glob(path + ".*"); len(m) != 0 {
		t.Errorf("--check left %v", m)
	}
}

// TestRepairOfAFileCutShort: a state file that lost its last page (a copy
// cut short) is refused by repair --check as cut short, repair keeps what
// the pages still there hold, and the daemon starts on the copy knowing
// exactly the messages the repair says it kept. (Which records a cut
// keeps is TestTruncatedFileSalvaged's, in internal/store.)
func TestRepairOfAFileCutShort(t *testing.T) {
	state := t.TempDir()
	path := filepath.Join(state, "residentd.db")
	pageSize, _ := stateWithChannels(t, path, 300, "ch-a", "ch-a", "ch-b")
	rep, err := store.Verify(path)
	if err != nil {
		t.Fatal(err)
	}
	cut := int64(rep.Pages-1) * int64(pageSize) // the last page in use is gone
	if err := os.Truncate(path, cut); err != nil {
		t.Fatal(err)
	}
	var checkOut, checkErr bytes.Buffer
	if code := run([]string{"repair", "--check", path}, strings.NewReader(""), &checkOut, &checkErr); code != exitError ||
		!strings.Contains(checkOut.String(), fmt.Sprintf("lost: page %d (file): the file is cut short", rep.Pages-1)) {
		t.Fatalf("repair --check of the file cut short: exit %d\n%s%s", code, checkOut.String(), checkErr.String())
	}
	var out, errOut bytes.Buffer
	if code := run([]string{"repair", path}, strings.NewReader(""), &out, &errOut); code != exitOK {
		t.Fatalf("repair: exit %d\n%s%s", code, out.String(), errOut.String())
	}
	t.Logf("repair of a file cut one page short:\n%s", out.String())
	if !strings.Contains(out.String(), "BUCKET") || !strings.Contains(out.String(), "cut short") {
		t.Fatalf("repair's report:\n%s", out.String())
	}
	after, err := store.Verify(path)
	if err != nil || after.Damaged() {
		t.Fatalf("the repaired file: %v, %v", err, after.Summary())
	}
	kept := 0
	for _, b := range after.Buckets {
		if b.Name == "channels/*/msgs" {
			kept = b.Records
		}
	}

	// The daemon starts on the copy and knows the messages kept: pushed
	// again, they are duplicates; the others are new.
	d := startDaemon(t, serveOpts{state: state})
	c := dial(t, d.sock)
	var again []apitype.Message
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	for _, ch := range []string{"ch-a", "ch-b"} {
		for i := range 300 {
			again = append(again, apitype.Message{ID: fmt.Sprintf("%s-%04d", ch, i), Channel: ch, Author: "ann", AuthorKind: apitype.AuthorUser,
				CreatedAt: t0.Add(time.Duration(i) * time.Second), Body: strings.Repeat("x", 200)})
		}
	}
	res, err := c.PutMessages(context.Background(), again)
	if err != nil || res.Duplicates != kept || res.Added != 600-kept {
		t.Fatalf("the messages pushed again: %+v, %v; want %d duplicates (kept by the repair) and %d new", res, err, kept, 600-kept)
	}
}
