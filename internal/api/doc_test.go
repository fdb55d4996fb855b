package api

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"reflect"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/residentd/residentd/internal/testkit"
)

// The API is described three times: in apitype's Go types, in
// docs/openapi.json and in docs/API.md. These tests fail when one of them
// names an event, an update kind, an error code or a field the others do
// not have.

// goAPI is what apitype declares, read from its source.
type goAPI struct {
	consts  map[string]string   // constant name → value
	structs map[string][]string // type name → json field names
}

func readGoAPI(t *testing.T) goAPI {
	t.Helper()
	g := goAPI{consts: map[string]string{}, structs: map[string][]string{}}
	fset := token.NewFileSet()
	pkgs, err := parser.ParseDir(fset, "../../apitype", func(fi os.FileInfo) bool { return !strings.HasSuffix(fi.Name(), "_test.go") }, 0)
	if err != nil {
		t.Fatal(err)
	}
	embeds := map[string][]string{} // struct -> the structs it embeds
	for _, p := range pkgs {
		for _, f := range p.Files {
			ast.Inspect(f, func(n ast.Node) bool {
				switch n := n.(type) {
				case *ast.ValueSpec:
					for i, name := range n.Names {
						if i < len(n.Values) {
							if lit, ok := n.Values[i].(*ast.BasicLit); ok && lit.Kind == token.STRING {
								g.consts[name.Name], _ = strconv.Unquote(lit.Value)
							}
						}
					}
				case *ast.TypeSpec:
					st, ok := n.Type.(*ast.StructType)
					if !ok {
						return true
					}
					var fields []string
					wire := false
					for _, fl := range st.Fields.List {
						if fl.Tag == nil {
							// An embedded struct's fields are inline on the
							// wire (resolved below).
							if len(fl.Names) == 0 {
								typ := fl.Type
								if s, ok := typ.(*ast.StarExpr); ok {
									typ = s.X
								}
								if id, ok := typ.(*ast.Ident); ok {
									embeds[n.Name.Name] = append(embeds[n.Name.Name], id.Name)
								}
							}
							continue
						}
						tag, _ := strconv.Unquote(fl.Tag.Value)
						j, ok := reflect.StructTag(tag).Lookup("json")
						wire = wire || ok
						name, _, _ := strings.Cut(j, ",")
						if name != "" && name != "-" {
							fields = append(fields, name)
						}
					}
					// A struct without json tags (a decoder, say) is not
					// on the wire and has no schema.
					if wire {
						g.structs[n.Name.Name] = fields
					}
				}
				return true
			})
		}
	}
	for name, in := range embeds {
		for _, e := range in {
			g.structs[name] = append(g.structs[name], g.structs[e]...)
		}
	}
	return g
}

// values lists the values of the constants whose names start with prefix.
func (g goAPI) values(prefix string, except ...string) []string {
	var out []string
	for name, v := range g.consts {
		if strings.HasPrefix(name, prefix) && !slices.Contains(except, name) {
			out = append(out, v)
		}
	}
	sort.Strings(out)
	return out
}

func loadDoc(t *testing.T) *apiSchema {
	t.Helper()
	a, err := loadSchema()
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func (a *apiSchema) component(t *testing.T, name string) map[string]any {
	t.Helper()
	comps, _ := a.doc["components"].(map[string]any)
	schemas, _ := comps["schemas"].(map[string]any)
	s, ok := schemas[name].(map[string]any)
	if !ok {
		t.Fatalf("%s has no components.schemas.%s", openAPIPath, name)
	}
	return s
}

// resolve follows a local $ref.
func (a *apiSchema) resolve(t *testing.T, s map[string]any) map[string]any {
	t.Helper()
	if ref, ok := s["$ref"].(string); ok {
		return a.component(t, strings.TrimPrefix(ref, "#/components/schemas/"))
	}
	return s
}

// variants returns a union schema's members (or the schema itself), each
// with the set of its properties.
func (a *apiSchema) variants(t *testing.T, s map[string]any) []map[string]any {
	t.Helper()
	s = a.resolve(t, s)
	for _, k := range []string{"oneOf", "anyOf"} {
		if list, ok := s[k].([]any); ok {
			var out []map[string]any
			for _, v := range list {
				m, _ := v.(map[string]any)
				out = append(out, a.variants(t, m)...)
			}
			return out
		}
	}
	return []map[string]any{s}
}

func props(s map[string]any) []string {
	p, _ := s["properties"].(map[string]any)
	out := make([]string, 0, len(p))
	for k := range p {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// constOf is the value a variant pins property name to.
func constOf(s map[string]any, name string) []string {
	p, _ := s["properties"].(map[string]any)
	f, _ := p[name].(map[string]any)
	if c, ok := f["const"].(string); ok {
		return []string{c}
	}
	var out []string
	if e, ok := f["enum"].([]any); ok {
		for _, v := range e {
			out = append(out, v.(string))
		}
	}
	return out
}

func union(lists ...[]string) []string {
	set := map[string]bool{}
	for _, l := range lists {
		for _, v := range l {
			set[v] = true
		}
	}
	out := make([]string, 0, len(set))
	for v := range set {
		out = append(out, v)
	}
	sort.Strings(out)
	return out
}

func diff(a, b []string) []string {
	var out []string
	for _, v := range a {
		if !slices.Contains(b, v) {
			out = append(out, v)
		}
	}
	return out
}

func sameSet(t *testing.T, what string, aName string, a []string, bName string, b []string) {
	t.Helper()
	if d := diff(a, b); len(d) > 0 {
		t.Errorf("%s: %s has %v, %s does not", what, aName, d, bName)
	}
	if d := diff(b, a); len(d) > 0 {
		t.Errorf("%s: %s has %v, %s does not", what, bName, d, aName)
	}
}

// Every apitype struct has a schema of the same name with the same fields.
func TestSchemaMatchesGoTypes(t *testing.T) {
	g, a := readGoAPI(t), loadDoc(t)
	for name, fields := range g.structs {
		var all [][]string
		for _, v := range a.variants(t, a.component(t, name)) {
			all = append(all, props(v))
			if req, ok := v["required"].([]any); ok {
				for _, r := range req {
					if !slices.Contains(props(v), r.(string)) {
						t.Errorf("schema %s requires %q but does not describe it", name, r)
					}
				}
			}
			if v["additionalProperties"] != false {
				t.Errorf("schema %s (or a variant) allows fields it does not describe", name)
			}
		}
		sameSet(t, "fields of "+name, "apitype."+name, union(fields), openAPIPath, union(all...))
	}
}

var (
	mdRow  = regexp.MustCompile("^\\|(.*)\\|\\s*$")
	mdCode = regexp.MustCompile("`([a-z_0-9]+)`")
)

// mdTable returns the rows of the first table after the line that starts
// with heading, as cells.
func mdTable(t *testing.T, doc, heading string) [][]string {
	t.Helper()
	lines := strings.Split(doc, "\n")
	i := slices.IndexFunc(lines, func(l string) bool { return strings.HasPrefix(l, heading) })
	if i < 0 {
		t.Fatalf("docs/API.md has no %q", heading)
	}
	var rows [][]string
	for _, l := range lines[i+1:] {
		m := mdRow.FindStringSubmatch(l)
		if m == nil {
			if len(rows) > 0 {
				break
			}
			continue
		}
		cells := strings.Split(m[1], "|")
		if strings.HasPrefix(strings.TrimSpace(cells[0]), "---") || len(rows) == 0 && !strings.Contains(cells[0], "`") && !strings.Contains(cells[1], "`") {
			if len(rows) == 0 {
				rows = append(rows, nil) // header
			}
			continue
		}
		rows = append(rows, cells)
	}
	if len(rows) > 0 && rows[0] == nil {
		rows = rows[1:]
	}
	return rows
}

func codes(cell string) []string {
	var out []string
	for _, m := range mdCode.FindAllStringSubmatch(cell, -1) {
		out = append(out, m[1])
	}
	return out
}

// common are the fields every event carries, documented once above the
// table.
var common = []string{"event", "run_id", "seq", "at"}

func TestAPIDocMatchesSchemaAndCode(t *testing.T) {
	g, a := readGoAPI(t), loadDoc(t)
	raw := testkit.ReadFile(t, "../../docs/API.md")
	doc := string(raw)

	// Stream events: the table, the schema's Event variants and apitype's
	// Event* constants name the same kinds with the same fields.
	variants := map[string][]string{}
	for _, v := range a.variants(t, a.component(t, "Event")) {
		for _, kind := range constOf(v, "event") {
			variants[kind] = union(variants[kind], props(v))
		}
	}
	var documented []string
	for _, row := range mdTable(t, doc, "### Stream events") {
		kind := codes(row[0])[0]
		documented = append(documented, kind)
		fields := union(codes(row[1]))
		schema, ok := variants[kind]
		if !ok {
			continue
		}
		sameSet(t, "fields of event "+kind, "docs/API.md", fields, openAPIPath, diff(schema, common))
	}
	sameSet(t, "event kinds", "docs/API.md", union(documented), openAPIPath, union(keys(variants)))
	sameSet(t, "event kinds", "docs/API.md", union(documented), "apitype.Event*", g.values("Event"))

	// Update kinds.
	updates := map[string][]string{}
	for _, v := range a.variants(t, a.component(t, "Update")) {
		for _, kind := range constOf(v, "kind") {
			updates[kind] = union(updates[kind], props(v))
		}
	}
	documented = nil
	for _, row := range mdTable(t, doc, "Update kinds") {
		kind := codes(row[0])[0]
		documented = append(documented, kind)
		if schema, ok := updates[kind]; ok {
			// kind, raw and subagent_session are on every update; text
			// where it has one.
			everyUpdate := []string{"kind", "raw", "subagent_session", "text"}
			sameSet(t, "fields of update "+kind, "docs/API.md", diff(union(codes(row[1])), everyUpdate), openAPIPath, diff(schema, everyUpdate))
		}
	}
	sameSet(t, "update kinds", "docs/API.md", union(documented), openAPIPath, union(keys(updates)))
	sameSet(t, "update kinds", "docs/API.md", union(documented), "apitype.Update*", g.values("Update"))

	// Error codes, and the status each travels with.
	documented = nil
	for _, row := range mdTable(t, doc, "## Errors") {
		status, err := strconv.Atoi(strings.TrimSpace(row[0]))
		if err != nil {
			t.Errorf("error table row %q: status %v", row, err)
			continue
		}
		for _, code := range codes(row[1]) {
			documented = append(documented, code)
			if got := statusOf(code); got != status {
				t.Errorf("docs/API.md says %s travels with %d; the server sends %d", code, status, got)
			}
		}
	}
	var enum []string
	for _, v := range a.variants(t, a.component(t, "Error")) {
		enum = append(enum, constOf(v, "code")...)
	}
	sameSet(t, "error codes", "docs/API.md", union(documented), openAPIPath, union(enum))
	sameSet(t, "error codes", "docs/API.md", union(documented), "apitype.Code*", g.values("Code"))

	// Capabilities: the table, the schema's list, apitype's Capability*
	// constants and what this daemon's /v1/version lists.
	documented = nil
	for _, row := range mdTable(t, doc, "### Capabilities") {
		documented = append(documented, codes(row[0])[0])
	}
	caps, _ := a.component(t, "Version")["properties"].(map[string]any)["capabilities"].(map[string]any)
	items, _ := caps["items"].(map[string]any)
	listed := constOf(map[string]any{"properties": map[string]any{"v": items}}, "v")
	sameSet(t, "capabilities", "docs/API.md", union(documented), openAPIPath, union(listed))
	sameSet(t, "capabilities", "docs/API.md", union(documented), "apitype.Capability*", g.values("Capability", "CapabilityHeader"))
	sameSet(t, "capabilities", "docs/API.md", union(documented), "api.Features", union(Features))
}

func keys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}
