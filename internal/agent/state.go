package agent

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"

	acp "github.com/coder/acp-go-sdk"
)

// validID keeps session ids usable as file names inside --state.
var validID = regexp.MustCompile(`^[A-Za-z0-9_-]{1,128}$`)

// lookup finds a session in memory or, with --state, on disk.
func (b *builtin) lookup(id string) (*session, error) {
	b.mu.Lock()
	s, ok := b.sessions[id]
	b.mu.Unlock()
	if ok {
		return s, nil
	}
	if b.opts.state == "" || !validID.MatchString(id) {
		return nil, loadErr(id, "this process never created it and no --state DIR was given to restore it from")
	}
	data, err := os.ReadFile(filepath.Join(b.opts.state, id+".json"))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, loadErr(id, fmt.Sprintf("no saved history in %s", b.opts.state))
	}
	if err != nil {
		return nil, loadErr(id, err.Error())
	}
	s = &session{}
	if err := json.Unmarshal(data, s); err != nil {
		return nil, loadErr(id, fmt.Sprintf("corrupt history file: %v", err))
	}
	s.ID = id
	b.mu.Lock()
	b.sessions[id] = s
	b.mu.Unlock()
	return s, nil
}

func loadErr(id, why string) error {
	return &acp.RequestError{Code: -32002, Message: fmt.Sprintf("builtin: load session %q: %v: %s", id, errUnknownSession, why)}
}

// save writes the session's history atomically when --state is set.
func (b *builtin) save(s *session) error {
	if b.opts.state == "" {
		return nil
	}
	b.mu.Lock()
	data, err := json.Marshal(s)
	b.mu.Unlock()
	if err != nil {
		return fmt.Errorf("builtin: save session %q: %w", s.ID, err)
	}
	path := filepath.Join(b.opts.state, s.ID+".json")
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		return fmt.Errorf("builtin: save session %q: %w", s.ID, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("builtin: save session %q: %w", s.ID, err)
	}
	return nil
}

// record appends one JSON line to --record; failures go to stderr only,
// because the record is a test aid and must not change the protocol.
func (b *builtin) record(line map[string]any) {
	if b.opts.record == "" {
		return
	}
	data, err := json.Marshal(line)
	if err != nil {
		fmt.Fprintf(b.stderr, "builtin: record: %v\n", err)
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	f, err := os.OpenFile(b.opts.record, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o600)
	if err != nil {
		fmt.Fprintf(b.stderr, "builtin: record %q: %v\n", b.opts.record, err)
		return
	}
	defer f.Close()
	if _, err := f.Write(append(data, '\n')); err != nil {
		fmt.Fprintf(b.stderr, "builtin: record %q: %v\n", b.opts.record, err)
	}
}
