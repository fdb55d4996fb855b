package config

import (
	"os"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"
)

// jsonPaths lists the JSON paths of t's leaf settings the way
// SettingClasses names them: a nested struct's fields dotted, unless the
// struct is classified whole.
func jsonPaths(t reflect.Type, prefix string, classes map[string]Class) []string {
	var out []string
	for i := 0; i < t.NumField(); i++ {
		name, _, _ := strings.Cut(t.Field(i).Tag.Get("json"), ",")
		if name == "" || name == "-" || name == "bindings" {
			continue
		}
		path := prefix + name
		if _, whole := classes[path]; !whole && t.Field(i).Type.Kind() == reflect.Struct {
			out = append(out, jsonPaths(t.Field(i).Type, path+".", classes)...)
			continue
		}
		out = append(out, path)
	}
	return out
}

// TestEverySettingHasAReloadClass: a field added to Binding or Config
// without a reload class fails here (Compare would treat it as
// restart-only), and no class names a field that is gone.
func TestEverySettingHasAReloadClass(t *testing.T) {
	for _, tc := range []struct {
		typ     reflect.Type
		classes map[string]Class
	}{{reflect.TypeOf(Binding{}), BindingClasses}, {reflect.TypeOf(Config{}), SettingClasses}} {
		paths := jsonPaths(tc.typ, "", tc.classes)
		for _, p := range paths {
			if _, ok := tc.classes[p]; !ok {
				t.Errorf("%s field %q has no reload class", tc.typ.Name(), p)
			}
		}
		for p := range tc.classes {
			if !slices.Contains(paths, p) {
				t.Errorf("%s reload class for %q, which is no field", tc.typ.Name(), p)
			}
		}
	}
}

// TestReloadTablesDocumented: docs/CONFIGURATION.md's reload tables give
// every binding field and daemon setting the class the code gives it.
func TestReloadTablesDocumented(t *testing.T) {
	raw, err := os.ReadFile("../../docs/CONFIGURATION.md")
	if err != nil {
		t.Fatal(err)
	}
	_, sec, ok := strings.Cut(string(raw), "\n## Reloading the config\n")
	if !ok {
		t.Fatal("CONFIGURATION.md has no Reloading the config section")
	}
	sec, _, _ = strings.Cut(sec, "\n## ")
	row := regexp.MustCompile("(?m)^\\| (`[^|]+`) \\| ([^|]+) \\|")
	field := regexp.MustCompile("`([a-z_.]+)`")
	documented := map[string]Class{}
	for _, m := range row.FindAllStringSubmatch(sec, -1) {
		c := Class(strings.Trim(strings.TrimSpace(m[2]), "`"))
		if c == "no effect" || c == "—" {
			c = NoEffect
		}
		for _, f := range field.FindAllStringSubmatch(m[1], -1) {
			documented[f[1]] = c
		}
	}
	for _, classes := range []map[string]Class{BindingClasses, SettingClasses} {
		for name, c := range classes {
			if got, ok := documented[name]; !ok || got != c {
				t.Errorf("%q: documented as %q, the code's class is %q", name, got, c)
			}
		}
	}
}

// TestCompareAndInForce: Compare names what changed with its class, an
// empty map equal to none; InForce takes the new config but keeps the
// settings that need a restart.
func TestCompareAndInForce(t *testing.T) {
	b := func(id string) Binding { return Binding{ID: id, Handle: "@a", Command: "agent", Resident: true} }
	old := &Config{Socket: "/run/a.sock", MaxLive: 4, Bindings: []Binding{b("b-same"), b("b-changed"), b("b-gone")}}
	n := &Config{Socket: "/run/b.sock", MaxLive: 2, Bindings: []Binding{b("b-same"), b("b-changed"), b("b-new")}}
	n.Bindings[0].Env = map[string]string{} // empty is none
	n.Bindings[0].Comment = "read me"       // no effect
	n.Bindings[1].Args = []string{"--x"}
	n.Bindings[1].SessionOptions = map[string]string{"model": "m"}
	n.Context.MaxIDs, n.Context.Limit = 50, 20
	n.Budgets.ChannelDefault = 3
	old.SetDefaults()
	n.SetDefaults()
	d := Compare(old, n)
	got := map[string]string{}
	for _, bd := range d.Bindings {
		s := ""
		switch {
		case bd.Added:
			s = "added"
		case bd.Removed:
			s = "removed"
		}
		for _, c := range bd.Changes {
			s += c.Setting + "=" + string(c.Class) + " "
		}
		got[bd.ID] = strings.TrimSpace(s)
	}
	want := map[string]string{"b-same": "", "b-changed": "args=replace_process session_options=next_turn", "b-gone": "removed", "b-new": "added"}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("bindings %v, want %v", got, want)
	}
	var settings []string
	for _, c := range d.Settings {
		settings = append(settings, c.Setting+"="+string(c.Class))
	}
	if w := "socket=restart max_live=at_once context.limit=at_once context.max_ids=restart budgets=at_once"; strings.Join(settings, " ") != w {
		t.Fatalf("settings %q, want %q", settings, w)
	}
	c := InForce(old, n)
	if c.Socket != old.Socket || c.Context.MaxIDs != old.Context.MaxIDs || c.MaxLive != 2 || c.Context.Limit != 20 || c.Budgets.ChannelDefault != 3 || len(c.Bindings) != 3 || c.Bindings[2].ID != "b-new" {
		t.Fatalf("in force: %+v", c)
	}
	if n.Socket != "/run/b.sock" || time.Duration(c.IdleTimeout) != 30*time.Minute {
		t.Fatalf("InForce changed its input or lost a default: %+v", n)
	}
}

// mutate changes v (settable) to another value of its type.
func mutate(v reflect.Value) {
	switch v.Kind() {
	case reflect.String:
		v.SetString(v.String() + "-changed")
	case reflect.Bool:
		v.SetBool(!v.Bool())
	case reflect.Int, reflect.Int64:
		v.SetInt(v.Int() + 1)
	case reflect.Uint64:
		v.SetUint(v.Uint() + 1)
	case reflect.Float64:
		v.SetFloat(v.Float() + 1)
	case reflect.Slice:
		v.Set(reflect.Append(v, reflect.New(v.Type().Elem()).Elem()))
	case reflect.Map:
		m := reflect.MakeMap(v.Type())
		m.SetMapIndex(reflect.ValueOf("k"), reflect.ValueOf("v"))
		v.Set(m)
	case reflect.Pointer:
		p := reflect.New(v.Type().Elem())
		if !v.IsNil() {
			p.Elem().Set(v.Elem())
			mutate(p.Elem())
		}
		v.Set(p)
	case reflect.Struct:
		mutate(v.Field(0))
	default:
		panic("mutate: " + v.Kind().String())
	}
}

// TestSameProcessMatchesTheClasses: SameProcess is false exactly when a
// field of class replace_process changed.
func TestSameProcessMatchesTheClasses(t *testing.T) {
	base := Binding{ID: "b", Handle: "@a", Command: "agent", Args: []string{"x"}}
	bt := reflect.TypeOf(base)
	for i := 0; i < bt.NumField(); i++ {
		name, _, _ := strings.Cut(bt.Field(i).Tag.Get("json"), ",")
		n := base
		mutate(reflect.ValueOf(&n).Elem().Field(i))
		if same, replace := base.SameProcess(&n), BindingClasses[name] == ReplaceProcess; same == replace {
			t.Errorf("field %q (class %s): SameProcess = %v", name, BindingClasses[name], same)
		}
	}
}
