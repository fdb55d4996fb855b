package store

import (
	"bufio"
	"encoding/binary"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"syscall"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/residentd/residentd/apitype"
	"github.com/residentd/residentd/internal/channel"
	"github.com/residentd/residentd/internal/session"
	"github.com/residentd/residentd/internal/testkit"
)

// TestMain doubles as a lock holder: a child started with
// STORE_TEST_HOLD=<path> opens the store, says "ready", and keeps it open
// until its stdin closes.
// TestMain lets the test binary hold a store open in a child process.
func TestMain(m *testing.M) {
	testkit.Main(m, testkit.Role{Env: "STORE_TEST_HOLD", Main: func() int {
		s, err := Open(os.Getenv("STORE_TEST_HOLD"), Options{})
		if err != nil {
			os.Stderr.WriteString(err.Error() + "\n")
			return 2
		}
		os.Stdout.WriteString("ready\n")
		_, _ = io.Copy(io.Discard, os.Stdin)
		_ = s.Close()
		return 0
	}})
}

func openTest(t testing.TB, opts Options) *Store {
	t.Helper()
	s, err := Open(filepath.Join(t.TempDir(), "state", "residentd.db"), opts)
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func reopen(t *testing.T, s *Store, opts Options) *Store {
	t.Helper()
	if err := s.Close(); err != nil {
		t.Fatalf("close: %v", err)
	}
	s2, err := Open(s.Path(), opts)
	if err != nil {
		t.Fatalf("reopen: %v", err)
	}
	t.Cleanup(func() { _ = s2.Close() })
	return s2
}

func TestOpenModesUnderUmaskZero(t *testing.T) {
	old := syscall.Umask(0)
	defer syscall.Umask(old)

	dir := filepath.Join(t.TempDir(), "a", "b")
	path := filepath.Join(dir, "residentd.db")
	s, err := Open(path, Options{})
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	defer s.Close()
	if s.Path() != path {
		t.Errorf("Path() = %q, want %q", s.Path(), path)
	}
	for _, d := range []string{filepath.Dir(dir), dir} {
		fi, err := os.Stat(d)
		if err != nil {
			t.Fatal(err)
		}
		if got := fi.Mode().Perm(); got != 0o700 {
			t.Errorf("dir %s mode = %o, want 700", d, got)
		}
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if got := fi.Mode().Perm(); got != 0o600 {
		t.Errorf("file mode = %o, want 600", got)
	}
}

func TestOpenLockedInSameProcess(t *testing.T) {
	s := openTest(t, Options{})
	_, err := Open(s.Path(), Options{LockTimeout: 20 * time.Millisecond})
	if !errors.Is(err, ErrLocked) {
		t.Fatalf("second open: err = %v, want ErrLocked", err)
	}
	for _, want := range []string{s.Path(), "another residentd", "state directory"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %q", err, want)
		}
	}
	// Once the first holder closes, the file opens again.
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s2, err := Open(s.Path(), Options{})
	if err != nil {
		t.Fatalf("open after close: %v", err)
	}
	s2.Close()
}

func TestOpenLockedByOtherProcess(t *testing.T) {
	path := filepath.Join(t.TempDir(), "residentd.db")
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "STORE_TEST_HOLD="+path)
	cmd.Stderr = os.Stderr
	stdin, stdout := testkit.StartPiped(t, cmd)
	defer func() {
		stdin.Close()
		if err := cmd.Wait(); err != nil {
			t.Errorf("holder: %v", err)
		}
	}()
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil || line != "ready\n" {
		t.Fatalf("holder said %q, %v", line, err)
	}
	_, err = Open(path, Options{LockTimeout: 20 * time.Millisecond})
	if !errors.Is(err, ErrLocked) {
		t.Fatalf("open while another process holds it: err = %v, want ErrLocked", err)
	}
}

func TestCloseIdempotent(t *testing.T) {
	s := openTest(t, Options{})
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("second close: %v", err)
	}
	if _, err := s.Keys(); err == nil {
		t.Error("Keys after Close succeeded")
	}
}

func TestCheckHealthy(t *testing.T) {
	s := openTest(t, Options{})
	fill(t, s)
	if err := s.Check(); err != nil {
		t.Fatalf("check: %v", err)
	}
}

func TestOptionsDefaults(t *testing.T) {
	got := Options{}.withDefaults()
	want := Options{LockTimeout: 100 * time.Millisecond, MaxTurns: 200, MaxChannelMessages: 5000, MaxRoster: 500, MaxActivity: 200, MaxWatermarkIDs: 200}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("defaults = %+v, want %+v", got, want)
	}
	kept := Options{LockTimeout: time.Second, MaxTurns: 1, MaxChannelMessages: 2, MaxRoster: 3, MaxActivity: 4, MaxWatermarkIDs: 5}
	if got := kept.withDefaults(); !reflect.DeepEqual(got, kept) {
		t.Errorf("set options changed: %+v", got)
	}
}

var t0 = time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)

func msg(ch, id string, sec int, root string) channel.Message {
	return channel.Message{ID: id, Channel: ch, ThreadRoot: root, Author: "ann", AuthorKind: channel.KindUser, CreatedAt: t0.Add(time.Duration(sec) * time.Second), Body: "body " + id}
}

// fill writes one of everything.
func fill(t testing.TB, s *Store) {
	t.Helper()
	k := session.Key{Channel: "ch-backend", Binding: "b-claude"}
	if err := s.AppendTurns(k, session.Turn{Role: session.RoleUser, Text: "hi", At: t0}, session.Turn{Role: session.RoleAssistant, Text: "hello", At: t0}); err != nil {
		t.Fatal(err)
	}
	if err := s.SetNativeID(k, "native-1"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.CommitWatermark(channel.WatermarkKey{Key: k}, "native-1", channel.Seen{Seq: 1, Marks: channel.Unedited("q1")}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.PutMessages([]channel.Message{msg("ch-backend", "m1", 1, ""), msg("ch-backend", "m2", 2, "m1")}); err != nil {
		t.Fatal(err)
	}
	if err := s.SetRoster("ch-backend", []apitype.Member{{Handle: "ann", Kind: "user", Reachable: true}}); err != nil {
		t.Fatal(err)
	}
	if err := s.AddActivity("proj", []apitype.Activity{{Kind: "pr", Summary: "opened", Link: "https://x/1", At: t0}}); err != nil {
		t.Fatal(err)
	}
	if err := s.RecordAgent(AgentRecord{Pid: 42, Pgid: 42, StartTicks: 7, Command: "claude", Key: k, StartedAt: t0}); err != nil {
		t.Fatal(err)
	}
}

func TestReopenKeepsEverything(t *testing.T) {
	s := openTest(t, Options{})
	fill(t, s)
	s = reopen(t, s, Options{})
	k := session.Key{Channel: "ch-backend", Binding: "b-claude"}

	turns, err := s.Conversation(k)
	if err != nil || len(turns) != 2 || turns[1].Text != "hello" || !turns[0].At.Equal(t0) {
		t.Errorf("conversation = %+v, %v", turns, err)
	}
	if n, err := s.NativeID(k); n != "native-1" || err != nil {
		t.Errorf("native = %q, %v", n, err)
	}
	w, ok, err := s.Watermark(channel.WatermarkKey{Key: k})
	if !ok || err != nil || w.Native != "native-1" || w.Seq != 1 || len(channel.MarkIDs(w.Marks)) != 1 {
		t.Errorf("watermark = %+v %v %v", w, ok, err)
	}
	msgs, err := s.Recent("ch-backend", "m1", 10)
	if err != nil || len(msgs) != 2 {
		t.Errorf("recent = %+v, %v", msgs, err)
	}
	if r, err := s.Roster("ch-backend"); err != nil || len(r) != 1 || r[0].Handle != "ann" {
		t.Errorf("roster = %+v, %v", r, err)
	}
	if a, err := s.Activity("proj", 5); err != nil || len(a) != 1 || a[0].Link != "https://x/1" {
		t.Errorf("activity = %+v, %v", a, err)
	}
	if ag, err := s.Agents(); err != nil || len(ag) != 1 || ag[0].Key != k || ag[0].StartTicks != 7 {
		t.Errorf("agents = %+v, %v", ag, err)
	}
	if err := s.Check(); err != nil {
		t.Error(err)
	}
}

func TestMigrationListOrdered(t *testing.T) {
	if len(migrations) != SchemaVersion {
		t.Fatalf("%d migrations, SchemaVersion %d", len(migrations), SchemaVersion)
	}
	for i, m := range migrations {
		if m.version != i+1 || m.name == "" || m.apply == nil {
			t.Errorf("migration %d = {%d %q}, want version %d with a name and apply", i, m.version, m.name, i+1)
		}
	}
}

func rawDB(t *testing.T) *bolt.DB {
	t.Helper()
	db, err := bolt.Open(filepath.Join(t.TempDir(), "raw.db"), 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// openFrom writes a file at schema version v (the first v migrations, then
// fill in the same transaction when it is not nil), checks that it says v,
// and opens it with Open, which migrates it the rest of the way. The store
// closes at the test's end.
func openFrom(t *testing.T, v int, fill func(tx *bolt.Tx) error) *Store {
	t.Helper()
	path := filepath.Join(t.TempDir(), "residentd.db")
	db, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Update(func(tx *bolt.Tx) error {
		if err := migrate(tx, migrations[:v]); err != nil || fill == nil {
			return err
		}
		return fill(tx)
	}); err != nil {
		t.Fatal(err)
	}
	if got := versionOf(t, db); got != v {
		t.Fatalf("version = %d, want %d", got, v)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	s, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func versionOf(t *testing.T, db *bolt.DB) int {
	t.Helper()
	var v int
	if err := db.View(func(tx *bolt.Tx) error {
		var err error
		v, err = schemaVersion(tx)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	return v
}

func TestMigrationV1InitialLayout(t *testing.T) {
	db := rawDB(t)
	if got := versionOf(t, db); got != 0 {
		t.Fatalf("empty file version = %d", got)
	}
	if err := db.Update(func(tx *bolt.Tx) error { return migrate(tx, migrations[:1]) }); err != nil {
		t.Fatal(err)
	}
	if got := versionOf(t, db); got != 1 {
		t.Errorf("version = %d, want 1", got)
	}
	_ = db.View(func(tx *bolt.Tx) error {
		for _, b := range [][]byte{bucketMeta, bucketConversations, bucketWatermarks, bucketChannels, bucketRoster, bucketActivity, bucketAgents} {
			if tx.Bucket(b) == nil {
				t.Errorf("bucket %q missing after v1", b)
			}
		}
		return nil
	})
}

func TestMigrationMechanism(t *testing.T) {
	db := rawDB(t)
	var ran []int
	step := func(v int) migration {
		return migration{version: v, name: "test", apply: func(tx *bolt.Tx) error {
			ran = append(ran, v)
			_, err := tx.CreateBucketIfNotExists([]byte{byte('0' + v)})
			return err
		}}
	}
	up := func(list []migration) error {
		return db.Update(func(tx *bolt.Tx) error { return migrate(tx, list) })
	}
	if err := up([]migration{migrations[0]}); err != nil {
		t.Fatal(err)
	}
	// A file at version 1 gets only the newer steps, in order.
	list := []migration{migrations[0], step(2), step(3)}
	if err := up(list); err != nil {
		t.Fatal(err)
	}
	if len(ran) != 2 || ran[0] != 2 || ran[1] != 3 {
		t.Errorf("ran %v, want [2 3]", ran)
	}
	if got := versionOf(t, db); got != 3 {
		t.Errorf("version = %d, want 3", got)
	}
	// Up to date: nothing runs.
	ran = nil
	if err := up(list); err != nil || len(ran) != 0 {
		t.Errorf("rerun: ran %v, err %v", ran, err)
	}
	// A failing step rolls the whole transaction back.
	boom := migration{version: 4, name: "boom", apply: func(tx *bolt.Tx) error {
		_, _ = tx.CreateBucketIfNotExists([]byte("half"))
		return errors.New("boom")
	}}
	if err := up(append(list, boom)); err == nil || !strings.Contains(err.Error(), "schema version 4") {
		t.Errorf("failing migration: err = %v", err)
	}
	if got := versionOf(t, db); got != 3 {
		t.Errorf("version after failed step = %d, want 3", got)
	}
	_ = db.View(func(tx *bolt.Tx) error {
		if tx.Bucket([]byte("half")) != nil {
			t.Error("failed migration left a bucket")
		}
		return nil
	})
	// A gap in the list is a programming error.
	if err := up([]migration{migrations[0], step(3)}); err == nil {
		t.Error("list with a gap accepted")
	}
	// A file newer than the list is refused.
	if err := up(list[:2]); !errors.Is(err, ErrSchemaTooNew) {
		t.Errorf("too new: err = %v, want ErrSchemaTooNew", err)
	}
}

func TestOpenRefusesNewerSchema(t *testing.T) {
	s := openTest(t, Options{})
	path := s.Path()
	s.Close()
	db, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Update(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketMeta).Put(keyVersion, binary.BigEndian.AppendUint64(nil, SchemaVersion+1))
	}); err != nil {
		t.Fatal(err)
	}
	db.Close()
	if _, err := Open(path, Options{}); !errors.Is(err, ErrSchemaTooNew) {
		t.Fatalf("open: err = %v, want ErrSchemaTooNew", err)
	}
}

// A version-1 file (written before the project mapping existed) keeps its
// data and gains the projects bucket on Open.
func TestMigrationV2ChannelProjects(t *testing.T) {
	s := openFrom(t, 1, nil)
	if p, err := s.Project("ch"); err != nil || p != "ch" {
		t.Fatalf("unmapped project = %q, %v; want the channel id", p, err)
	}
	if err := s.SetProject("ch", "shop"); err != nil {
		t.Fatal(err)
	}
	if p, _ := s.Project("ch"); p != "shop" {
		t.Fatalf("mapped project = %q", p)
	}
	if err := s.SetProject("ch", ""); err != nil {
		t.Fatal(err)
	}
	if p, _ := s.Project("ch"); p != "ch" {
		t.Fatalf("after removing the mapping: %q", p)
	}
	if err := s.SetProject("", "x"); err == nil {
		t.Fatal("SetProject accepted an empty channel")
	}
}
