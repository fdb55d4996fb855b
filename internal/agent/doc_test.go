package agent

import (
	"bytes"
	"io"
	"os"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
)

// TestEveryFaultDirectiveAndFlagDocumented: docs/BUILTIN-AGENT.md's fault
// table names exactly the agent's fault modes, and the page names every
// directive and every flag, so a new one cannot stay undocumented.
func TestEveryFaultDirectiveAndFlagDocumented(t *testing.T) {
	raw, err := os.ReadFile("../../docs/BUILTIN-AGENT.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := string(raw)

	// The fault table: the rows after "## Fault modes" up to the next heading.
	_, section, _ := strings.Cut(doc, "## Fault modes")
	section, _, _ = strings.Cut(section, "\n#")
	row := regexp.MustCompile("(?m)^\\| `([a-z-]+)` \\|")
	var documented []string
	for _, m := range row.FindAllStringSubmatch(section, -1) {
		documented = append(documented, m[1])
	}
	var known []string
	for f := range knownFaults {
		known = append(known, f)
	}
	sort.Strings(documented)
	sort.Strings(known)
	if !slices.Equal(documented, known) {
		t.Errorf("fault table of docs/BUILTIN-AGENT.md names %v;\nthe agent knows %v", documented, known)
	}

	// Directives: the literal start of each directive's expression.
	for _, re := range []func() *regexp.Regexp{faultDirective, readDirective, writeDirective, writeCwdDirective, permDirective, compactDirective, elicitDirective} {
		lit, _, _ := strings.Cut(re().String(), "(")
		lit = strings.ReplaceAll(lit, `\`, "")
		if !strings.Contains(doc, lit) {
			t.Errorf("docs/BUILTIN-AGENT.md does not name the directive %q", lit)
		}
	}

	// Flags, as the agent's own usage lists them.
	var usage bytes.Buffer
	Main([]string{"-h"}, strings.NewReader(""), io.Discard, &usage)
	flagLine := regexp.MustCompile(`(?m)^\s+-([a-z-]+)`)
	flags := flagLine.FindAllStringSubmatch(usage.String(), -1)
	if len(flags) == 0 {
		t.Fatalf("no flags in the agent's usage:\n%s", usage.String())
	}
	for _, m := range flags {
		if !strings.Contains(doc, "`--"+m[1]) {
			t.Errorf("docs/BUILTIN-AGENT.md does not document the flag --%s", m[1])
		}
	}
}
