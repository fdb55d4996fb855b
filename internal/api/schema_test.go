package api

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/residentd/residentd/apitype"
	"github.com/residentd/residentd/internal/testkit"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

// openAPIPath is the machine-readable description of the local API that
// every response the tests produce is checked against.
const openAPIPath = "../../docs/openapi.json"

// openAPIPaths is the operations docs/openapi.json describes, by path and
// method.
func openAPIPaths(t *testing.T) map[string]map[string]json.RawMessage {
	t.Helper()
	data := testkit.ReadFile(t, openAPIPath)
	var doc struct {
		Paths map[string]map[string]json.RawMessage `json:"paths"`
	}
	if err := json.Unmarshal(data, &doc); err != nil {
		t.Fatal(err)
	}
	return doc.Paths
}

// apiSchema is docs/openapi.json compiled with a JSON Schema library; the
// schema of a response is found by its route, status and content type.
type apiSchema struct {
	doc      map[string]any
	compiler *jsonschema.Compiler

	mu       sync.Mutex
	compiled map[string]*jsonschema.Schema
}

// loadSchema is the strict variant of docs/openapi.json, which the suite's
// own traffic must match exactly.
func loadSchema() (*apiSchema, error) { return loadSchemaAs(true) }

// loadSchemaAs compiles the document as published (open to what a newer
// daemon adds) or, strict, as derived by strictVariant.
func loadSchemaAs(strict bool) (*apiSchema, error) {
	raw, err := os.ReadFile(openAPIPath)
	if err != nil {
		return nil, err
	}
	var doc map[string]any
	if err := json.Unmarshal(raw, &doc); err != nil {
		return nil, fmt.Errorf("%s: %w", openAPIPath, err)
	}
	if strict {
		strictVariant(doc)
	}
	return compileDoc(doc)
}

// compileDoc compiles a form of the document, decoded.
func compileDoc(doc map[string]any) (*apiSchema, error) {
	raw, err := json.Marshal(doc)
	if err != nil {
		return nil, err
	}
	inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
	if err != nil {
		return nil, err
	}
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	c.AssertFormat()
	if err := c.AddResource("openapi.json", inst); err != nil {
		return nil, err
	}
	return &apiSchema{doc: doc, compiler: c, compiled: map[string]*jsonschema.Schema{}}, nil
}

// unknownKinds are the published document's fallbacks for event and update
// kinds a newer daemon sends; the strict variant has none.
var unknownKinds = map[string]bool{"#/components/schemas/UnknownEvent": true, "#/components/schemas/UnknownUpdate": true}

// strictVariant turns the published document, which lets responses and
// events carry what a newer daemon adds, into the exact description of
// this daemon: every object with properties and no additionalProperties
// is closed, every open enum (anyOf: a string enum, then any string) is
// the enum alone, and the fallbacks for unknown kinds leave each oneOf.
// Applied to a document without open parts it changes nothing.
func strictVariant(v any) {
	switch x := v.(type) {
	case map[string]any:
		if _, ok := x["properties"]; ok {
			if _, set := x["additionalProperties"]; !set {
				x["additionalProperties"] = false
			}
		}
		if isOpenEnum(x) {
			known := x["anyOf"].([]any)[0].(map[string]any)
			delete(x, "anyOf")
			x["type"], x["enum"] = "string", known["enum"]
		}
		if alts, ok := x["oneOf"].([]any); ok {
			kept := alts[:0:0]
			for _, a := range alts {
				if m, _ := a.(map[string]any); m == nil || !unknownKinds[fmt.Sprint(m["$ref"])] {
					kept = append(kept, a)
				}
			}
			x["oneOf"] = kept
		}
		for _, c := range x {
			strictVariant(c)
		}
	case []any:
		for _, c := range x {
			strictVariant(c)
		}
	}
}

// schema compiles the schema at a JSON pointer into the document.
func (a *apiSchema) schema(pointer string) (*jsonschema.Schema, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if s := a.compiled[pointer]; s != nil {
		return s, nil
	}
	s, err := a.compiler.Compile("openapi.json#" + pointer)
	if err != nil {
		return nil, err
	}
	a.compiled[pointer] = s
	return s, nil
}

func escapePointer(s string) string {
	return strings.ReplaceAll(strings.ReplaceAll(s, "~", "~0"), "/", "~1")
}

var pathParam = regexp.MustCompile(`\{[^}]*\}`)

// pathItem finds the documented path for a mux pattern such as
// "GET /v1/runs/{run}"; parameter names need not agree.
func (a *apiSchema) pathItem(pattern string) (string, map[string]any, bool) {
	_, path, _ := strings.Cut(pattern, " ")
	paths, _ := a.doc["paths"].(map[string]any)
	want := pathParam.ReplaceAllString(path, "{}")
	for p, item := range paths {
		if pathParam.ReplaceAllString(p, "{}") == want {
			m, _ := item.(map[string]any)
			return p, m, true
		}
	}
	return "", nil, false
}

// check validates one recorded response against the document.
func (a *apiSchema) check(rec TraceRecord) error {
	_, err := a.checkValues(rec)
	return err
}

// checkValues validates one recorded response against the document and
// counts the JSON values it validated: the body, or each line of a stream.
func (a *apiSchema) checkValues(rec TraceRecord) (int, error) {
	if rec.Truncated {
		return 0, nil
	}
	ct, _, _ := strings.Cut(rec.ContentType, ";")
	ct = strings.TrimSpace(ct)
	var pointer string
	if rec.Pattern == "" || rec.Pattern == "/" {
		// The peer guard and the catch-all answer only with errors.
		if rec.Status < 400 {
			return 0, fmt.Errorf("%s %s: status %d from the catch-all", rec.Method, rec.Path, rec.Status)
		}
		pointer = "/components/schemas/ErrorBody"
	} else {
		path, item, ok := a.pathItem(rec.Pattern)
		if !ok {
			return 0, fmt.Errorf("route %q is not in %s", rec.Pattern, openAPIPath)
		}
		op, _ := item[strings.ToLower(rec.Method)].(map[string]any)
		if op == nil {
			return 0, fmt.Errorf("%s %s is not documented", rec.Method, path)
		}
		responses, _ := op["responses"].(map[string]any)
		status := strconv.Itoa(rec.Status)
		resp, _ := responses[status].(map[string]any)
		if resp == nil {
			status = "default"
			if resp, _ = responses[status].(map[string]any); resp == nil {
				return 0, fmt.Errorf("%s %s: status %d is not documented", rec.Method, path, rec.Status)
			}
		}
		content, _ := resp["content"].(map[string]any)
		if _, ok := content[ct]; !ok {
			return 0, fmt.Errorf("%s %s: status %d: content type %q is not documented", rec.Method, path, rec.Status, rec.ContentType)
		}
		if ct != "application/json" && ct != "application/x-ndjson" {
			return 0, nil // the Prometheus exposition is not JSON
		}
		pointer = "/paths/" + escapePointer(path) + "/" + strings.ToLower(rec.Method) + "/responses/" + status + "/content/" + escapePointer(ct) + "/schema"
	}
	s, err := a.schema(pointer)
	if err != nil {
		return 0, fmt.Errorf("compile %s: %w", pointer, err)
	}
	values := []string{rec.Body}
	if ct == "application/x-ndjson" {
		values = strings.Split(strings.TrimSuffix(rec.Body, "\n"), "\n")
	}
	n := 0
	for i, v := range values {
		if v == "" && len(values) == 1 {
			continue // a stream the client left before any line
		}
		n++
		inst, err := jsonschema.UnmarshalJSON(strings.NewReader(v))
		if err != nil {
			return 0, fmt.Errorf("%s %s: line %d is not JSON: %w", rec.Method, rec.Path, i+1, err)
		}
		if err := s.Validate(inst); err != nil {
			return n, fmt.Errorf("%s %s (status %d): %s\ndoes not match %s: %v", rec.Method, rec.Path, rec.Status, v, pointer, err)
		}
	}
	return n, nil
}

// documents are the two forms of docs/openapi.json the traffic must
// match: the strict variant, which says the document is exactly what this
// daemon sends, and the document as published, which a client validates
// against. Both apply oneOf as JSON Schema defines it, exactly one branch:
// in the published one a known event or update kind that an Unknown*
// fallback also admits matches two and fails.
type documents struct{ strict, published *apiSchema }

func loadDocuments() (documents, error) {
	strict, err := loadSchemaAs(true)
	if err != nil {
		return documents{}, err
	}
	published, err := loadSchemaAs(false)
	if err != nil {
		return documents{}, err
	}
	return documents{strict: strict, published: published}, nil
}

// check validates rec against both documents and counts the JSON values
// (bodies and stream lines) it validated.
func (d documents) check(rec TraceRecord) (int, error) {
	n, err := d.strict.checkValues(rec)
	if err != nil {
		return 0, fmt.Errorf("strict variant: %w", err)
	}
	if _, err := d.published.checkValues(rec); err != nil {
		return 0, fmt.Errorf("published document: %w", err)
	}
	return n, nil
}

// traffic is what one trace file holds, checked.
type traffic struct {
	records int
	values  int            // JSON values (bodies, stream lines) valid in both documents
	events  map[string]int // stream event kinds seen
	updates map[string]int // update kinds seen
	routes  map[string]int
}

func (tr traffic) String() string {
	lines := 0
	for _, n := range tr.events {
		lines += n
	}
	return fmt.Sprintf("%d responses on %d routes, %d JSON values (%d of them run events and stream lines) each valid against the strict and the published document, every oneOf matched by exactly one branch; events %v; updates %v",
		tr.records, len(tr.routes), tr.values, lines, tr.events, tr.updates)
}

// checkTrace validates every record of the trace files matching glob.
func checkTrace(a documents, glob string) (traffic, error) {
	tr := traffic{events: map[string]int{}, updates: map[string]int{}, routes: map[string]int{}}
	files, err := filepath.Glob(glob)
	if err != nil {
		return tr, err
	}
	var errs []error
	for _, f := range files {
		fh, err := os.Open(f)
		if err != nil {
			return tr, err
		}
		sc := bufio.NewScanner(fh)
		sc.Buffer(nil, 2*maxTraceBody)
		for sc.Scan() {
			var rec TraceRecord
			if err := json.Unmarshal(sc.Bytes(), &rec); err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", f, err))
				continue
			}
			tr.records++
			tr.routes[rec.Pattern]++
			n, err := a.check(rec)
			if err != nil && len(errs) < 20 {
				errs = append(errs, err)
			}
			tr.values += n
			if strings.HasPrefix(rec.ContentType, "application/x-ndjson") {
				for _, l := range strings.Split(rec.Body, "\n") {
					var ev struct {
						Event  string `json:"event"`
						Update *struct {
							Kind string `json:"kind"`
						} `json:"update"`
					}
					if json.Unmarshal([]byte(l), &ev) == nil && ev.Event != "" {
						tr.events[ev.Event]++
						if ev.Update != nil {
							tr.updates[ev.Update.Kind]++
						}
					}
				}
			}
		}
		fh.Close()
		if err := sc.Err(); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", f, err))
		}
	}
	return tr, errors.Join(errs...)
}

// runRecorded runs the package's tests with every response recorded, then
// checks the recording against docs/openapi.json. When the whole package
// ran, every kind of stream event must have been seen, so the check cannot
// pass by seeing nothing.
func runRecorded(m *testing.M) int {
	flag.Parse()
	if f := flag.Lookup("test.bench"); f != nil && f.Value.String() != "" {
		// Benchmarks measure the server as it ships, without the recorder.
		os.Unsetenv(TraceEnv)
		return m.Run()
	}
	dir := os.Getenv(TraceEnv)
	if dir == "" {
		var err error
		if dir, err = os.MkdirTemp("", "residentd-trace-"); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		defer os.RemoveAll(dir)
		os.Setenv(TraceEnv, dir)
	}
	code := m.Run()
	if code != 0 {
		return code
	}
	a, err := loadDocuments()
	if err != nil {
		fmt.Fprintln(os.Stderr, "schema:", err)
		return 1
	}
	tr, err := checkTrace(a, filepath.Join(dir, fmt.Sprintf("trace-%d.ndjson", os.Getpid())))
	if err != nil {
		fmt.Fprintf(os.Stderr, "responses that do not match %s:\n%v\n", openAPIPath, err)
		return 1
	}
	if testing.Verbose() && tr.records > 0 {
		fmt.Printf("api traffic: %v\n", tr)
	}
	if f := flag.Lookup("test.run"); f != nil && f.Value.String() == "" {
		if missing := missingKinds(tr); len(missing) > 0 {
			fmt.Fprintf(os.Stderr, "the api tests produced no %v; the schema check saw %d responses\n", missing, tr.records)
			return 1
		}
	}
	return 0
}

// missingKinds lists the event kinds a full run must produce but did not.
func missingKinds(tr traffic) []string {
	var missing []string
	for _, k := range []string{apitype.EventQueued, apitype.EventStarted, apitype.EventUpdate, apitype.EventPermissionRequest, apitype.EventPermissionDecision, apitype.EventDone, apitype.EventError, apitype.EventKeepalive} {
		if tr.events[k] == 0 {
			missing = append(missing, k)
		}
	}
	return missing
}

// TestSuiteTraffic checks what the whole suite recorded (test.sh sets
// RESIDENTD_API_TRACE for every package, then runs this with
// RESIDENTD_API_TRACE_CHECK naming the same directory).
func TestSuiteTraffic(t *testing.T) {
	dir := os.Getenv("RESIDENTD_API_TRACE_CHECK")
	if dir == "" {
		t.Skip("RESIDENTD_API_TRACE_CHECK is unset; test.sh runs this after the whole suite")
	}
	a, err := loadDocuments()
	if err != nil {
		t.Fatal(err)
	}
	tr, err := checkTrace(a, filepath.Join(dir, "trace-*.ndjson"))
	if err != nil {
		t.Fatalf("responses that do not match %s:\n%v", openAPIPath, err)
	}
	if missing := missingKinds(tr); len(missing) > 0 {
		t.Errorf("the suite produced no %v events", missing)
	}
	t.Logf("%v", tr)
}

// The check can fail: responses that break the description are caught.
func TestSchemaCheckRejects(t *testing.T) {
	a, err := loadSchema()
	if err != nil {
		t.Fatal(err)
	}
	ok := TraceRecord{Method: "GET", Pattern: "GET /v1/health", Path: "/v1/health", Status: 200, ContentType: "application/json",
		Body: `{"ok":true,"version":"v","pid":1,"uptime_seconds":0,"live":0,"busy":0,"queued":0,"max_live":4,"bindings":1,"binding_commands":[]}`}
	if err := a.check(ok); err != nil {
		t.Fatalf("a valid health response: %v", err)
	}
	stream := func(lines ...string) TraceRecord {
		return TraceRecord{Method: "POST", Pattern: "POST /v1/turns", Path: "/v1/turns", Status: 200, ContentType: "application/x-ndjson", Body: strings.Join(lines, "\n") + "\n"}
	}
	for name, rec := range map[string]TraceRecord{
		"unknown field":      {Method: "GET", Pattern: "GET /v1/health", Path: "/v1/health", Status: 200, ContentType: "application/json", Body: strings.Replace(ok.Body, `"ok":true`, `"ok":true,"extra":1`, 1)},
		"wrong type":         {Method: "GET", Pattern: "GET /v1/health", Path: "/v1/health", Status: 200, ContentType: "application/json", Body: strings.Replace(ok.Body, `"pid":1`, `"pid":"1"`, 1)},
		"unknown error code": {Method: "GET", Pattern: "GET /v1/runs/{run}", Path: "/v1/runs/x", Status: 404, ContentType: "application/json", Body: `{"error":{"code":"no_such_code","message":"m"}}`},
		"undocumented route": {Method: "GET", Pattern: "GET /v1/nope", Path: "/v1/nope", Status: 200, ContentType: "application/json", Body: `{}`},
		"wrong content type": {Method: "GET", Pattern: "GET /v1/health", Path: "/v1/health", Status: 200, ContentType: "text/html", Body: ok.Body},
		"unknown event":      stream(`{"event":"started","run_id":"r","seq":1,"at":"2026-12-01T09:00:00Z","shape":"warm","native_session":"n","pid":1}`, `{"event":"exploded","run_id":"r","seq":2}`),
		"bad queue reason":   stream(`{"event":"queued","run_id":"r","seq":1,"at":"2026-12-01T09:00:00Z","reason":"bored","position":1}`),
		"bad time":           stream(`{"event":"queued","run_id":"r","seq":1,"at":"yesterday","reason":"no_slot","position":1}`),
	} {
		if err := a.check(rec); err == nil {
			t.Errorf("%s: accepted %s", name, rec.Body)
		}
	}
}

// TestPublishedSchemaToleratesTheNew validates, against docs/openapi.json
// as published, what a newer daemon may send within /v1: a response with
// a field this version does not list, an unknown error code, an event of
// an unknown kind and an update of an unknown kind, events and updates
// with fields and values this version does not list, and the run feed's
// announcements with an unknown kind, run kind or field.
// The strict variant the traffic check uses refuses each of them, and
// this daemon's own shapes pass both.
func TestPublishedSchemaToleratesTheNew(t *testing.T) {
	published, err := loadSchemaAs(false)
	if err != nil {
		t.Fatal(err)
	}
	strict, err := loadSchemaAs(true)
	if err != nil {
		t.Fatal(err)
	}
	const (
		errorBody = "/components/schemas/ErrorBody"
		event     = "/components/schemas/Event"
		health    = "/paths/~1v1~1health/get/responses/200/content/application~1json/schema"
		feed      = "/paths/~1v1~1events/get/responses/200/content/application~1x-ndjson/schema"
		run       = "/paths/~1v1~1runs~1{run}/get/responses/200/content/application~1json/schema"
	)
	newer := []struct{ pointer, doc string }{
		{health, `{"ok":true,"version":"9.9.9","pid":1,"uptime_seconds":3,"live":0,"busy":0,"queued":0,"max_live":4,"bindings":1,"binding_commands":[],"gpu_count":2}`},
		{errorBody, `{"error":{"code":"rate_limited_by_moon","message":"later","retry_hint":"tomorrow"}}`},
		{event, `{"event":"agent_mood","run_id":"run-1","seq":4,"at":"2026-12-04T10:00:00Z","mood":"cheerful"}`},
		{event, `{"event":"update","run_id":"run-1","seq":5,"at":"2026-12-04T10:00:00Z","update":{"kind":"available_commands","commands":["/review"]}}`},
		{event, `{"event":"error","run_id":"run-1","seq":6,"at":"2026-12-04T10:00:00Z","code":"brand_new_failure","message":"m","hint":"h"}`},
		{event, `{"event":"restoring","run_id":"run-1","seq":1,"at":"2026-12-04T10:00:00Z","method":"clone","from":"nat-0"}`},
		{event, `{"event":"interrupted","run_id":"run-1","seq":2,"at":"2026-12-04T10:00:00Z","attempt":1,"signal":"SIGKILL"}`},
		{event, `{"event":"update","run_id":"run-1","seq":5,"at":"2026-12-04T10:00:00Z","update":{"kind":"notice","notice":{"severity":"info","title":"t","link":"https://example.invalid"}}}`},
		{event, `{"event":"update","run_id":"run-1","seq":5,"at":"2026-12-04T10:00:00Z","update":{"kind":"compaction_update","compaction":{"status":"completed","tokens_saved":900}}}`},
		{event, `{"event":"done","run_id":"run-1","seq":7,"at":"2026-12-04T10:00:00Z","watermark":"committed","answers":[{"run_id":"run-1","message_id":"m1","author":"aiko"}]}`},
		{feed, `{"event":"run_paused","seq":9,"at":"2026-12-04T10:00:00Z","run_id":"run-1","kind":"turn","state":"paused"}`},
		{feed, `{"event":"run_started","seq":10,"at":"2026-12-04T10:00:00Z","run_id":"sub-run-1","kind":"subagent","channel_id":"ch","binding_id":"b","state":"starting","parent_run_id":"run-1"}`},
		{run, `{"run_id":"r","kind":"scheduled","state":"starting","channel_id":"ch","binding_id":"b","created_at":"2026-12-04T10:00:00Z","last_seq":0}`},
	}
	for _, n := range newer {
		if err := validateAt(t, published, n.pointer, n.doc); err != nil {
			t.Errorf("published document refuses a newer daemon's %s:\n%v", n.doc, err)
		}
		if err := validateAt(t, strict, n.pointer, n.doc); err == nil {
			t.Errorf("the strict variant accepts %s, which this daemon never sends", n.doc)
		}
	}
	current := []struct{ pointer, doc string }{
		{errorBody, `{"error":{"code":"agent_forbidden","message":"m"}}`},
		{event, `{"event":"error","run_id":"run-1","seq":6,"at":"2026-12-04T10:00:00Z","code":"timeout","message":"m"}`},
		{event, `{"event":"update","run_id":"run-1","seq":5,"at":"2026-12-04T10:00:00Z","update":{"kind":"tool_call","tool_call":{"id":"t1","title":"x","status":"pending"}}}`},
		{feed, `{"event":"run_started","seq":7,"at":"2026-12-04T10:00:00Z","run_id":"run-02","kind":"turn","channel_id":"ch-backend","binding_id":"b-claude","message_id":"m026","state":"starting"}`},
		{feed, `{"event":"run_ended","seq":9,"at":"2026-12-04T10:00:00Z","run_id":"agent-run-5c","kind":"agent","channel_id":"ch-backend","binding_id":"b-claude","state":"succeeded"}`},
		{feed, `{"event":"keepalive","at":"2026-12-04T10:00:00Z"}`},
	}
	for _, c := range current {
		for name, a := range map[string]*apiSchema{"published": published, "strict": strict} {
			if err := validateAt(t, a, c.pointer, c.doc); err != nil {
				t.Errorf("%s document refuses this daemon's %s:\n%v", name, c.doc, err)
			}
		}
	}
}

// Every object a response or an event can hold is open in the published
// document (no additionalProperties: false), and every enum it carries is
// open (an anyOf of the values known and any string), but for the
// property a union's branches are told apart by (a branch's own kinds);
// request bodies stay closed. TestPublishedSchemaToleratesTheNew checks a
// few by example; this walks every schema a response reaches.
func TestResponseSchemasAreOpen(t *testing.T) {
	a, err := loadSchemaAs(false)
	if err != nil {
		t.Fatal(err)
	}
	const prefix = "#/components/schemas/"
	reached := map[string]bool{}
	var reach func(v any)
	reach = func(v any) {
		switch x := v.(type) {
		case map[string]any:
			if ref, ok := x["$ref"].(string); ok && !reached[strings.TrimPrefix(ref, prefix)] {
				reached[strings.TrimPrefix(ref, prefix)] = true
				reach(a.component(t, strings.TrimPrefix(ref, prefix)))
			}
			for _, c := range x {
				reach(c)
			}
		case []any:
			for _, c := range x {
				reach(c)
			}
		}
	}
	paths, _ := a.doc["paths"].(map[string]any)
	for _, item := range paths {
		for _, op := range item.(map[string]any) {
			if op, ok := op.(map[string]any); ok {
				reach(op["responses"])
			}
		}
	}
	// The property that tells each union's branches apart, by branch.
	selector := map[string]string{}
	for name := range reached {
		s := a.component(t, name)
		disc, _ := s["discriminator"].(map[string]any)
		prop, _ := disc["propertyName"].(string)
		alts, _ := s["oneOf"].([]any)
		for _, alt := range alts {
			if ref, ok := alt.(map[string]any)["$ref"].(string); ok && prop != "" {
				selector[strings.TrimPrefix(ref, prefix)] = prop
			}
		}
	}
	var closed []string
	var walk func(path string, v any)
	walk = func(path string, v any) {
		switch x := v.(type) {
		case map[string]any:
			if x["additionalProperties"] == false {
				closed = append(closed, path+": additionalProperties false")
			}
			if _, ok := x["enum"]; ok {
				closed = append(closed, path+": a closed enum")
			}
			for k, c := range x {
				switch {
				case k == "not":
					continue // a fallback's list of the kinds it does not take
				case k == "anyOf" && isOpenEnum(x):
					continue
				}
				walk(path+"/"+k, c)
			}
		case []any:
			for i, c := range x {
				walk(path+"/"+strconv.Itoa(i), c)
			}
		}
	}
	for name := range reached {
		s := a.component(t, name)
		for prop, p := range propsOf(s) {
			if prop == selector[name] {
				continue
			}
			walk(name+"/properties/"+prop, p)
		}
		if s["additionalProperties"] == false {
			closed = append(closed, name+": additionalProperties false")
		}
		for k, c := range s {
			if k != "properties" && k != "not" {
				walk(name+"/"+k, c)
			}
		}
	}
	sort.Strings(closed)
	for _, c := range closed {
		t.Errorf("%s: a response or event schema is closed: %s", openAPIPath, c)
	}
	if len(reached) < 40 {
		t.Fatalf("responses reach only %d schemas: the walk is broken", len(reached))
	}
}

// isOpenEnum reports whether s is an open enum: anyOf a string enum and
// any string.
func isOpenEnum(s map[string]any) bool {
	alts, ok := s["anyOf"].([]any)
	if !ok || len(alts) != 2 {
		return false
	}
	known, _ := alts[0].(map[string]any)
	other, _ := alts[1].(map[string]any)
	return known["enum"] != nil && other["type"] == "string" && other["enum"] == nil
}

func propsOf(s map[string]any) map[string]any {
	p, _ := s["properties"].(map[string]any)
	return p
}
