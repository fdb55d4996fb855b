package main

import (
	"regexp"
	"strings"
	"testing"
	"time"
)

// The quick start's first command: the demo plays its script through a real
// daemon and prints every shape and the eviction.
func TestDemoShowsEveryShapeAndTheEviction(t *testing.T) {
	p := startProc(t, []string{"demo"}, childEnv())
	if code := p.wait(t, 2*time.Minute); code != 0 {
		t.Fatalf("demo exit code %d. Output:\n%s", code, p.out.String())
	}
	out := p.out.String()
	shapes := regexp.MustCompile(`(?m)^turn +(\d+) +(\S+) +(cold|warm|restored) `).FindAllStringSubmatch(out, -1)
	var got []string
	for _, m := range shapes {
		got = append(got, m[2]+" "+m[3])
	}
	want := []string{
		"ch-backend cold", "ch-backend warm", "ch-backend warm",
		"ch-frontend cold", "ch-infra cold", "ch-docs cold", "ch-mobile cold",
		"ch-backend restored",
	}
	if strings.Join(got, ", ") != strings.Join(want, ", ") {
		t.Fatalf("turns %v, want %v. Output:\n%s", got, want, out)
	}
	// The fifth channel evicts the least recently used process, ch-backend,
	// and the restored ch-backend then evicts ch-frontend.
	iBack := strings.Index(out, "evicted ch-backend/b-builtin (capacity)")
	iFront := strings.Index(out, "evicted ch-frontend/b-builtin (capacity)")
	iMobile := strings.Index(out, "ch-mobile")
	if iBack < iMobile || iFront < iBack {
		t.Fatalf("evictions missing or out of order. Output:\n%s", out)
	}
	// Warm turns carry no framing and no replay; the restored one neither
	// (the reopened session holds its framing and brief).
	for _, line := range strings.Split(out, "\n") {
		switch {
		case strings.Contains(line, " warm ") && !strings.Contains(line, "framing=no users=0 assistants=0"):
			t.Errorf("warm turn with framing or replay: %s", line)
		case strings.Contains(line, " restored ") && !strings.Contains(line, "framing=no users=0 assistants=0"):
			t.Errorf("restored turn with framing or replay: %s", line)
		}
	}
}
