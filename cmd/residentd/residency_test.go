package main

import (
	"strings"
	"testing"
)

// TestStatusShowsResidency: status of a real serve with residency cache
// lists each live key's context (as the agent reported it), its cache TTL
// and estimated expiry, and the policy's reason to keep it.
func TestStatusShowsResidency(t *testing.T) {
	d := startDaemon(t, serveOpts{config: `{"residency":"cache","bindings":[{"id":"b-builtin","handle":"@agent","command":$EXE,"args":["agent"],
		"env":{"RESIDENTD_TEST_AGENT":"1"},"supervised":true,"resident":true,"cache_ttl":"1h"}]}`})
	d.cli(t, "", exitOK, "builtin turn=1", "mention", "--channel", "ch-res", "--binding", "b-builtin", "@agent [[context:5000]] read it")
	out := d.cli(t, "", exitOK, "", "status")
	if !strings.Contains(out, "\nresidency policy cache\n") {
		t.Fatalf("status has no residency table:\n%s", out)
	}
	var row []string
	for _, l := range strings.Split(out[strings.Index(out, "residency policy"):], "\n") {
		if strings.HasPrefix(l, "ch-res/b-builtin ") {
			row = strings.Fields(l)
		}
	}
	// KEY CONTEXT CACHE-TTL expires in D KEEP...
	if len(row) < 6 || row[2] != "1h0m0s" || row[3] != "expires" || strings.Join(row[len(row)-2:], " ") != "cache alive" {
		t.Fatalf("residency row %q", row)
	}
	if row[1] == "0" || strings.HasPrefix(row[1], "~") {
		t.Fatalf("context %q, want the agent's own report of at least 5000 tokens", row[1])
	}
}
