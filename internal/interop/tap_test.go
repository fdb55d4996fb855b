package interop

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/residentd/residentd/internal/config"
	"github.com/residentd/residentd/internal/testkit"
)

// TestMain lets the test binary also be the tap: a stdio pass-through that
// runs a real agent and records every JSON-RPC line between residentd and
// it, so a test reads what the agent was really sent and answered.
func TestMain(m *testing.M) { testkit.Main(m, testkit.Role{Env: tapEnv, Main: tapMain}) }

// tapEnv names the directory the tap writes its record to (one file per
// process, tap-<pid>.jsonl).
const tapEnv = "RESIDENTD_TEST_ACP_TAP"

// tapLine is one recorded JSON-RPC message: "in" from residentd to the
// agent, "out" from the agent.
type tapLine struct {
	Dir string          `json:"dir"`
	Msg json.RawMessage `json:"msg"`
}

// tapMain runs os.Args[1:] as the agent, copying stdin to it and its stdout
// back, line by line, recording each line; it exits as the agent does. It
// stays in the agent's process group, so residentd's stop reaches both.
func tapMain() int {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "tap: no agent command")
		return 2
	}
	rec, err := os.Create(filepath.Join(os.Getenv(tapEnv), fmt.Sprintf("tap-%d.jsonl", os.Getpid())))
	if err != nil {
		fmt.Fprintln(os.Stderr, "tap:", err)
		return 2
	}
	defer rec.Close()
	var mu sync.Mutex
	record := func(dir string, line []byte) {
		if !json.Valid(line) {
			return
		}
		b, _ := json.Marshal(tapLine{Dir: dir, Msg: line})
		mu.Lock()
		rec.Write(append(b, '\n'))
		mu.Unlock()
	}
	cmd := exec.Command(os.Args[1], os.Args[2:]...)
	// Without the tap's own variable: the agent may be this binary too
	// (the built-in agent), which would otherwise be a tap again.
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, tapEnv+"=") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		return 2
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return 2
	}
	if err := cmd.Start(); err != nil {
		fmt.Fprintln(os.Stderr, "tap:", err)
		return 2
	}
	pipe := func(dir string, r io.Reader, w io.Writer, done func()) {
		defer done()
		br := bufio.NewReaderSize(r, 1<<20)
		for {
			line, err := br.ReadBytes('\n')
			if len(line) > 0 {
				record(dir, bytes.TrimRight(line, "\n"))
				if _, werr := w.Write(line); werr != nil {
					return
				}
			}
			if err != nil {
				return
			}
		}
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go pipe("in", os.Stdin, in, func() { in.Close(); wg.Done() })
	copied := make(chan struct{})
	go pipe("out", out, os.Stdout, func() { close(copied) })
	<-copied
	err = cmd.Wait()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode()
	}
	return 0
}

// tapped wraps binding b's agent in the tap, recording into dir.
func tapped(t testing.TB, b config.Binding, dir string) config.Binding {
	t.Helper()
	b.Args = append([]string{b.Command}, b.Args...)
	b.Command = testkit.Exe(t)
	env := map[string]string{tapEnv: dir}
	for k, v := range b.Env {
		env[k] = v
	}
	b.Env = env
	return b
}

// rpc is one JSON-RPC message as recorded.
type rpc struct {
	Dir    string
	ID     json.RawMessage `json:"id"`
	Method string          `json:"method"`
	Params json.RawMessage `json:"params"`
	Result json.RawMessage `json:"result"`
	Error  json.RawMessage `json:"error"`
}

// tapRecords reads every tap file in dir: one list of messages per agent
// process, each in the order it crossed the pipe.
func tapRecords(t testing.TB, dir string) [][]rpc {
	t.Helper()
	files, _ := filepath.Glob(filepath.Join(dir, "tap-*.jsonl"))
	sort.Strings(files)
	var out [][]rpc
	for _, f := range files {
		data := testkit.ReadFile(t, f)
		var msgs []rpc
		for _, l := range strings.Split(strings.TrimSpace(string(data)), "\n") {
			if l == "" {
				continue
			}
			var tl tapLine
			if err := json.Unmarshal([]byte(l), &tl); err != nil {
				t.Fatalf("tap record %s: %v", f, err)
			}
			var m rpc
			if err := json.Unmarshal(tl.Msg, &m); err != nil {
				t.Fatalf("tap record %s: %v", f, err)
			}
			m.Dir = tl.Dir
			msgs = append(msgs, m)
		}
		out = append(out, msgs)
	}
	return out
}

// calls returns, for one process's record, the requests of method with the
// answer each got (nil when none came).
func calls(msgs []rpc, method string) (reqs []rpc, answers []*rpc) {
	for _, m := range msgs {
		if m.Dir == "in" && m.Method == method && len(m.ID) > 0 {
			reqs = append(reqs, m)
			var ans *rpc
			for i := range msgs {
				if msgs[i].Dir == "out" && msgs[i].Method == "" && string(msgs[i].ID) == string(m.ID) {
					ans = &msgs[i]
					break
				}
			}
			answers = append(answers, ans)
		}
	}
	return reqs, answers
}

// sessionOf reads params.sessionId.
func sessionOf(m rpc) string {
	var p struct {
		SessionID string `json:"sessionId"`
	}
	_ = json.Unmarshal(m.Params, &p)
	return p.SessionID
}
