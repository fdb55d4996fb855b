package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
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

// TestSimTeamReplaysATrace: sim --team plays a trace it wrote itself and
// prints the matrix as one JSON object; a seed count of 0 is refused.
func TestSimTeamReplaysATrace(t *testing.T) {
	trace := filepath.Join(t.TempDir(), "day.trace")
	if err := execCommand("sim", []string{"--team", "--seeds", "1", "--write-trace", trace}, io.Discard); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := execCommand("sim", []string{"--team", "--trace", trace, "--json"}, &out); err != nil {
		t.Fatal(err)
	}
	var r struct {
		Runs  int `json:"runs"`
		Cells []struct {
			TTL      string `json:"ttl"`
			Policies []struct {
				Name string `json:"name"`
			} `json:"policies"`
		} `json:"cells"`
	}
	if err := json.Unmarshal(out.Bytes(), &r); err != nil || r.Runs != 1 || len(r.Cells) != 4 || len(r.Cells[0].Policies) != 5 {
		t.Fatalf("sim --team --json: %v, %+v", err, r)
	}
	if err := execCommand("sim", []string{"--team", "--seeds", "0"}, io.Discard); !errors.Is(err, errUsage) {
		t.Fatalf("--seeds 0: %v, want a usage error", err)
	}
}
