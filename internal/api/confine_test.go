package api

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/residentd/residentd/apitype"
	"github.com/residentd/residentd/internal/child"
	"github.com/residentd/residentd/internal/config"
	"github.com/residentd/residentd/internal/daemon"
	"github.com/residentd/residentd/internal/tools"
)

// probeEnv makes the test binary a probe that an agent script starts: it
// tries every route listed in $PROBE_DIR/routes over the socket named in
// $PROBE_DIR/sock and prints one JSON line per request.
const probeEnv = "RESIDENTD_TEST_PROBE"

type probeResult struct {
	Method  string `json:"method"`
	Path    string `json:"path"`
	Status  int    `json:"status"`
	Code    string `json:"code,omitempty"`
	Message string `json:"message,omitempty"`
	// SocketEnv is whether RESIDENTD_SOCKET reached the probe's
	// environment; only on the first line.
	SocketEnv *bool `json:"socket_env,omitempty"`
}

func probeMain() int {
	dir, capability := os.Getenv("PROBE_DIR"), os.Getenv("PROBE_CAP")
	routes, err := os.ReadFile(filepath.Join(dir, "routes"))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	sock, err := os.ReadFile(filepath.Join(dir, "sock"))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	hc := unixHTTP(string(sock))
	enc := json.NewEncoder(os.Stdout)
	_, has := os.LookupEnv("RESIDENTD_SOCKET")
	enc.Encode(probeResult{SocketEnv: &has})
	for _, line := range strings.Split(strings.TrimSpace(string(routes)), "\n") {
		method, path, _ := strings.Cut(line, " ")
		var body *strings.Reader
		if method == http.MethodPost || method == http.MethodPut {
			body = strings.NewReader("{}")
		} else {
			body = strings.NewReader("")
		}
		req, _ := http.NewRequest(method, "http://residentd"+path, body)
		req.Header.Set(apitype.CapabilityHeader, capability)
		resp, err := hc.Do(req)
		if err != nil {
			enc.Encode(probeResult{Method: method, Path: path, Message: err.Error()})
			continue
		}
		var envl apitype.ErrorBody
		json.NewDecoder(resp.Body).Decode(&envl)
		resp.Body.Close()
		enc.Encode(probeResult{Method: method, Path: path, Status: resp.StatusCode, Code: envl.Error.Code, Message: envl.Error.Message})
	}
	return 0
}

// probeRoutes is every route docs/openapi.json describes, with its path
// parameters filled in for channel ch, plus a tool read of another channel
// and a path the API does not have.
func probeRoutes(t *testing.T, ch string) []string {
	t.Helper()
	fill := strings.NewReplacer("{run}", "run-probe", "{request}", "req-probe", "{channel}", ch, "{id}", "m-probe", "{project}", "p-probe")
	var out []string
	for path, ops := range openAPIPaths(t) {
		for method := range ops {
			p := fill.Replace(path)
			if strings.HasPrefix(p, toolsPrefix) {
				p += "?channel_id=" + ch
			}
			out = append(out, strings.ToUpper(method)+" "+p)
		}
	}
	sort.Strings(out)
	return append(out, "GET /v1/tools/channel_roster?channel_id=ch-elsewhere", "GET /v1/no-such-route")
}

// TestAgentTreeReachesOnlyItsTools runs an agent script under a real daemon:
// the script's direct child and an orphan it detaches with setsid try every
// route over the socket; all but the tool endpoints answer 403
// agent_forbidden, the tools answer with the capability's scope, and a
// client outside the agent's tree still gets through.
func TestAgentTreeReachesOnlyItsTools(t *testing.T) {
	const ch = "ch-probe"
	dir := t.TempDir()
	// The daemon's own socket variable must not reach its agents.
	t.Setenv("RESIDENTD_SOCKET", "/nonexistent/residentd.sock")
	reg := tools.NewRegistry()
	token, err := reg.Issue(tools.Scope{Channel: ch})
	if err != nil {
		t.Fatal(err)
	}
	e := newEnvWith(t, func(o *ServerOptions, d *daemon.Daemon) {
		o.Tools = reg
		o.Agents = &child.Lineage{Self: os.Getpid(), Cgroups: d.Keeper().AgentCgroups()}
	}, func(c *config.Config) {
		exe, _ := os.Executable()
		// The script stands for an agent that found the socket at its
		// default path: the test leaves the path in $PROBE_DIR/sock.
		script := `RESIDENTD_TEST_PROBE=1 "$PROBE_EXE" > "$PROBE_DIR/direct" || exit 1
mkfifo "$PROBE_DIR/fifo" || exit 1
(RESIDENTD_TEST_PROBE=1 setsid "$PROBE_EXE" > "$PROBE_DIR/orphan" 3> "$PROBE_DIR/fifo" &)
cat "$PROBE_DIR/fifo"
exec "$PROBE_EXE" agent`
		c.Bindings = append(c.Bindings, config.Binding{ID: "b-probe", Handle: "@probe", Command: "/bin/sh", Args: []string{"-c", script},
			Env:   map[string]string{"RESIDENTD_TEST_AGENT": "1", "PROBE_EXE": exe, "PROBE_DIR": dir, "PROBE_CAP": token},
			Spare: new(int)}) // one process runs the probes

	})
	if err := os.WriteFile(filepath.Join(dir, "sock"), []byte(e.sock), 0o600); err != nil {
		t.Fatal(err)
	}
	routes := probeRoutes(t, ch)
	if err := os.WriteFile(filepath.Join(dir, "routes"), []byte(strings.Join(routes, "\n")), 0o600); err != nil {
		t.Fatal(err)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	// The turn starts the script; the agent answers only after both probes
	// are done, so their output is complete when the turn ends.
	if ev, err := e.c.Turn(ctx, apitype.TurnRequest{Channel: ch, Binding: "b-probe", Text: "@probe hi"}, nil); err != nil || ev.Event != "done" {
		t.Fatalf("turn: %+v, %v", ev, err)
	}
	for _, who := range []string{"direct", "orphan"} {
		f, err := os.Open(filepath.Join(dir, who))
		if err != nil {
			t.Fatal(err)
		}
		var got []probeResult
		sc := bufio.NewScanner(f)
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			var r probeResult
			if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
				t.Fatalf("%s: %q: %v", who, sc.Text(), err)
			}
			got = append(got, r)
		}
		f.Close()
		if len(got) != len(routes)+1 {
			t.Fatalf("%s probe: %d lines for %d routes: %+v", who, len(got), len(routes), got)
		}
		if *got[0].SocketEnv {
			t.Errorf("%s probe: RESIDENTD_SOCKET reached the agent's environment", who)
		}
		for _, r := range got[1:] {
			route := r.Method + " " + r.Path
			switch {
			case strings.Contains(r.Path, "channel_id=ch-elsewhere"):
				if r.Status != http.StatusForbidden || r.Code != apitype.CodeOutOfScope {
					t.Errorf("%s probe: %s: %d %s, want 403 out_of_scope", who, route, r.Status, r.Code)
				}
			case strings.HasPrefix(r.Path, toolsPrefix):
				if r.Status != http.StatusOK {
					t.Errorf("%s probe: %s: %d %s %s, want 200 with its capability", who, route, r.Status, r.Code, r.Message)
				}
			default:
				if r.Status != http.StatusForbidden || r.Code != apitype.CodeAgentForbidden {
					t.Errorf("%s probe: %s: %d %s %s, want 403 agent_forbidden", who, route, r.Status, r.Code, r.Message)
				}
			}
		}
		t.Logf("%s probe refused because: %s", who, got[1].Message)
	}

	// Clients outside the agent's tree: this process, and a process it starts.
	if h, err := e.c.Health(ctx); err != nil || !h.OK {
		t.Fatalf("health from the test process: %+v, %v", h, err)
	}
	exe, _ := os.Executable()
	cmd := exec.Command(exe)
	cmd.Env = append(os.Environ(), "RESIDENTD_TEST_PEER="+e.sock)
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.HasPrefix(string(out), "200 ") {
		t.Fatalf("a client process outside the agent's tree: %q, %v", out, err)
	}
}
