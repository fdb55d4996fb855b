package main

import (
	"context"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/residentd/residentd/apitype"
	"github.com/residentd/residentd/client"
	"github.com/residentd/residentd/internal/session"
	"github.com/residentd/residentd/internal/store"
)

// TestCrashMidBurstKeepsEveryDoneTurn: four keys send turns as fast as the
// daemon answers (their commits share fsyncs), the daemon is SIGKILLed in
// the middle of the burst, and every turn a client saw done is in the file.
func TestCrashMidBurstKeepsEveryDoneTurn(t *testing.T) {
	daemon := startDaemon(t, serveOpts{config: `{"bindings": [{"id": "b-builtin", "handle": "@agent", "runtime": "builtin:test", "command": $EXE,
		"args": ["agent"], "supervised": true, "resident": true, "tools": false}]}`})

	const keys, killAfter = 4, 40
	type doneTurn struct{ channel, id string }
	var (
		mu    sync.Mutex
		dones []doneTurn
		kill  = make(chan struct{})
		once  sync.Once
		wg    sync.WaitGroup
	)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	for k := range keys {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := &client.Client{Socket: daemon.sock}
			defer c.Close()
			ch := fmt.Sprintf("ch-%d", k)
			for i := 0; ctx.Err() == nil; i++ {
				id := fmt.Sprintf("m-%d-%d", k, i)
				ev, err := c.Turn(ctx, apitype.TurnRequest{Channel: ch, Binding: "b-builtin", MessageID: id, Text: "@agent turn " + id}, nil)
				if err != nil {
					return // the daemon is gone
				}
				if ev.Event != apitype.EventDone {
					t.Errorf("turn %s ended with %+v", id, ev)
					return
				}
				mu.Lock()
				dones = append(dones, doneTurn{ch, id})
				if len(dones) == killAfter {
					once.Do(func() { close(kill) })
				}
				mu.Unlock()
			}
		}()
	}
	select {
	case <-kill:
	case <-daemon.done:
		t.Fatalf("the daemon exited during the burst. Output:\n%s", daemon.out.String())
	case <-time.After(2 * time.Minute):
		mu.Lock()
		n := len(dones)
		mu.Unlock()
		t.Fatalf("%d turns done in 2 minutes, want %d", n, killAfter)
	}
	if err := daemon.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	<-daemon.done
	wg.Wait()

	st, err := store.Open(filepath.Join(daemon.state, "residentd.db"), store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if err := st.Check(); err != nil {
		t.Fatal(err)
	}
	stored := map[string]bool{}
	for k := range keys {
		turns, err := st.Conversation(session.Key{Channel: fmt.Sprintf("ch-%d", k), Binding: "b-builtin"})
		if err != nil {
			t.Fatal(err)
		}
		for i, tu := range turns {
			if tu.Role == session.RoleUser && i+1 < len(turns) && turns[i+1].Role == session.RoleAssistant {
				stored[tu.MessageID] = true
			}
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(dones) < killAfter {
		t.Fatalf("%d turns done before the kill, want at least %d", len(dones), killAfter)
	}
	for _, d := range dones {
		if !stored[d.id] {
			t.Errorf("turn %s of %s was reported done but is not in the file after the crash", d.id, d.channel)
		}
	}
	t.Logf("%d turns reported done before SIGKILL, %d exchanges in the file", len(dones), len(stored))
}
