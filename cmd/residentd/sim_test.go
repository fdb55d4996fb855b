package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestSimStopsOnSIGTERM: a long sim (300 mentions over 2,000 messages)
// ends when the service manager or a person asks it to, mid-run.
func TestSimStopsOnSIGTERM(t *testing.T) {
	p := startProc(t, []string{"sim", "--messages", "2000", "--mentions", "300", "--evict-at", "0"}, childEnv())
	p.waitOutput(t, time.Minute, "sim: mention 2/300")
	p.terminate()
	if code := p.wait(t, 30*time.Second); code == 0 {
		t.Fatalf("sim exited 0 after SIGTERM mid-run. Output:\n%s", p.out.String())
	}
	if out := p.out.String(); !strings.Contains(out, "stopped before mention") && !strings.Contains(out, "context canceled") {
		t.Fatalf("sim did not say it was stopped. Output:\n%s", out)
	}
	if strings.Contains(p.out.String(), "300 mentions played") {
		t.Fatal("sim played every mention although it was stopped")
	}
}

// TestSimTeamReplaysATrace: sim --team plays a trace file (a short
// morning: the trace format is checked in the sim package) and prints the
// matrix as one JSON object; a seed count of 0 is refused.
func TestSimTeamReplaysATrace(t *testing.T) {
	var trace strings.Builder
	trace.WriteString("# a short morning\n")
	at := time.Date(2026, 12, 1, 8, 0, 0, 0, time.UTC)
	for i := range 30 {
		at = at.Add(time.Duration(1+i%7) * 3 * time.Minute)
		fmt.Fprintf(&trace, "%s ch-%d\n", at.Format(time.RFC3339), 1+i*i%6)
	}
	path := filepath.Join(t.TempDir(), "day.trace")
	if err := os.WriteFile(path, []byte(trace.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := execCommand("sim", []string{"--team", "--trace", path, "--json"}, &out); err != nil {
		t.Fatal(err)
	}
	var r struct {
		Runs     int     `json:"runs"`
		Mentions float64 `json:"mentions_per_run"`
		Cells    []struct {
			TTL      string `json:"ttl"`
			Policies []struct {
				Name string `json:"name"`
			} `json:"policies"`
		} `json:"cells"`
	}
	if err := json.Unmarshal(out.Bytes(), &r); err != nil || r.Runs != 1 || r.Mentions != 30 || len(r.Cells) != 4 || len(r.Cells[0].Policies) != 5 {
		t.Fatalf("sim --team --json: %v, %+v", err, r)
	}
	if err := execCommand("sim", []string{"--team", "--seeds", "0"}, io.Discard); !errors.Is(err, errUsage) {
		t.Fatalf("--seeds 0: %v, want a usage error", err)
	}
}
