// Package deptest owns the layering rules' checker: a package's test names
// the imports it must not have, and why, and Check fails on each one found.
package deptest

import (
	"encoding/json"
	"maps"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// Module is residentd's module path, for rules about its own packages.
const Module = "github.com/residentd/residentd"

// GOOS are the systems the daemon is built for; a rule holds on each, as
// files with build constraints import different packages.
var GOOS = []string{"linux", "darwin"}

// DepChecker checks the dependencies of the package whose test calls
// Check (go test runs a test in its package's directory).
type DepChecker struct {
	// BadDeps maps an import path the package must not depend on to why.
	// A key ending in "/..." names that path and every path under it.
	BadDeps map[string]string

	// NonStd, if set, forbids every dependency outside the standard
	// library, for this reason.
	NonStd string

	// GoodDeps are exceptions to a "/..." key of BadDeps and to NonStd.
	GoodDeps []string

	// Direct checks the package's own imports only; otherwise every
	// package it depends on, transitively, counts.
	Direct bool
}

// Check lists the package's dependencies with go list for every system in
// GOOS and fails the test naming each forbidden one and the reason.
func (c DepChecker) Check(t *testing.T) {
	t.Helper()
	if len(c.BadDeps) == 0 && c.NonStd == "" {
		t.Fatal("deptest: a DepChecker with no BadDeps and no NonStd checks nothing")
	}
	type found struct {
		why  string
		goos []string
	}
	bad := map[string]*found{}
	var path, how string
	for _, goos := range GOOS {
		// go test puts its own go first in PATH.
		cmd := exec.Command("go", "list", "-json=ImportPath,Imports,Deps", ".")
		cmd.Env = append(os.Environ(), "GOOS="+goos, "CGO_ENABLED=0")
		out, err := cmd.Output()
		if err != nil {
			var stderr []byte
			if ee, ok := err.(*exec.ExitError); ok {
				stderr = ee.Stderr
			}
			t.Fatalf("go list (GOOS=%s): %v: %s", goos, err, stderr)
		}
		var pkg struct {
			ImportPath    string
			Imports, Deps []string
		}
		if err := json.Unmarshal(out, &pkg); err != nil {
			t.Fatalf("go list (GOOS=%s): %v", goos, err)
		}
		deps := pkg.Deps
		path, how = pkg.ImportPath, "depends on"
		if c.Direct {
			deps, how = pkg.Imports, "imports"
		}
		if len(deps) == 0 {
			t.Fatalf("go list (GOOS=%s) found no dependencies of %s: nothing was checked", goos, path)
		}
		for _, dep := range deps {
			if why, ok := c.bad(dep); ok {
				if bad[dep] == nil {
					bad[dep] = &found{why: why}
				}
				bad[dep].goos = append(bad[dep].goos, goos)
			}
		}
	}
	for _, dep := range slices.Sorted(maps.Keys(bad)) {
		f := bad[dep]
		t.Errorf("%s %s %s (GOOS=%s), which it must not: %s", path, how, dep, strings.Join(f.goos, ","), f.why)
	}
}

// bad reports whether dep is forbidden, and why.
func (c DepChecker) bad(dep string) (string, bool) {
	if why, ok := c.BadDeps[dep]; ok {
		return why, true
	}
	if slices.Contains(c.GoodDeps, dep) {
		return "", false
	}
	// The go command's own test: a standard package's path has no dot in
	// its first element.
	if first, _, _ := strings.Cut(dep, "/"); c.NonStd != "" && strings.Contains(first, ".") {
		return c.NonStd, true
	}
	for path, why := range c.BadDeps {
		if prefix, ok := strings.CutSuffix(path, "/..."); ok && (dep == prefix || strings.HasPrefix(dep, prefix+"/")) {
			return why, true
		}
	}
	return "", false
}
