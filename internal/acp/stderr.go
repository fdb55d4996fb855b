package acp

import (
	"errors"
	"fmt"
	"os"
	"regexp"
	"strings"
	"unicode/utf8"
)

// What of an agent's stderr an error carries: its last lines, bounded,
// with nothing of its environment in them.
const (
	stderrLines = 5
	stderrBytes = 1 << 10
)

// redacted stands in for a value taken out of an agent's stderr.
const redacted = "[redacted]"

// envAssign is what looks like an environment assignment in a line of
// output: an upper-case name, "=", and a value up to the next blank.
var envAssign = regexp.MustCompile(`\b([A-Z][A-Z0-9_]*)=[^\s"'` + "`" + `]+`)

// StderrLines is the end of what the agent wrote to stderr as an error
// may carry it: its last lines (at most 5, at most 1 KiB), with the value
// of everything that looks like an environment assignment (NAME=value,
// NAME upper case or a variable of the agent's environment) and of every
// variable the binding sets taken out. "" when it wrote nothing.
func (a *Agent) StderrLines() string { return tailLines(a.proc.StderrTail(), a.spec.Env) }

// tailLines is StderrLines of tail for an agent given env (KEY=VALUE, the
// binding's own variables) on top of the daemon's.
func tailLines(tail string, env []string) string {
	tail = redactEnv(tail, env)
	lines := strings.Split(strings.TrimRight(tail, "\n"), "\n")
	kept := make([]string, 0, stderrLines)
	for i := len(lines) - 1; i >= 0 && len(kept) < stderrLines; i-- {
		if l := strings.TrimRight(lines[i], "\r "); strings.TrimSpace(l) != "" {
			kept = append(kept, l)
		}
	}
	for i, j := 0, len(kept)-1; i < j; i, j = i+1, j-1 {
		kept[i], kept[j] = kept[j], kept[i]
	}
	out := strings.Join(kept, "\n")
	if len(out) <= stderrBytes {
		return out
	}
	out = out[len(out)-(stderrBytes-len("…")):]
	for len(out) > 0 && !utf8.RuneStart(out[0]) {
		out = out[1:] // not in the middle of a character
	}
	if i := strings.IndexByte(out, '\n'); i >= 0 && i < len(out)-1 {
		out = out[i+1:] // from a line's start
	}
	return "…" + out
}

// redactEnv takes out of s the values of env's variables (at least 4
// bytes long, so that a value such as "1" does not take out every digit)
// and of everything that looks like an assignment of a variable: a
// NAME=value with NAME upper case, or NAME a variable of the daemon's
// environment or of env.
func redactEnv(s string, env []string) string {
	names := map[string]bool{}
	var values []string
	for _, kv := range append(os.Environ(), env...) {
		k, _, _ := strings.Cut(kv, "=")
		names[k] = true
	}
	for _, kv := range env {
		if _, v, ok := strings.Cut(kv, "="); ok && len(v) >= 4 {
			values = append(values, v)
		}
	}
	for _, v := range values {
		s = strings.ReplaceAll(s, v, redacted)
	}
	s = envAssign.ReplaceAllString(s, "${1}="+redacted)
	for k := range names {
		if k == "" || strings.ToUpper(k) == k {
			continue // upper case: done above
		}
		re, err := regexp.Compile(`\b` + regexp.QuoteMeta(k) + `=[^\s"'` + "`" + `]+`)
		if err == nil {
			s = re.ReplaceAllString(s, k+"="+redacted)
		}
	}
	return s
}

// StartFailed stops an agent whose start failed (initialize, or the
// session its first turn needs) and returns err with the agent's last
// stderr lines, where it gave a cause the error does not show: an agent
// that answers a request with an error ("Claude Code process exited with
// code 1") often wrote why on its stderr; one that wrote nothing is said
// to have. Once it is stopped, all it wrote has been read. An error of an
// agent that exited carries them already.
func (a *Agent) StartFailed(err error) error {
	_ = a.Close()
	if errors.Is(err, ErrExited) {
		return err
	}
	if lines := a.StderrLines(); lines != "" {
		return fmt.Errorf("%w; stderr tail: %q", err, lines)
	}
	return fmt.Errorf("%w; the agent wrote nothing to stderr", err)
}
