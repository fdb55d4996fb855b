package main

import (
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
