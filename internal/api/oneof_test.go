package api

import (
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

// The published document tells events and updates apart by a oneOf whose
// last branch, UnknownEvent or UnknownUpdate, admits the kinds a newer
// daemon may add: every kind its `not` list leaves out. A known kind
// missing from that list matches its own branch and the fallback, and a
// validating client refuses it (oneOf is exactly one branch).

// knownKinds is one event of every kind this daemon sends, and one update
// event of every update kind, as small as their schemas allow.
var knownKinds = map[string]string{
	"queued":              `{"event":"queued","run_id":"run-1","seq":1,"at":"2026-12-04T10:00:00Z","reason":"key_busy","position":1}`,
	"restoring":           `{"event":"restoring","run_id":"run-1","seq":1,"at":"2026-12-04T10:00:00Z","method":"resume"}`,
	"started":             `{"event":"started","run_id":"run-1","seq":2,"at":"2026-12-04T10:00:00Z","attempt":1,"shape":"restored","native_session":"nat-1","pid":42}`,
	"permission_request":  `{"event":"permission_request","run_id":"run-1","seq":3,"at":"2026-12-04T10:00:00Z","permission":{"id":"perm-1","tool_call":{"id":"tc-1","title":"Run go test","kind":"execute"},"options":[{"id":"allow","name":"Allow","kind":"allow_once"}],"expires_at":"2026-12-04T10:05:00Z"}}`,
	"permission_decision": `{"event":"permission_decision","run_id":"run-1","seq":4,"at":"2026-12-04T10:00:00Z","decision":{"request_id":"perm-1","tool":"Run go test","option_id":"allow","kind":"allow_once","decided_by":"person","answered_by":"u-ana"}}`,
	"elicitation_request": `{"event":"elicitation_request","run_id":"run-1","seq":5,"at":"2026-12-04T10:00:00Z","elicitation":{"id":"elicit-2","message":"Which environment?","requested_schema":{"type":"object","properties":{"env":{"type":"string","enum":["staging","production"]}},"required":["env"]},"expires_at":"2026-12-04T10:05:00Z"}}`,
	"elicitation_answer":  `{"event":"elicitation_answer","run_id":"run-1","seq":6,"at":"2026-12-04T10:00:09Z","elicited":{"request_id":"elicit-2","action":"accept","content":{"env":"staging"},"decided_by":"person","answered_by":"u-ana"}}`,
	"budget":              `{"event":"budget","run_id":"run-1","seq":5,"at":"2026-12-04T10:00:00Z","budget":{"scope":"binding","id":"b-claude","level":"warning","spent":"16.2","limit":"20","currency":"USD","resets_at":"2026-12-05T00:00:00Z"}}`,
	"interrupted":         `{"event":"interrupted","run_id":"run-1","seq":6,"at":"2026-12-04T10:00:00Z","attempt":1}`,
	"done":                `{"event":"done","run_id":"run-1","seq":7,"at":"2026-12-04T10:00:00Z","shape":"warm","native_session":"nat-1","stop_reason":"end_turn","text":"ok","watermark":"committed"}`,
	"error":               `{"event":"error","run_id":"run-1","seq":7,"at":"2026-12-04T10:00:00Z","code":"timeout","message":"m"}`,
	"keepalive":           `{"event":"keepalive","run_id":"run-1","at":"2026-12-04T10:00:00Z"}`,

	"update agent_message_chunk": `{"event":"update","run_id":"run-1","seq":3,"at":"2026-12-04T10:00:00Z","update":{"kind":"agent_message_chunk","text":"Looking"}}`,
	"update agent_thought_chunk": `{"event":"update","run_id":"run-1","seq":3,"at":"2026-12-04T10:00:00Z","update":{"kind":"agent_thought_chunk","text":"hm"}}`,
	"update tool_call":           `{"event":"update","run_id":"run-1","seq":3,"at":"2026-12-04T10:00:00Z","update":{"kind":"tool_call","text":"x","tool_call":{"id":"t1","title":"x","status":"pending"}}}`,
	"update tool_call_update":    `{"event":"update","run_id":"run-1","seq":3,"at":"2026-12-04T10:00:00Z","update":{"kind":"tool_call_update","tool_call":{"id":"t1","status":"completed"}}}`,
	"update plan":                `{"event":"update","run_id":"run-1","seq":3,"at":"2026-12-04T10:00:00Z","update":{"kind":"plan","plan":{"entries":[{"content":"read","priority":"high","status":"pending"}]}}}`,
	"update usage_update":        `{"event":"update","run_id":"run-1","seq":3,"at":"2026-12-04T10:00:00Z","update":{"kind":"usage_update","context_usage":{"used":10,"size":100}}}`,
	"update notice":              `{"event":"update","run_id":"run-1","seq":3,"at":"2026-12-04T10:00:00Z","update":{"kind":"notice","text":"slow","notice":{"severity":"warning","title":"slow"}}}`,
	"update compaction_update":   `{"event":"update","run_id":"run-1","seq":3,"at":"2026-12-04T10:00:00Z","update":{"kind":"compaction_update","compaction":{"id":"c1","status":"completed","summary":"s"}}}`,
	"update other":               `{"event":"update","run_id":"run-1","seq":3,"at":"2026-12-04T10:00:00Z","update":{"kind":"other","raw":{"sessionUpdate":"x"}}}`,
}

// unions are the published document's open unions: the union, the
// property that tells its branches apart, and its fallback for the kinds
// it does not list.
var unions = []struct{ union, property, fallback string }{
	{"Event", "event", "UnknownEvent"},
	{"Update", "kind", "UnknownUpdate"},
}

// excluded is the kinds a fallback's `not` list names.
func excluded(t *testing.T, fallback map[string]any, property string) []string {
	t.Helper()
	p, _ := fallback["properties"].(map[string]any)
	f, _ := p[property].(map[string]any)
	not, _ := f["not"].(map[string]any)
	list, ok := not["enum"].([]any)
	if !ok {
		t.Fatalf("the fallback's %s has no not.enum", property)
	}
	var out []string
	for _, v := range list {
		out = append(out, v.(string))
	}
	sort.Strings(out)
	return out
}

// Each union's fallback leaves out exactly the kinds its branches and its
// discriminator name, and every known kind has an example here.
func TestUnknownKindsLeaveOutTheKnown(t *testing.T) {
	a, err := loadSchemaAs(false)
	if err != nil {
		t.Fatal(err)
	}
	for _, u := range unions {
		s := a.component(t, u.union)
		var branches []string
		for _, alt := range s["oneOf"].([]any) {
			ref := alt.(map[string]any)["$ref"].(string)
			if ref == "#/components/schemas/"+u.fallback {
				continue
			}
			branches = append(branches, constOf(a.resolve(t, alt.(map[string]any)), u.property)...)
		}
		disc, _ := s["discriminator"].(map[string]any)
		mapping, _ := disc["mapping"].(map[string]any)
		if disc["propertyName"] != u.property {
			t.Errorf("%s's discriminator is %v, want %s", u.union, disc["propertyName"], u.property)
		}
		sameSet(t, u.union+" kinds", "its branches", union(branches), "its discriminator", union(keys(mapping)))
		sameSet(t, u.union+" kinds", "its branches", union(branches), u.fallback+"'s not list", excluded(t, a.component(t, u.fallback), u.property))
		for _, k := range branches {
			name := k
			switch {
			case u.union == "Update":
				name = "update " + k
			case k == "update":
				name = "update other" // an update event of any kind
			}
			if _, ok := knownKinds[name]; !ok {
				t.Errorf("no example of %s kind %q in knownKinds", u.union, k)
			}
		}
	}
}

// Every kind this daemon sends matches exactly one branch of the published
// document and of the strict variant; in a document whose fallback forgets
// the kind (as UnknownEvent once forgot restoring and interrupted) the
// same event matches two branches and is refused. So the traffic check,
// which validates against both documents, fails on such a document.
func TestOneOfMatchesExactlyOneBranch(t *testing.T) {
	published, err := loadSchemaAs(false)
	if err != nil {
		t.Fatal(err)
	}
	strict, err := loadSchemaAs(true)
	if err != nil {
		t.Fatal(err)
	}
	const event = "/components/schemas/Event"
	names := keys(knownKinds)
	sort.Strings(names)
	for _, name := range names {
		doc := knownKinds[name]
		for label, a := range map[string]*apiSchema{"published": published, "strict": strict} {
			if err := validateAt(t, a, event, doc); err != nil {
				t.Errorf("%s: the %s document refuses %s:\n%v", name, label, doc, err)
			}
		}
		// The published document with the kind left off its fallback's
		// `not` list: an update event's kind (update) off UnknownEvent's,
		// and its update's kind off UnknownUpdate's.
		forget := []struct{ fallback, property, kind string }{{unions[0].fallback, unions[0].property, name}}
		if kind, ok := strings.CutPrefix(name, "update "); ok {
			forget = []struct{ fallback, property, kind string }{{unions[0].fallback, unions[0].property, "update"}, {unions[1].fallback, unions[1].property, kind}}
		}
		for _, f := range forget {
			err := validateAt(t, forgetKind(t, f.fallback, f.property, f.kind), event, doc)
			if err == nil {
				t.Errorf("%s: a document whose %s admits %q accepts %s, which matches two branches", name, f.fallback, f.kind, doc)
			} else if !strings.Contains(err.Error(), "'oneOf' failed") || !strings.Contains(err.Error(), "matched") {
				t.Errorf("%s: refused, but not for matching two branches of a oneOf: %v", name, err)
			}
		}
	}
}

// forgetKind is the published document with kind taken off fallback's
// `not` list.
func forgetKind(t *testing.T, fallback, property, kind string) *apiSchema {
	t.Helper()
	a, err := loadSchemaAs(false)
	if err != nil {
		t.Fatal(err)
	}
	f := a.component(t, fallback)
	p := f["properties"].(map[string]any)[property].(map[string]any)
	not := p["not"].(map[string]any)
	list := not["enum"].([]any)
	i := slices.IndexFunc(list, func(v any) bool { return v == kind })
	if i < 0 {
		t.Fatalf("%s's not list has no %q", fallback, kind)
	}
	not["enum"] = slices.Delete(slices.Clone(list), i, i+1)
	out, err := compileDoc(a.doc)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// validateAt validates doc against the schema at pointer.
func validateAt(t *testing.T, a *apiSchema, pointer, doc string) error {
	t.Helper()
	s, err := a.schema(pointer)
	if err != nil {
		t.Fatalf("compile %s: %v", pointer, err)
	}
	inst, err := jsonschema.UnmarshalJSON(strings.NewReader(doc))
	if err != nil {
		t.Fatalf("%s: %v", doc, err)
	}
	return s.Validate(inst)
}
