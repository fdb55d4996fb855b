package config

import (
	"maps"
	"reflect"
	"slices"
	"sort"
	"strings"
)

// Class says how a changed setting takes effect when the config is
// reloaded without a restart.
type Class string

// Reload classes.
const (
	// NextTurn: in force from the key's next turn, on the process it has.
	NextTurn Class = "next_turn"
	// ReplaceProcess: the key's live process is replaced at its next turn
	// (a busy one after the turn it runs); the new process restores the
	// key's saved session.
	ReplaceProcess Class = "replace_process"
	// NewSession: in force for sessions that open after the reload; a
	// key's live or saved session keeps what it was opened with (start
	// the key fresh to give it the new one).
	NewSession Class = "new_session"
	// AtOnce: a daemon setting in force as soon as the reload answers.
	AtOnce Class = "at_once"
	// NewProcesses: a daemon setting the agent processes started after the
	// reload get; the live ones keep theirs.
	NewProcesses Class = "new_processes"
	// Restart: read at start only; a reload reports the change and leaves
	// the running value.
	Restart Class = "restart"
	// NoEffect: nothing reads it (comment, context.fetch).
	NoEffect Class = "no_effect"
)

// BindingClasses is how each binding field (by its JSON name) takes effect
// on a reload; docs/CONFIGURATION.md has the same table.
var BindingClasses = map[string]Class{
	"id": NoEffect, "comment": NoEffect,
	"handle": NextTurn, "runtime": NextTurn,
	"command": ReplaceProcess, "args": ReplaceProcess, "env": ReplaceProcess, "dir": ReplaceProcess,
	"system": NewSession, "system_file": NewSession,
	"brief": NextTurn, "brief_placement": NextTurn, "brief_every": NextTurn, "system_placement": ReplaceProcess,
	"supervised": NextTurn, "resident": ReplaceProcess, "saved_session": ReplaceProcess,
	"restore": NextTurn, "restore_method": NextTurn, "start_timeout": NextTurn,
	"session_options": NextTurn, "permission": NextTurn,
	"tools": ReplaceProcess, "omit_own_posts": NextTurn,
	"turn_timeout": NextTurn, "permission_timeout": NextTurn, "approvers": AtOnce, "elicitation": ReplaceProcess,
	"limits": ReplaceProcess, "usage_totals": ReplaceProcess, "prices": NextTurn,
	"retry_interrupted": NextTurn, "bursts": NextTurn,
	"scope": NextTurn,
	"spare": AtOnce, "spare_at_start": Restart, "spare_session": NewProcesses,
	"cache_ttl": NewProcesses, "idle_compaction": NewProcesses, "restore_keeps_cache": AtOnce, "keep_alive": AtOnce,
	"workspace": NewSession,
	"protocol":  ReplaceProcess, "background_limit": AtOnce,
}

// SettingClasses is how each daemon setting (its JSON path) takes effect on
// a reload; "bindings" are compared one by one (BindingClasses).
var SettingClasses = map[string]Class{
	"socket": Restart, "state_dir": Restart,
	"max_live": AtOnce, "max_processes": AtOnce, "idle_timeout": AtOnce, "queue_len": AtOnce, "queue_timeout": AtOnce, "yield_after": AtOnce,
	"agent_grace": NewProcesses, "agent_cancel_grace": NewProcesses,
	"context.fetch": NoEffect, "context.limit": AtOnce, "context.max_chars": AtOnce, "context.max_ids": Restart,
	"restore_failures": AtOnce, "restore_timeout": AtOnce, "background_limit": AtOnce,
	"runs.events": Restart, "runs.bytes": Restart, "runs.retention": Restart, "runs.ended": Restart,
	"runs.keepalive": Restart, "runs.pending_permissions": Restart,
	"cgroups": Restart, "budgets": AtOnce,
	"attachments.dir": Restart, "attachments.max_bytes": Restart, "attachments.max_per_message": Restart, "attachments.max_per_push": Restart,
	"residency": AtOnce, "max_memory": AtOnce, "memory_pressure": AtOnce,
	"workspace_root": Restart,
}

// Change is one setting that differs between two configs.
type Change struct {
	Setting string // JSON name (a binding's field) or path (a daemon setting)
	Class   Class
}

// BindingDiff is how one binding differs between two configs.
type BindingDiff struct {
	ID      string
	Added   bool
	Removed bool
	Changes []Change // of a binding in both, the fields that differ, by name
}

// Diff is what differs between the config in force and a reloaded one.
type Diff struct {
	Bindings []BindingDiff // every binding of either config, by id
	Settings []Change      // the daemon settings that differ, by path
}

// Compare returns what differs from old to new; both have their defaults
// set.
func Compare(old, new *Config) Diff {
	var d Diff
	ids := map[string]bool{}
	for _, b := range old.Bindings {
		ids[b.ID] = true
	}
	for _, b := range new.Bindings {
		ids[b.ID] = true
	}
	for _, id := range sortedKeys(ids) {
		o, inOld := old.Binding(id)
		n, inNew := new.Binding(id)
		bd := BindingDiff{ID: id, Added: !inOld, Removed: !inNew}
		if inOld && inNew {
			bd.Changes = BindingChanges(o, n)
		}
		d.Bindings = append(d.Bindings, bd)
	}
	d.Settings = fieldChanges(reflect.ValueOf(*old), reflect.ValueOf(*new), "", SettingClasses, true)
	return d
}

// BindingChanges lists the fields that differ from o to n, by JSON name.
func BindingChanges(o, n Binding) []Change {
	return fieldChanges(reflect.ValueOf(o), reflect.ValueOf(n), "", BindingClasses, false)
}

// fieldChanges compares the fields of two structs of one type by their
// JSON names; nested structs named by a dotted key in classes are compared
// field by field (deep), the rest as wholes.
func fieldChanges(o, n reflect.Value, prefix string, classes map[string]Class, deep bool) []Change {
	var out []Change
	t := o.Type()
	for i := 0; i < t.NumField(); i++ {
		name, _, _ := strings.Cut(t.Field(i).Tag.Get("json"), ",")
		if name == "" || name == "-" || name == "bindings" {
			continue
		}
		path := prefix + name
		ov, nv := o.Field(i), n.Field(i)
		if _, whole := classes[path]; !whole && deep && ov.Kind() == reflect.Struct {
			out = append(out, fieldChanges(ov, nv, path+".", classes, deep)...)
			continue
		}
		if same(ov, nv) {
			continue
		}
		c, ok := classes[path]
		if !ok {
			c = Restart // a setting nobody classified is not applied
		}
		if c == NoEffect {
			continue
		}
		out = append(out, Change{Setting: path, Class: c})
	}
	return out
}

// same compares two values deeply, an empty map or list equal to none.
func same(o, n reflect.Value) bool {
	switch o.Kind() {
	case reflect.Map, reflect.Slice:
		if o.Len() == 0 && n.Len() == 0 {
			return true
		}
	}
	return reflect.DeepEqual(o.Interface(), n.Interface())
}

func sortedKeys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// InForce is the config a reload puts in force: n with every setting that
// needs a restart (SettingClasses) left at its value in old.
func InForce(old, n *Config) *Config {
	c := *n
	keepRestart(reflect.ValueOf(old).Elem(), reflect.ValueOf(&c).Elem(), "")
	return &c
}

func keepRestart(o, n reflect.Value, prefix string) {
	t := o.Type()
	for i := 0; i < t.NumField(); i++ {
		name, _, _ := strings.Cut(t.Field(i).Tag.Get("json"), ",")
		if name == "" || name == "-" || name == "bindings" {
			continue
		}
		path := prefix + name
		c, classed := SettingClasses[path]
		switch {
		case classed && c == Restart, !classed && o.Field(i).Kind() != reflect.Struct:
			n.Field(i).Set(o.Field(i))
		case !classed:
			keepRestart(o.Field(i), n.Field(i), path+".")
		}
	}
}

// SameProcess reports whether a process started with b may serve a turn
// of n: no field of class ReplaceProcess differs. It is the per-turn form
// of BindingChanges, without reflection (a warm turn asks it).
func (b *Binding) SameProcess(n *Binding) bool {
	return b.Command == n.Command && slices.Equal(b.Args, n.Args) && maps.Equal(b.Env, n.Env) && b.Dir == n.Dir &&
		b.Resident == n.Resident && b.SavedSession == n.SavedSession && samePtr(b.Tools, n.Tools) &&
		b.Limits == n.Limits && b.UsageTotals == n.UsageTotals && b.SystemPlacement == n.SystemPlacement &&
		b.Forms() == n.Forms() &&
		b.Protocol == n.Protocol
}

func samePtr[T comparable](a, b *T) bool {
	return a == nil && b == nil || a != nil && b != nil && *a == *b
}
