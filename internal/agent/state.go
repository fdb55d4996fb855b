package agent

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"

	acp "github.com/coder/acp-go-sdk"
)

// A session's state file is <id>.jsonl: a session record, then one turn
// record per finished turn, appended so a turn costs one small write
// whatever the length of the session. Releases before it wrote <id>.json,
// the whole session as one object rewritten every turn; lookup still reads
// it and turns it into a log.
const (
	logExt    = ".jsonl"
	legacyExt = ".json"
)

// DefaultHistory is how many turns a session keeps in memory and in its
// state file after compaction, and so how many session/load replays.
const DefaultHistory = 100

// compactFactor bounds a state file to this many times the cap in turn
// records: past it the file is rewritten to the kept tail, so appends stay
// cheap and the rewrite happens once every (compactFactor-1)*cap turns.
const compactFactor = 4

// record is one line of a state file; exactly one field is set.
type record struct {
	Session *header `json:"session,omitempty"`
	Turn    *turn   `json:"turn,omitempty"`
}

type header struct {
	ID         string          `json:"id"`
	Cwd        string          `json:"cwd"`
	MCPServers json.RawMessage `json:"mcp_servers"`
}

// legacy is the <id>.json format of earlier releases.
type legacy struct {
	Cwd        string          `json:"cwd"`
	MCPServers json.RawMessage `json:"mcp_servers"`
	Turns      []turn          `json:"turns"`
}

// add keeps t as the newest turn, dropping the oldest past limit; it copies
// in place rather than reslicing so the backing array never grows.
func (s *session) add(t turn, limit int) {
	s.count = t.N
	if len(s.turns) < limit {
		s.turns = append(s.turns, t)
		return
	}
	copy(s.turns, s.turns[1:])
	s.turns[len(s.turns)-1] = t
}

// validID keeps session ids usable as file names inside --state. A loop,
// not a regexp: a bounded repeat compiles to one state per repetition.
func validID(id string) bool {
	if len(id) == 0 || len(id) > 128 {
		return false
	}
	for _, c := range []byte(id) {
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

func (b *builtin) statePath(id, ext string) string {
	return filepath.Join(b.opts.state, id+ext)
}

// lookup finds a session in memory or, with --state, on disk.
func (b *builtin) lookup(id string) (*session, error) {
	b.mu.Lock()
	s, ok := b.sessions[id]
	b.mu.Unlock()
	if ok {
		return s, nil
	}
	if b.opts.state == "" || !validID(id) {
		return nil, loadErr(id, "this process never created it and no --state DIR was given to restore it from")
	}
	s, err := b.restore(id)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, loadErr(id, fmt.Sprintf("no saved history in %s", b.opts.state))
	}
	if err != nil {
		return nil, loadErr(id, err.Error())
	}
	b.mu.Lock()
	b.sessions[id] = s
	b.mu.Unlock()
	return s, nil
}

func loadErr(id, why string) error {
	return &acp.RequestError{Code: -32002, Message: fmt.Sprintf("builtin: load session %q: %v: %s", id, errUnknownSession, why)}
}

// restore reads the session's log, or its legacy file, which it replaces
// with a log. A log whose last line was cut (the process died mid-append)
// is rewritten without it before anything is appended after it.
func (b *builtin) restore(id string) (*session, error) {
	s, torn, err := readLog(b.statePath(id, logExt), id, b.opts.history)
	if errors.Is(err, fs.ErrNotExist) {
		return b.migrate(id)
	}
	if err != nil {
		return nil, err
	}
	if torn {
		if err := b.compact(s); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// readLog parses a state file, keeping the last limit turns. torn reports
// a final line without its newline, which is ignored.
func readLog(path, id string, limit int) (s *session, torn bool, err error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, false, err
	}
	defer f.Close()
	s = &session{ID: id}
	r := bufio.NewReader(f)
	for line := 1; ; line++ {
		data, err := r.ReadBytes('\n')
		if errors.Is(err, io.EOF) {
			return s, len(data) > 0, nil
		}
		if err != nil {
			return nil, false, fmt.Errorf("read history file %s: %w", path, err)
		}
		var rec record
		if err := json.Unmarshal(data, &rec); err != nil {
			return nil, false, fmt.Errorf("corrupt history file %s line %d: %w", path, line, err)
		}
		switch {
		case rec.Session != nil:
			s.Cwd, s.MCPServers = rec.Session.Cwd, rec.Session.MCPServers
		case rec.Turn != nil:
			s.add(*rec.Turn, limit)
			s.logged++
		}
	}
}

// migrate reads a legacy <id>.json, writes its kept tail as <id>.jsonl and
// removes the old file; until the removal the log is the one read.
func (b *builtin) migrate(id string) (*session, error) {
	old := b.statePath(id, legacyExt)
	data, err := os.ReadFile(old)
	if err != nil {
		return nil, err
	}
	var l legacy
	if err := json.Unmarshal(data, &l); err != nil {
		return nil, fmt.Errorf("corrupt history file %s: %w", old, err)
	}
	s := &session{ID: id, Cwd: l.Cwd, MCPServers: l.MCPServers}
	for i, t := range l.Turns {
		t.N = i + 1 // legacy turns carry no number: it was their position
		s.add(t, b.opts.history)
	}
	if err := b.compact(s); err != nil {
		return nil, err
	}
	if err := os.Remove(old); err != nil {
		return nil, fmt.Errorf("remove migrated history file %s: %w", old, err)
	}
	return s, nil
}

// create starts the state file of a new session. No fsync, as for appends:
// a file cut short by a crash reads as a shorter history.
func (b *builtin) create(s *session) error {
	if b.opts.state == "" {
		return nil
	}
	s.io.Lock()
	defer s.io.Unlock()
	line, err := json.Marshal(record{Session: &header{ID: s.ID, Cwd: s.Cwd, MCPServers: s.MCPServers}})
	if err != nil {
		return fmt.Errorf("builtin: create history of session %q: %w", s.ID, err)
	}
	if err := os.WriteFile(b.statePath(s.ID, logExt), append(line, '\n'), 0o600); err != nil {
		return fmt.Errorf("builtin: create history of session %q: %w", s.ID, err)
	}
	return nil
}

// commit appends t to the session's log (with --state) and then keeps it
// in memory, compacting the log once it holds compactFactor times the cap.
// A failed append leaves neither: its partial line is cut off (or, when
// that fails too, the next commit rewrites the whole log first), so one
// failed write never corrupts the history.
func (b *builtin) commit(s *session, t turn) error {
	if b.opts.state == "" {
		b.mu.Lock()
		s.add(t, b.opts.history)
		b.mu.Unlock()
		return nil
	}
	s.io.Lock()
	defer s.io.Unlock()
	if s.broken {
		if err := b.compactLocked(s); err != nil {
			return fmt.Errorf("builtin: save turn %d of session %q: repair the log first: %w", t.N, s.ID, err)
		}
		s.broken = false
	}
	line, err := json.Marshal(record{Turn: &t})
	if err != nil {
		return fmt.Errorf("builtin: save turn %d of session %q: %w", t.N, s.ID, err)
	}
	path := b.statePath(s.ID, logExt)
	f, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o600)
	if err != nil {
		return fmt.Errorf("builtin: save turn %d of session %q: %w", t.N, s.ID, err)
	}
	size := int64(-1)
	if st, err := f.Stat(); err == nil {
		size = st.Size()
	}
	_, err = f.Write(append(line, '\n'))
	if err != nil && (size < 0 || f.Truncate(size) != nil) {
		s.broken = true
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("builtin: save turn %d of session %q: %w", t.N, s.ID, err)
	}
	b.mu.Lock()
	s.add(t, b.opts.history)
	b.mu.Unlock()
	s.logged++
	if s.logged <= compactFactor*b.opts.history {
		return nil
	}
	return b.compactLocked(s)
}

// compact rewrites the session's log to its header and kept turns.
func (b *builtin) compact(s *session) error {
	s.io.Lock()
	defer s.io.Unlock()
	return b.compactLocked(s)
}

// compactLocked is compact with s.io held. The new file is synced before
// it replaces the old one: this is the one write that drops history, so a
// crash must leave one whole file or the other.
func (b *builtin) compactLocked(s *session) error {
	b.mu.Lock()
	recs := make([]record, 0, len(s.turns)+1)
	recs = append(recs, record{Session: &header{ID: s.ID, Cwd: s.Cwd, MCPServers: s.MCPServers}})
	for i := range s.turns {
		recs = append(recs, record{Turn: &s.turns[i]})
	}
	var buf []byte
	var err error
	for _, r := range recs {
		var line []byte
		if line, err = json.Marshal(r); err != nil {
			break
		}
		buf = append(append(buf, line...), '\n')
	}
	b.mu.Unlock()
	if err != nil {
		return fmt.Errorf("builtin: compact history of session %q: %w", s.ID, err)
	}
	path := b.statePath(s.ID, logExt)
	if err := writeSynced(path, buf); err != nil {
		return fmt.Errorf("builtin: compact history of session %q: %w", s.ID, err)
	}
	s.logged = len(recs) - 1
	return nil
}

// writeSynced replaces path with data through a synced temporary file.
func writeSynced(path string, data []byte) error {
	tmp := path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	_, err = f.Write(data)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		_ = os.Remove(tmp)
	}
	return err
}

// record appends one JSON line to --record; failures go to stderr only,
// because the record is a test aid and must not change the protocol.
func (b *builtin) record(line map[string]any) {
	if b.opts.record == "" {
		return
	}
	line["pid"] = os.Getpid() // which process: a restore may go on in another
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
