package client_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/residentd/residentd/apitype"
	"github.com/residentd/residentd/client"
	"github.com/residentd/residentd/internal/api"
	"github.com/residentd/residentd/internal/config"
	"github.com/residentd/residentd/internal/daemontest"
	"github.com/residentd/residentd/internal/permission"
	"github.com/residentd/residentd/internal/testkit"
)

// TestMain serves a real daemon with the built-in agent on a temporary
// socket and points $RESIDENTD_SOCKET at it, so the examples use a zero
// Client exactly as a program would. The test binary doubles as the agent.
func TestMain(m *testing.M) {
	testkit.Dispatch()
	stop, err := serve()
	if err != nil {
		fmt.Fprintln(os.Stderr, "client test daemon:", err)
		os.Exit(1)
	}
	code := m.Run()
	stop()
	os.Exit(code)
}

func serve() (func(), error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "rdc")
	if err != nil {
		return nil, err
	}
	cfg := &config.Config{StateDir: dir, AgentGrace: config.Duration(time.Second)}
	b := config.Builtin(exe, dir)
	b.Env = map[string]string{"RESIDENTD_TEST_AGENT": "1"}
	ask := b
	ask.ID, ask.Handle, ask.Permission = "b-ask", "@asker", permission.Ask
	cfg.Bindings = []config.Binding{b, ask}
	d, err := daemontest.Start(cfg, daemontest.Options{Log: zap.NewNop()})
	if err != nil {
		return nil, err
	}
	sock := filepath.Join(dir, "s.sock")
	ln, err := api.Listen(sock)
	if err != nil {
		return nil, err
	}
	srv := api.NewServer(api.ServerOptions{Turns: d, Sessions: d, Channel: d.Inbox, Version: "test"})
	served := make(chan error, 1)
	go func() { served <- srv.Serve(countingListener{ln}) }()
	os.Setenv(client.EnvSocket, sock)
	return func() {
		srv.Shutdown(context.Background())
		<-served
		d.Close()
		os.RemoveAll(dir)
	}, nil
}

func ExampleClient_Health() {
	var c client.Client // $RESIDENTD_SOCKET, or the default socket
	defer c.Close()
	h, err := c.Health(context.Background())
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(h.OK, h.MaxLive, h.Bindings)
	// Output: true 4 2
}

func ExampleClient_Turn() {
	var c client.Client
	defer c.Close()
	ctx := context.Background()
	at := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
	_, err := c.PutMessages(ctx, []apitype.Message{
		{ID: "m1", Channel: "ch-example", Author: "aiko", AuthorKind: apitype.AuthorUser, CreatedAt: at, Body: "the refund spec failed again"},
		{ID: "m2", Channel: "ch-example", Author: "carla", AuthorKind: apitype.AuthorUser, CreatedAt: at.Add(time.Second), Body: "@agent why is the refund spec flaky?"},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, text := range []string{"@agent why is the refund spec flaky?", "@agent and now?"} {
		done, err := c.Turn(ctx, apitype.TurnRequest{Channel: "ch-example", Binding: "b-builtin", MessageID: "m2", Text: text}, func(ev apitype.Event) {
			if ev.Event == apitype.EventStarted {
				fmt.Println("shape:", ev.Shape)
			}
		})
		if err != nil {
			fmt.Println(err)
			return
		}
		fmt.Println("reply:", done.Text)
	}
	// Output:
	// shape: cold
	// reply: builtin turn=1 framing=yes users=1 assistants=0 mention=m2 context=1
	// shape: warm
	// reply: builtin turn=2 framing=no users=0 assistants=0 mention=m2 context=0
}

func ExampleIsNotFound() {
	var c client.Client
	defer c.Close()
	_, err := c.Turn(context.Background(), apitype.TurnRequest{Channel: "ch", Binding: "b-nope", Text: "@nobody hi"}, nil)
	fmt.Println(client.IsNotFound(err), client.IsBusy(err), client.IsCode(err, apitype.CodeUnknownBinding))
	// Output: true false true
}

func ExampleClient_Sessions() {
	var c client.Client
	defer c.Close()
	ctx := context.Background()
	if _, err := c.Turn(ctx, apitype.TurnRequest{Channel: "ch-sessions", Binding: "b-builtin", Text: "@agent hi"}, nil); err != nil {
		fmt.Println(err)
		return
	}
	ss, err := c.Sessions(ctx)
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, s := range ss {
		if s.Channel == "ch-sessions" {
			fmt.Println(s.Binding, s.State, s.Turns["cold"])
		}
	}
	// Output: b-builtin idle 1
}

func ExampleClient_Submit() {
	var c client.Client
	defer c.Close()
	ctx := context.Background()
	// A detached run: it goes on whether or not anyone follows it.
	r, err := c.Submit(ctx, apitype.TurnRequest{Channel: "ch-submit", Binding: "b-builtin", Text: "@agent summarise the thread"})
	if err != nil {
		fmt.Println(err)
		return
	}
	done, err := c.Follow(ctx, r.ID, 0, func(ev apitype.Event) {
		if ev.Event == apitype.EventStarted {
			fmt.Println(ev.Seq, ev.Event, ev.Shape)
		}
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(done.Event, done.Shape)
	got, err := c.Run(ctx, r.ID)
	fmt.Println(got.State, got.Result.Event, err)
	// Output:
	// 1 started cold
	// done cold
	// succeeded done <nil>
}

func ExampleClient_Follow() {
	var c client.Client
	defer c.Close()
	ctx := context.Background()
	r, err := c.Submit(ctx, apitype.TurnRequest{Channel: "ch-follow", Binding: "b-builtin", Text: "@agent hello"})
	if err != nil {
		fmt.Println(err)
		return
	}
	var all []int64
	if _, err := c.Follow(ctx, r.ID, 0, func(ev apitype.Event) { all = append(all, ev.Seq) }); err != nil {
		fmt.Println(err)
		return
	}
	// A client that had seen up to the first event re-attaches after it and
	// gets exactly the rest, in order.
	var again []int64
	done, err := c.Follow(ctx, r.ID, all[0], func(ev apitype.Event) { again = append(again, ev.Seq) })
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(slices.Equal(again, all[1:]), done.Event)
	// Output: true done
}

func ExampleClient_Answer() {
	var c client.Client
	defer c.Close()
	ctx := context.Background()
	// b-ask's permission policy is ask: the agent's request reaches the
	// stream and waits for a person.
	done, err := c.Turn(ctx, apitype.TurnRequest{Channel: "ch-answer", Binding: "b-ask", Text: "@asker [[permission:edit]] fix it"}, func(ev apitype.Event) {
		switch ev.Event {
		case apitype.EventPermissionRequest:
			p := ev.Permission
			for _, o := range p.Options {
				fmt.Println("option", o.ID, o.Kind)
			}
			if err := c.Answer(ctx, ev.RunID, p.ID, p.Options[0].ID); err != nil {
				fmt.Println(err)
			}
		case apitype.EventPermissionDecision:
			fmt.Println("decided", ev.Decision.Kind, "by", ev.Decision.DecidedBy)
		}
	})
	fmt.Println(done.Event, err)
	// Output:
	// option allow allow_once
	// option allow-always allow_always
	// option reject reject_once
	// option reject-always reject_always
	// decided allow_once by person
	// done <nil>
}

func ExampleClient_Cancel() {
	var c client.Client
	defer c.Close()
	ctx := context.Background()
	_, err := c.Turn(ctx, apitype.TurnRequest{Channel: "ch-cancel", Binding: "b-builtin", Text: "@agent [[fault:hang-turn]] take forever"}, func(ev apitype.Event) {
		if ev.Event == apitype.EventStarted {
			fmt.Println("cancel:", c.Cancel(ctx, ev.RunID))
		}
	})
	fmt.Println(client.IsCode(err, apitype.CodeCancelled))
	runs, _ := c.Runs(ctx)
	for _, r := range runs {
		if r.Channel == "ch-cancel" {
			fmt.Println(r.State)
		}
	}
	// Output:
	// cancel: <nil>
	// true
	// cancelled
}

func TestSocketPath(t *testing.T) {
	t.Setenv(client.EnvSocket, "")
	t.Setenv("XDG_RUNTIME_DIR", "/run/user/1000")
	if got := (&client.Client{}).SocketPath(); got != "/run/user/1000/residentd/residentd.sock" {
		t.Errorf("default socket %q", got)
	}
	t.Setenv(client.EnvSocket, "/tmp/x.sock")
	if got := (&client.Client{}).SocketPath(); got != "/tmp/x.sock" {
		t.Errorf("socket from the environment %q", got)
	}
	if got := (&client.Client{Socket: "/s"}).SocketPath(); got != "/s" {
		t.Errorf("explicit socket %q", got)
	}
}

func TestErrorClasses(t *testing.T) {
	for _, tt := range []struct {
		code           string
		notFound, busy bool
	}{
		{apitype.CodeUnknownBinding, true, false},
		{apitype.CodeUnknownRun, true, false},
		{apitype.CodeNotFound, true, false},
		{apitype.CodeQueueFull, false, true},
		{apitype.CodeQueueTimeout, false, true},
		{apitype.CodeAgentBackoff, false, true},
		{apitype.CodeBadRequest, false, false},
		{apitype.CodeAgentCrashed, false, false},
	} {
		err := fmt.Errorf("wrapped: %w", &client.Error{Status: 400, Code: tt.code, Message: "m"})
		if client.IsNotFound(err) != tt.notFound || client.IsBusy(err) != tt.busy || !client.IsCode(err, tt.code) {
			t.Errorf("%s: IsNotFound %v IsBusy %v", tt.code, client.IsNotFound(err), client.IsBusy(err))
		}
	}
	if client.IsNotFound(errors.New("x")) || client.IsBusy(nil) {
		t.Error("a plain error classified as a daemon error")
	}
}

// A daemon that is not there: the error names the socket and says what to do.
func TestNoDaemon(t *testing.T) {
	c := &client.Client{Socket: filepath.Join(t.TempDir(), "none.sock")}
	_, err := c.Health(context.Background())
	if err == nil || !strings.Contains(err.Error(), "none.sock") || !strings.Contains(err.Error(), "residentd serve") {
		t.Fatalf("health without a daemon: %v", err)
	}
}

// accepted counts the connections the test daemon accepted.
var accepted atomic.Int64

type countingListener struct{ net.Listener }

func (l countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil {
		accepted.Add(1)
	}
	return c, err
}

// Connections are reused: every response, streamed turns included, is
// read to its end, so sequential calls share one connection.
func TestConnectionReuse(t *testing.T) {
	var c client.Client
	defer c.Close()
	ctx := context.Background()
	if _, err := c.Health(ctx); err != nil {
		t.Fatal(err)
	}
	before := accepted.Load()
	for i := range 5 {
		if _, err := c.Turn(ctx, apitype.TurnRequest{Channel: "ch-reuse", Binding: "b-builtin", Text: fmt.Sprintf("@agent %d", i)}, nil); err != nil {
			t.Fatal(err)
		}
		if _, err := c.Sessions(ctx); err != nil {
			t.Fatal(err)
		}
		if err := c.Cancel(ctx, "run-nope"); !client.IsNotFound(err) {
			t.Fatalf("cancel of an unknown run: %v", err)
		}
	}
	if n := accepted.Load() - before; n != 0 {
		t.Fatalf("15 sequential calls opened %d new connections, want 0", n)
	}
}
