package server

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/residentd/residentd/internal/testkit"
)

func TestMain(m *testing.M) { testkit.Main(m) }

type fakeDaemon struct{ closed atomic.Bool }

func (d *fakeDaemon) Close(time.Duration) error { d.closed.Store(true); return nil }
func (d *fakeDaemon) Live() int                 { return 1 }
func (d *fakeDaemon) Busy() int                 { return 0 }
func (d *fakeDaemon) Queued() int               { return 0 }

// httpAPI is an API answering GET /v1/health and GET /metrics.
type httpAPI struct{ *http.Server }

func newAPI() httpAPI {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/health", func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, `{"ok":true}`) })
	mux.HandleFunc("GET /metrics", func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "up 1\n") })
	return httpAPI{&http.Server{Handler: mux}}
}

func (a httpAPI) Serve(ln net.Listener) error {
	if err := a.Server.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// shortDir is a directory for sockets short enough for sun_path.
func shortDir(t *testing.T) string {
	t.Helper()
	d, err := os.MkdirTemp("", "rds")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(d) })
	return d
}

func listenUnix(t *testing.T, dir string) net.Listener {
	t.Helper()
	ln, err := net.Listen("unix", filepath.Join(dir, "api.sock"))
	if err != nil {
		t.Fatal(err)
	}
	return ln
}

// notifySocket stands in for the service manager: it sets NOTIFY_SOCKET
// and returns the datagrams in arrival order, and a way to add a marker
// datagram of the test's own to the same queue.
func notifySocket(t *testing.T, dir string) (msgs <-chan string, mark func(string)) {
	t.Helper()
	path := filepath.Join(dir, "notify")
	c, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: path, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	t.Setenv("NOTIFY_SOCKET", path)
	ch := make(chan string, 1<<16)
	go func() {
		defer close(ch)
		buf := make([]byte, 4096)
		for {
			n, err := c.Read(buf)
			if err != nil {
				return
			}
			ch <- string(buf[:n])
		}
	}()
	mark = func(s string) {
		t.Helper()
		w, err := net.DialUnix("unixgram", nil, &net.UnixAddr{Name: path, Net: "unixgram"})
		if err != nil {
			t.Fatal(err)
		}
		defer w.Close()
		if _, err := w.Write([]byte(s)); err != nil {
			t.Fatal(err)
		}
	}
	return ch, mark
}

// next returns the next datagram, failing after a generous bound.
func next(t *testing.T, msgs <-chan string, seen *[]string) string {
	t.Helper()
	select {
	case m, ok := <-msgs:
		if !ok {
			t.Fatalf("notify socket closed; seen %q", *seen)
		}
		*seen = append(*seen, m)
		return m
	case <-time.After(30 * time.Second):
		t.Fatalf("no notification; seen %q", *seen)
		return ""
	}
}

func until(t *testing.T, msgs <-chan string, seen *[]string, want string) {
	t.Helper()
	for next(t, msgs, seen) != want {
	}
}

// start runs s until the returned stop (also called at cleanup) ends it.
// stuck is a loop that can be made to hang: pass blocks while it is stuck.
type stuck struct {
	gate    atomic.Pointer[chan struct{}]
	entered chan struct{}
	once    sync.Once
}

func (s *stuck) init() { s.once.Do(func() { s.entered = make(chan struct{}, 1) }) }

func (s *stuck) pass() {
	s.init()
	if g := s.gate.Load(); g != nil {
		select {
		case s.entered <- struct{}{}:
		default:
		}
		<-*g
	}
}

// stick makes the next pass hang, waits until one does, then writes a
// marker notification and reads up to it: every ping of an earlier pass
// was sent before the marker, so none may follow it while stuck.
func (s *stuck) stick(t *testing.T, mark func(string), msgs <-chan string, seen *[]string) {
	t.Helper()
	s.init()
	block := make(chan struct{})
	s.gate.Store(&block)
	<-s.entered
	mark("MARK")
	until(t, msgs, seen, "MARK")
}

// release unsticks the hung pass and the ones after it.
func (s *stuck) release() {
	if g := s.gate.Swap(nil); g != nil {
		close(*g)
	}
}

// noPingUntil reads notifications until n statuses starting with status
// have come, failing on any watchdog ping among them.
func noPingUntil(t *testing.T, msgs <-chan string, seen *[]string, status string, n int, why string) {
	t.Helper()
	for got := 0; got < n; {
		switch m := next(t, msgs, seen); {
		case m == "WATCHDOG=1":
			t.Fatalf("a watchdog ping %s; seen %q", why, *seen)
		case strings.HasPrefix(m, status):
			got++
		}
	}
}

func start(t *testing.T, s *Server) (stop func() error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	var err error
	go func() {
		defer close(done)
		err = s.Run(ctx)
	}()
	stop = func() error {
		cancel()
		<-done
		return err
	}
	t.Cleanup(func() { stop() })
	return stop
}

// A probe that does not come back holds the watchdog pings; they resume
// once it answers.
func TestWatchdogPingsOnlyWhileProbeAnswers(t *testing.T) {
	dir := shortDir(t)
	msgs, mark := notifySocket(t, dir)
	t.Setenv("WATCHDOG_USEC", "20000") // probe every 10ms
	t.Setenv("WATCHDOG_PID", "")

	var st stuck
	probe := ProbeFunc(func(ctx context.Context) error {
		st.pass() // ignores ctx, like a deadlocked loop
		return nil
	})
	core, logs := observer.New(zap.InfoLevel)
	d := &fakeDaemon{}
	s := &Server{Daemon: d, API: newAPI(), Listener: listenUnix(t, dir), Liveness: probe, Grace: time.Second, Log: zap.New(core)}
	stop := start(t, s)

	var seen []string
	if m := next(t, msgs, &seen); m != "READY=1" {
		t.Fatalf("first notification %q, want READY=1", m)
	}
	until(t, msgs, &seen, "WATCHDOG=1")

	// Stick the loop. Every ping of an earlier probe was sent before this
	// probe went out, so none may follow the marker while it is stuck.
	st.stick(t, mark, msgs, &seen)
	noPingUntil(t, msgs, &seen, "STATUS=not answering", 3, "while the probe is stuck")
	if n := logs.FilterMessageSnippet("do not answer").Len(); n != 1 {
		t.Errorf("the stuck probe was logged %d times, want once", n)
	}

	// Unstick it: pings resume.
	st.release()
	until(t, msgs, &seen, "WATCHDOG=1")
	if logs.FilterMessageSnippet("answers again").Len() != 1 {
		t.Error("no log line saying the daemon answers again")
	}

	if err := stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}
	until(t, msgs, &seen, "STOPPING=1")
	if !d.closed.Load() {
		t.Error("the daemon was not closed")
	}
}

// A probe that fails (rather than hangs) also holds the ping.
func TestWatchdogSkipsPingWhenProbeFails(t *testing.T) {
	dir := shortDir(t)
	msgs, _ := notifySocket(t, dir)
	t.Setenv("WATCHDOG_USEC", "20000")
	t.Setenv("WATCHDOG_PID", "")
	var failing atomic.Bool
	failing.Store(true)
	probe := ProbeFunc(func(ctx context.Context) error {
		if failing.Load() {
			return errors.New("pool loop gone")
		}
		return nil
	})
	s := &Server{Daemon: &fakeDaemon{}, API: newAPI(), Listener: listenUnix(t, dir), Liveness: probe, Grace: time.Second}
	start(t, s)
	var seen []string
	noPingUntil(t, msgs, &seen, "STATUS=not answering: pool loop gone", 3, "although the probe fails")
	failing.Store(false)
	until(t, msgs, &seen, "WATCHDOG=1")
}

// Without a Liveness probe the watchdog makes a health round trip over the
// API socket: pings go out while the API answers and stop while it hangs.
func TestWatchdogDefaultProbeUsesTheSocket(t *testing.T) {
	dir := shortDir(t)
	msgs, mark := notifySocket(t, dir)
	t.Setenv("WATCHDOG_USEC", "100000") // a 50ms interval: long enough for a round trip on a loaded machine
	t.Setenv("WATCHDOG_PID", "")
	var st stuck
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/health", func(w http.ResponseWriter, r *http.Request) {
		st.pass()
		io.WriteString(w, `{"ok":true}`)
	})
	api := httpAPI{&http.Server{Handler: mux}}
	s := &Server{Daemon: &fakeDaemon{}, API: api, Listener: listenUnix(t, dir), Grace: time.Second}
	start(t, s)
	var seen []string
	until(t, msgs, &seen, "WATCHDOG=1")
	st.stick(t, mark, msgs, &seen)
	// The hung request times out after one interval: no ping, a status
	// that says why.
	noPingUntil(t, msgs, &seen, "STATUS=not answering", 2, "while the API hangs")
	st.release()
	until(t, msgs, &seen, "WATCHDOG=1")
}

// A metrics address already taken does not stop the daemon: the API
// serves, Listeners reports the failure, and it is logged once.
func TestBusyMetricsAddrKeepsServing(t *testing.T) {
	dir := shortDir(t)
	t.Setenv("NOTIFY_SOCKET", "")
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	core, logs := observer.New(zap.InfoLevel)
	ln := listenUnix(t, dir)
	ready := make(chan struct{})
	s := &Server{Daemon: &fakeDaemon{}, API: newAPI(), Listener: ln, Metrics: http.NotFoundHandler(), MetricsAddr: taken.Addr().String(),
		Grace: time.Second, Log: zap.New(core), Ready: func() { close(ready) }}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	select {
	case <-ready:
	case err := <-done:
		t.Fatalf("Run ended before serving: %v", err)
	}
	ls := s.Listeners()
	if len(ls) != 2 || ls[0].Name != "api" || ls[0].Error != "" || ls[1].Name != "metrics" || ls[1].Addr != taken.Addr().String() || !strings.Contains(ls[1].Error, "in use") {
		t.Errorf("listeners %+v, want the api serving and metrics failed with address in use", ls)
	}
	c := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", ln.Addr().String())
	}}}
	resp, err := c.Get("http://x/metrics")
	if err != nil {
		t.Fatalf("the API socket does not serve with the metrics port taken: %v", err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(body) != "up 1\n" {
		t.Errorf("GET /metrics on the socket: %q", body)
	}
	if n := logs.FilterMessageSnippet("metrics listener not opened").Len(); n != 1 {
		t.Errorf("metrics failure logged %d times, want once", n)
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Run: %v", err)
	}
}

// The metrics listener takes an exact loopback host: a name, or an
// address, with nothing after it but a numeric port.
func TestLoopbackHostIsExact(t *testing.T) {
	for host, want := range map[string]bool{
		"localhost": true, "LOCALHOST:9090": true, "127.0.0.1": true, "127.0.0.1:9090": true, "127.8.9.10:1": true,
		"[::1]": true, "[::1]:9090": true, "::1": true,
		"127.0.0.1:9090.evil.com": false, "localhost:9090.evil.com": false, "[::1]:x": false, "127.0.0.1:99999": false,
		"localhost.evil.com": false, "127.0.0.1.evil.com": false, "10.0.0.1:9090": false, "[::2]:9090": false,
		"evil.com": false, "": false, "127.0.0.1:": false,
	} {
		if got := loopbackHost(host); got != want {
			t.Errorf("loopbackHost(%q) = %v, want %v", host, got, want)
		}
	}
}
