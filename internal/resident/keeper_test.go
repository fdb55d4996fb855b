package resident

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"github.com/residentd/residentd/internal/config"
	"github.com/residentd/residentd/internal/lease"
	"github.com/residentd/residentd/internal/metrics"
	"github.com/residentd/residentd/internal/session"
	"github.com/residentd/residentd/internal/store"
	"github.com/residentd/residentd/internal/testkit"
)

// TestMain lets the test binary double as the built-in agent: the keeper
// spawns real ACP processes.
func TestMain(m *testing.M) { testkit.Main(m) }

// newKeeper is a keeper on a real bbolt file with the built-in agent bound
// as "b-builtin" and, with extra arguments, as "b-extra" too.
func newKeeper(t *testing.T, o Options, extra ...string) (*Keeper, *store.Store) {
	t.Helper()
	return newKeeperWith(t, o, nil, extra...)
}

// newKeeperWith is newKeeper with the config changed by edit first.
func newKeeperWith(t *testing.T, o Options, edit func(*config.Config), extra ...string) (*Keeper, *store.Store) {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	b := config.Builtin(exe, dir)
	b.Env = map[string]string{"RESIDENTD_TEST_AGENT": "1"}
	cfg := &config.Config{StateDir: dir, AgentGrace: config.Duration(2 * time.Second), Bindings: []config.Binding{b}}
	if len(extra) > 0 {
		x := b
		x.ID, x.Handle, x.Args = "b-extra", "@extra", append(append([]string{}, b.Args...), extra...)
		cfg.Bindings = append(cfg.Bindings, x)
	}
	if edit != nil {
		edit(cfg)
	}
	cfg.SetDefaults()
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	st, err := store.Open(filepath.Join(dir, "residentd.db"), store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	o.Config, o.Store, o.Metrics, o.Log = cfg, st, metrics.New("test", nil), zaptest.NewLogger(t, zaptest.Level(zap.WarnLevel))
	k, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		k.Close()
		st.Close()
	})
	return k, st
}

// TestKeeperRestoresASavedSession: a first process starts cold with a new
// session; once its id is saved, the key's next process resumes it
// (restored), without any turn machinery.
func TestKeeperRestoresASavedSession(t *testing.T) {
	k, st := newKeeper(t, Options{})
	key := session.Key{Channel: "ch", Binding: "b-builtin"}
	ctx := context.Background()
	exited := make(chan struct{}, 2)
	p, shape, err := k.Spawn(ctx, key, func() { exited <- struct{}{} })
	if err != nil {
		t.Fatal(err)
	}
	if shape != lease.Cold || p.Native() == "" {
		t.Fatalf("first spawn: shape %v, native %q; want cold with a session", shape, p.Native())
	}
	k.SaveNative(key, p, zap.NewNop())
	if id, err := st.NativeID(key); err != nil || id != p.Native() {
		t.Fatalf("saved native id %q (%v), want %q", id, err, p.Native())
	}
	first := p.Native()
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-exited:
	case <-time.After(10 * time.Second):
		t.Fatal("the pool's exit hook did not run after the process stopped")
	}
	p, shape, err = k.Spawn(ctx, key, func() {})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if shape != lease.Restored || p.Native() != first || p.restoredBy != "resume" {
		t.Fatalf("second spawn: shape %v, native %q by %q; want restored %q by resume", shape, p.Native(), p.restoredBy, first)
	}
}

// TestKeeperBacksOffACrashLoop: a binding whose agent dies at initialize is
// retried once at once, then refused with ErrBackoff naming the failure;
// another binding spawns meanwhile.
func TestKeeperBacksOffACrashLoop(t *testing.T) {
	k, _ := newKeeper(t, Options{BackoffBase: time.Hour, BackoffCap: time.Hour}, "--fault", "exit-initialize")
	ctx := context.Background()
	bad := session.Key{Channel: "ch", Binding: "b-extra"}
	for i := range 2 {
		if _, _, err := k.Spawn(ctx, bad, func() {}); err == nil || errors.Is(err, ErrBackoff) {
			t.Fatalf("spawn %d: %v, want the agent's failure", i+1, err)
		}
	}
	_, _, err := k.Spawn(ctx, bad, func() {})
	if !errors.Is(err, ErrBackoff) {
		t.Fatalf("third spawn: %v, want ErrBackoff", err)
	}
	p, _, err := k.Spawn(ctx, session.Key{Channel: "ch", Binding: "b-builtin"}, func() {})
	if err != nil {
		t.Fatalf("another binding during the backoff: %v", err)
	}
	p.Close()
}
