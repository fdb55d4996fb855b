package interop

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

// v2SchemaRel is the ACP v2 schema of the npm SDK that codex-acp 2.6 and
// claude-agent-acp 0.101 are built with (2.4.0), installed by
// .ci/real-agents; the unstable one holds the stable one and what is
// still a draft (session/status, subagents, usage on idle).
const v2SchemaRel = "node_modules/@agentclientprotocol/codex-acp/node_modules/@agentclientprotocol/sdk/schema/v2/schema.unstable.json"

// v2Schema is the unstable v2 schema, compiled: each message's shape is
// looked up by its method and side (x-method, x-side).
type v2Schema struct {
	defs     map[string]map[string]any
	compiled map[string]*jsonschema.Schema
	c        *jsonschema.Compiler
}

// loadV2Schema reads the schema, skipping the test with a notice where
// .ci/real-agents has not installed it (failing in CI, as the real agents).
func loadV2Schema(t testing.TB) *v2Schema {
	t.Helper()
	path := filepath.Join(repoRoot(t), ".ci", "agents", v2SchemaRel)
	raw, err := os.ReadFile(path)
	if err != nil {
		msg := fmt.Sprintf("the ACP v2 schema %s is not installed: run .ci/real-agents from the repository root (needs node and npm)", path)
		switch {
		case os.Getenv(skipEnv) == "1":
			t.Skipf("%s; skipped because %s=1", msg, skipEnv)
		case os.Getenv("CI") == "true":
			t.Fatalf("%s; CI requires it", msg)
		}
		t.Skipf("%s; skipped outside CI (./test.sh installs it)", msg)
	}
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
	if err != nil {
		t.Fatal(err)
	}
	var top struct {
		Defs map[string]map[string]any `json:"$defs"`
	}
	if err := json.Unmarshal(raw, &top); err != nil {
		t.Fatal(err)
	}
	c := jsonschema.NewCompiler()
	if err := c.AddResource("file:///acp-v2.json", doc); err != nil {
		t.Fatal(err)
	}
	return &v2Schema{defs: top.Defs, compiled: map[string]*jsonschema.Schema{}, c: c}
}

// def is the definition of method's message on side (agent: what the
// agent serves, client: what the client serves) whose name ends in kind
// (Request, Notification, Response).
func (s *v2Schema) def(method, side, kind string) string {
	var names []string
	for name, d := range s.defs {
		if d["x-method"] == method && d["x-side"] == side && strings.HasSuffix(name, kind) {
			names = append(names, name)
		}
	}
	sort.Strings(names)
	if len(names) == 0 {
		return ""
	}
	return names[0]
}

func (s *v2Schema) validate(name string, v json.RawMessage) error {
	sch, ok := s.compiled[name]
	if !ok {
		var err error
		if sch, err = s.c.Compile("file:///acp-v2.json#/$defs/" + name); err != nil {
			return err
		}
		s.compiled[name] = sch
	}
	inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(v))
	if err != nil {
		return err
	}
	return sch.Validate(inst)
}

// checkV2Wire validates every message of one process's record (a v2
// connection) against the schema: each request's and notification's
// params by method and direction, each answer's result by its request's
// method, each error as an Error. Extension methods (a leading _) have no
// fixed shape and are counted apart; a method the schema lacks fails. It
// returns the shapes seen ("in session/prompt", "out session/update
// state_update idle", …), each once, for the test to read.
func checkV2Wire(t testing.TB, s *v2Schema, msgs []rpc) map[string]int {
	t.Helper()
	seen := map[string]int{}
	method := map[string]string{} // dir+id -> the request's method
	for _, m := range msgs {
		other := "out"
		if m.Dir == "out" {
			other = "in"
		}
		if m.Method != "" && len(m.ID) > 0 {
			method[m.Dir+string(m.ID)] = m.Method
		}
		// in: residentd to the agent (the agent serves its requests);
		// out: the agent to residentd (the client serves them).
		side := "agent"
		if m.Dir == "out" {
			side = "client"
		}
		var name, shape string
		var body json.RawMessage
		switch {
		case m.Method != "" && strings.HasPrefix(m.Method, "_"):
			seen[m.Dir+" extension "+m.Method]++
			continue
		case m.Method != "":
			kind := "Request"
			if len(m.ID) == 0 {
				kind = "Notification"
			}
			name, body, shape = s.def(m.Method, side, kind), m.Params, m.Dir+" "+m.Method
			if m.Method == "session/update" {
				shape += " " + updateShape(m.Params)
			}
		case len(m.Error) > 0:
			name, body, shape = "Error", m.Error, m.Dir+" error to "+method[other+string(m.ID)]
		default:
			req := method[other+string(m.ID)]
			if strings.HasPrefix(req, "_") {
				continue
			}
			// An answer is served by the side that got the request.
			aside := "client"
			if m.Dir == "out" {
				aside = "agent"
			}
			name, body, shape = s.def(req, aside, "Response"), m.Result, m.Dir+" answer to "+req
		}
		if name == "" {
			t.Errorf("%s: no definition in the ACP v2 schema: %s", shape, abbreviate(m))
			continue
		}
		if err := s.validate(name, body); err != nil {
			t.Errorf("%s does not match %s: %v\n%s", shape, name, err, abbreviate(m))
			continue
		}
		seen[shape]++
	}
	return seen
}

// updateShape names a session/update's kind and, for a state_update, its
// state and what it carries.
func updateShape(params json.RawMessage) string {
	var p struct {
		Update struct {
			Kind       string          `json:"sessionUpdate"`
			State      any             `json:"state"`
			StopReason *string         `json:"stopReason"`
			Usage      json.RawMessage `json:"usage"`
			Background json.RawMessage `json:"background"`
			Caps       json.RawMessage `json:"capabilities"`
		} `json:"update"`
	}
	_ = json.Unmarshal(params, &p)
	u := p.Update
	out := u.Kind
	if u.Kind == "state_update" {
		out += fmt.Sprintf(" %v", u.State)
		if u.StopReason != nil {
			out += " stopReason=" + *u.StopReason
		}
		if len(u.Usage) > 0 && string(u.Usage) != "null" {
			out += " +usage"
		}
		switch {
		case len(u.Background) == 0 || string(u.Background) == "null":
		case string(u.Background) == "[]":
			out += " background=[]"
		default:
			out += " background=[…]"
		}
	}
	if len(u.Caps) > 0 && string(u.Caps) != "null" {
		out += " +capabilities"
	}
	return out
}

func abbreviate(m rpc) string {
	b, _ := json.Marshal(map[string]any{"dir": m.Dir, "id": m.ID, "method": m.Method, "params": m.Params, "result": m.Result, "error": m.Error})
	if len(b) > 600 {
		return string(b[:600]) + "…"
	}
	return string(b)
}

// logShapes logs the v2 shapes a test saw, sorted.
func logShapes(t testing.TB, who string, seen map[string]int) {
	t.Helper()
	var lines []string
	for k, n := range seen {
		lines = append(lines, fmt.Sprintf("%s ×%d", k, n))
	}
	sort.Strings(lines)
	t.Logf("%s: v2 shapes validated against the schema:\n  %s", who, strings.Join(lines, "\n  "))
}
