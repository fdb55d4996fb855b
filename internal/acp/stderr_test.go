package acp

import (
	"context"
	"errors"
	"strings"
	"testing"
)

// TestTailLines: an error carries the agent's last five stderr lines, at
// most 1 KiB of them (cut at a line's start, never inside a character),
// with the values of the binding's variables and of whatever looks like
// an assignment of a variable taken out.
func TestTailLines(t *testing.T) {
	t.Setenv("residentd_test_lower", "x")
	env := []string{"API_TOKEN=s3cret-value", "FLAG=1"}
	for _, tt := range []struct {
		name, tail, want string
	}{
		{"empty", "", ""},
		{"blank lines", "\n\n  \n", ""},
		{"last five", "a\nb\nc\n\nd\ne\nf\ng\n", "c\nd\ne\nf\ng"},
		{"a binding's value anywhere", "using s3cret-value now", "using [redacted] now"},
		{"a short value stays", "FLAGS: 1 of 1", "FLAGS: 1 of 1"},
		{"an assignment", "env: IS_SANDBOX=yes HOME=/root\nPATH=/usr/bin:/bin", "env: IS_SANDBOX=[redacted] HOME=[redacted]\nPATH=[redacted]"},
		{"a lower-case variable of the environment", "residentd_test_lower=value other_thing=kept", "residentd_test_lower=[redacted] other_thing=kept"},
		{"quoted", `set "ANTHROPIC_API_KEY=sk-1234" done`, `set "ANTHROPIC_API_KEY=[redacted]" done`},
	} {
		if got := tailLines(tt.tail, env); got != tt.want {
			t.Errorf("%s: %q, want %q", tt.name, got, tt.want)
		}
	}
	long := strings.Repeat("é", 300) + "\n" + strings.Repeat("x", 700) + "\nlast line"
	got := tailLines(long, env)
	if len(got) > 1024 || got != "…"+strings.Repeat("x", 700)+"\nlast line" {
		t.Errorf("a tail over 1 KiB: %d bytes %q, want it cut at the start of the line that fits", len(got), got)
	}
	one := strings.Repeat("é", 600) // one line of 1200 bytes
	got = tailLines(one, env)
	if len(got) > 1024 || !strings.HasPrefix(got, "…é") || !strings.HasSuffix(got, "é") {
		t.Errorf("one line over 1 KiB: %d bytes, want its end, cut between characters", len(got))
	}
}

// TestStartFailuresSayWhy: an agent that exits at initialize, and one
// that answers session/new with an error that does not give the cause,
// are reported with their last stderr lines, the environment's values
// taken out.
func TestStartFailuresSayWhy(t *testing.T) {
	lines := []string{"--stderr", "builtin: starting", "--stderr", "builtin: with BUILTIN_TOKEN=s3cret-token-value", "--stderr", "builtin: token s3cret-token-value"}
	spec := builtinSpec(t, append(lines, "--fault", "exit-initialize")...)
	spec.Env = append(spec.Env, "BUILTIN_TOKEN=s3cret-token-value")
	_, err := Start(context.Background(), spec, nil)
	if !errors.Is(err, ErrExited) || !strings.Contains(err.Error(), `stderr tail: "builtin: starting\nbuiltin: with BUILTIN_TOKEN=[redacted]\nbuiltin: token [redacted]\nbuiltin: fault exit-initialize, exiting 3"`) {
		t.Fatalf("exit at initialize: %v, want ErrExited with the redacted stderr lines", err)
	}

	spec = builtinSpec(t, append(lines, "--fault", "fail-new")...)
	spec.Env = append(spec.Env, "BUILTIN_TOKEN=s3cret-token-value")
	a, err := Start(context.Background(), spec, nil)
	if err != nil {
		t.Fatal(err)
	}
	_, err = a.NewSession(context.Background())
	if !errors.Is(err, ErrProtocol) || strings.Contains(err.Error(), "cause") {
		t.Fatalf("session/new: %v, want the agent's error, which does not say why", err)
	}
	err = a.StartFailed(err)
	if !errors.Is(err, ErrProtocol) || !strings.Contains(err.Error(), `process exited with code 1; stderr tail: "builtin: starting\nbuiltin: with BUILTIN_TOKEN=[redacted]\nbuiltin: token [redacted]\nbuiltin: fault fail-new: the session cannot start here (the cause, on stderr only)"`) ||
		strings.Contains(err.Error(), "s3cret") {
		t.Fatalf("session/new failed, with the stderr tail: %v", err)
	}
	select {
	case <-a.Done():
	default:
		t.Fatal("StartFailed left the agent running")
	}
}
