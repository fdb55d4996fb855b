// Package store owns residentd's bbolt file: conversations, native session
// ids, watermarks, channel messages, roster, activity, started agents and
// the keys' worktrees.
//
// Schema version: 7. The layout of the file:
//
//	meta
//	  version                    -> uint64 big-endian schema version
//	  agent-seen/<binding id>    -> AgentSeen (JSON): the binding's agent as it last started (no migration: absent until then)
//	  mark-prefix                -> 16 hex digits every agent's mark starts with (no migration: Open adds it)
//	conversations
//	  <key>                      bucket per resident key: <channel><binding>, <thread> after them for a thread key (no migration)
//	    native                   -> native ACP session id
//	    turns
//	      <seq uint64>           -> Turn (JSON)
//	watermarks
//	  <session><channel><thread> -> channel.Watermark (JSON)
//	channels
//	  <channel id>               bucket per channel
//	    count                    -> uint64 big-endian number of messages
//	    seq                      -> uint64 big-endian newest arrival number (since 3)
//	    floor                    -> the msgs key retention dropped last (since 3)
//	    msgs
//	      <created_at><id>       -> channel.Message (JSON; first_seq since 5)
//	    ids
//	      <id>                   -> <seq uint64><created_at><id> (arrival, msgs key)
//	    timeline
//	      <thread><created_at><id> -> empty; thread "" is the main timeline
//	    arrivals                 (since 3)
//	      <thread><seq uint64>   -> flags, first seq (since 5), author, binding id, msgs key (see arrival)
//	    tcounts                  (since 3)
//	      <thread>               -> uint64 big-endian messages in the timeline
//	    gone                     (since 3)
//	      <id>                   -> empty: deleted, a later push is ignored
//	roster
//	  <channel id>               -> []Member (JSON)
//	activity
//	  <project>                  bucket per project
//	    <at><seq uint64>         -> Activity (JSON)
//	agents
//	  <pid uint64>               -> AgentRecord (JSON)
//	projects                     (since version 2)
//	  <channel id>               -> project whose activity the channel's agents see
//	options                      (since version 4)
//	  <key>                      -> map[string]string (JSON): the key's own session options
//	spend                        (since version 4)
//	  <day><scope><id>           -> int64 big-endian micro-units (apitype.Amount; float64 bits before version 6): what the budget's day has cost
//	runs                         (since version 7)
//	  <run id>                   -> RunRecord (JSON): accepted, running or ended
//	runs_ended                   (since version 7)
//	  <ended_at><run id>         -> empty: the ended runs, oldest first, for pruning
//	worktrees                    (no migration: Open adds it)
//	  <key>                      -> workspace.Record (JSON): the key's git worktree (a binding with workspace "worktree")
//
// <day> is the budget day as 2006-01-02; <scope> is "binding" or "channel".
// Composite keys (<key>, <session><channel><thread>, <thread>, <day><scope><id>) are
// concatenations of length-prefixed parts (uvarint length, then the bytes),
// so no id can forge a boundary. <created_at> and <at> are 8-byte big-endian
// UnixNano with the sign bit flipped, so byte order is time order.
//
// Schema changes are migrations appended to the migrations list; Open applies
// those newer than the file's version in one transaction.
//
// Damage: Open checks every page in use before bbolt maps the file and
// refuses a damaged one (ErrDamaged); a transaction that panics or faults on
// a page damaged later is its caller's ErrDamaged; Repair salvages what it
// can read into a new file (scan.go, check.go, repair.go). A full disk: a
// write the filesystem refuses for lack of space is ErrNoSpace, and Full
// reports it until a write is committed again (space.go).
package store

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	bolt "go.etcd.io/bbolt"
	bolterrors "go.etcd.io/bbolt/errors"

	"github.com/residentd/residentd/internal/channel"
)

// SchemaVersion is the layout this package reads and writes.
const SchemaVersion = 7

// Defaults for Options fields left zero.
const (
	DefaultLockTimeout        = 100 * time.Millisecond
	DefaultMaxTurns           = 200
	DefaultMaxChannelMessages = 5000
	DefaultMaxRoster          = 500
	DefaultMaxActivity        = 200
)

var (
	// ErrLocked means another process holds the database file's lock.
	ErrLocked = errors.New("database is locked by another process")
	// ErrNotFound classifies a missing record or cursor.
	ErrNotFound = errors.New("not found")
	// ErrSchemaTooNew means the file was written by a newer residentd.
	ErrSchemaTooNew = errors.New("database schema is newer than this residentd understands")
)

// Bucket and key names.
var (
	bucketMeta          = []byte("meta")
	bucketConversations = []byte("conversations")
	bucketWatermarks    = []byte("watermarks")
	bucketChannels      = []byte("channels")
	bucketRoster        = []byte("roster")
	bucketActivity      = []byte("activity")
	bucketAgents        = []byte("agents")
	bucketProjects      = []byte("projects")
	bucketOptions       = []byte("options") // since schema version 4
	bucketSpend         = []byte("spend")   // since schema version 4

	keyVersion  = []byte("version")
	keyNative   = []byte("native")
	keyTurns    = []byte("turns")
	keyCount    = []byte("count")
	keyMsgs     = []byte("msgs")
	keyIDs      = []byte("ids")
	keyTimeline = []byte("timeline")
	// Since schema version 3.
	keySeq            = []byte("seq")
	keyArrivals       = []byte("arrivals")
	keyTimelineCounts = []byte("tcounts")
	keyGone           = []byte("gone")
	keyFloor          = []byte("floor")
)

// Options bounds the store; zero fields take the defaults above.
type Options struct {
	LockTimeout        time.Duration // wait for the file lock
	MaxTurns           int           // conversation turns kept per key (oldest dropped)
	MaxChannelMessages int           // messages kept per channel (oldest by created_at dropped)
	MaxRoster          int           // members kept per channel roster
	MaxActivity        int           // activity items kept per project
	MaxWatermarkIDs    int           // ids kept per watermark (oldest dropped); default channel.MaxWatermarkIDs

	// OnDamage, if set, hears of every transaction that panicked (see
	// ErrDamaged) with the error its caller gets; it must not block.
	OnDamage func(error)
	// OnNoSpace, if set, hears of every transaction (or attachment) the
	// filesystem refused for lack of space (ErrNoSpace) with the error its
	// writes get; OnWritable of the first write committed after such
	// refusals, with the spell it ended. Neither may block.
	OnNoSpace  func(error)
	OnWritable func(Full)
}

func (o Options) withDefaults() Options {
	if o.LockTimeout <= 0 {
		o.LockTimeout = DefaultLockTimeout
	}
	if o.MaxWatermarkIDs <= 0 {
		o.MaxWatermarkIDs = channel.MaxWatermarkIDs
	}
	if o.MaxTurns <= 0 {
		o.MaxTurns = DefaultMaxTurns
	}
	if o.MaxChannelMessages <= 0 {
		o.MaxChannelMessages = DefaultMaxChannelMessages
	}
	if o.MaxRoster <= 0 {
		o.MaxRoster = DefaultMaxRoster
	}
	if o.MaxActivity <= 0 {
		o.MaxActivity = DefaultMaxActivity
	}
	return o
}

// Store is an open residentd database. It is safe for concurrent use.
type Store struct {
	db   *bolt.DB
	path string
	opts Options

	amu sync.Mutex // held by a push or delete from its attachments' content to their collection

	closeOnce sync.Once
	closeErr  error

	gmu     sync.Mutex // guards leading, pending and spare
	leading bool       // a caller is running write transactions for the group
	pending []*write   // writes waiting for the next transaction
	spare   []*write   // an empty array for pending: a committed group's, reused

	// agentOps holds the agent records to write or drop in the next write
	// transaction, by pid (see RecordAgent, ForgetAgent); seen the agents
	// seen to write in it, by binding (see SetAgentSeen).
	fmu      sync.Mutex
	agentOps map[int]agentOp
	agentN   uint64 // generations of agentOps
	seen     map[string][]byte

	commits atomic.Int64 // write transactions committed
	writes  atomic.Int64 // writes committed (several can share a transaction)
	damage  atomic.Int64 // transactions that panicked (ErrDamaged)
	noSpace atomic.Int64 // writes refused for lack of space (ErrNoSpace)

	smu  sync.Mutex
	full *Full // the spell of writes refused for lack of space; nil once one is committed

	check CheckReport // what Open's check of the file found

	markPrefix string // see MarkPrefix
}

// write is one caller's part of a group transaction.
type write struct {
	fn   func(*bolt.Tx) error
	err  error
	done chan struct{} // closed once err is final
	lead chan struct{} // closed when this caller is to run the next transaction
}

// update runs fn in a write transaction and returns once it is durable.
// Writes that arrive while a transaction is committing share the next one:
// bbolt holds its writer lock through both fsyncs, so callers on different
// keys would otherwise queue for one fsync pair each. A lone write starts at
// once (there is no batching delay); the caller whose write opened a
// transaction runs it and hands the next one to the first write that
// arrived meanwhile, so no goroutine outlives its caller. fn may run more
// than once (a group is retried without a write whose fn failed), so it
// sets, never accumulates, what it reports to its caller.
func (s *Store) update(fn func(*bolt.Tx) error) error {
	w := &write{fn: fn, done: make(chan struct{})}
	s.gmu.Lock()
	if s.leading {
		// Only a write that waits is handed the lead (handOff): every
		// write in pending when a group starts or ends has this channel.
		w.lead = make(chan struct{})
	}
	s.pending = append(s.pending, w)
	if s.leading {
		s.gmu.Unlock()
		select {
		case <-w.done:
			return w.err
		case <-w.lead:
		}
		s.gmu.Lock()
	}
	s.leading = true
	group := s.pending
	s.pending, s.spare = s.spare, nil
	s.gmu.Unlock()

	s.commitGroup(group)
	s.handOff(group)
	<-w.done
	return w.err
}

// handOff passes the next transaction to the first waiting write, or ends
// the group; done is the group just committed, whose array the next
// group's pending reuses.
func (s *Store) handOff(done []*write) {
	clear(done)
	s.gmu.Lock()
	s.spare = done[:0]
	if len(s.pending) > 0 {
		close(s.pending[0].lead)
	} else {
		s.leading = false
	}
	s.gmu.Unlock()
}

// commitGroup runs the writes in one transaction. A write whose fn fails
// gets its error and the others run again without it, so one bad write
// never fails (or commits half of) its neighbours.
func (s *Store) commitGroup(group []*write) {
	// A panic in the transaction (bbolt panics on a corrupt page; bbolt
	// rolls the transaction back) fails the group's writes with an error
	// rather than in whichever caller happens to lead, and later writes go on.
	// A fault on a page id past the mapping is such a panic too.
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if p := recover(); p != nil {
			err := s.damaged("write transaction", p)
			for _, g := range group {
				g.finishOnce(err)
			}
		}
	}()
	for len(group) > 0 {
		failed := -1
		var agents map[int]uint64
		var seen map[string][]byte
		err := s.db.Update(func(tx *bolt.Tx) error {
			var err error
			if agents, err = s.applyAgents(tx); err != nil {
				return err
			}
			if seen, err = s.applySeen(tx); err != nil {
				return err
			}
			for i, w := range group {
				if err := w.run(s, tx); err != nil {
					failed = i
					return err
				}
			}
			return nil
		})
		if failed >= 0 && len(group) > 1 {
			group[failed].finish(err)
			group = append(group[:failed:failed], group[failed+1:]...)
			continue
		}
		if err == nil {
			s.commits.Add(1)
			s.writes.Add(int64(len(group)))
			s.agentsWritten(agents)
			s.seenWritten(seen)
			s.written()
		}
		err = s.refused(err, len(group))
		for _, w := range group {
			w.finish(err)
		}
		return
	}
}

func (w *write) finish(err error) {
	w.err = err
	close(w.done)
}

// run runs w's fn, a panic in it (bbolt panics on a corrupt page) as its
// error, so that only w fails.
func (w *write) run(s *Store, tx *bolt.Tx) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = s.damaged("write", p)
		}
	}()
	return w.fn(tx)
}

// finishOnce finishes w unless it already has its answer.
func (w *write) finishOnce(err error) {
	select {
	case <-w.done:
	default:
		w.finish(err)
	}
}

// Commits reports how many write transactions the store has committed
// since it was opened; each one costs the file two fsyncs.
func (s *Store) Commits() int64 { return s.commits.Load() }

// Writes reports how many writes those transactions carried: Writes over
// Commits is how many callers shared an fsync pair.
func (s *Store) Writes() int64 { return s.writes.Load() }

// Open opens (creating if needed) the database at path and migrates it to
// SchemaVersion. The parent directory is created 0700 and the file 0600.
// An existing file is checked page by page first (see scan): a damaged one
// is refused with an error wrapping ErrDamaged that names `residentd
// repair`; Checked reports what the check found.
func Open(path string, opts Options) (*Store, error) {
	opts = opts.withDefaults()
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("store: create directory for %q: %w", path, err)
	}
	// The file is checked before bbolt maps it: bbolt panics, or faults,
	// on a damaged page when a request first reads it, long after startup.
	check, err := checkFile(path, opts.LockTimeout)
	if err != nil {
		return nil, err
	}
	db, err := bolt.Open(path, 0o600, &bolt.Options{
		Timeout:      opts.LockTimeout,
		FreelistType: bolt.FreelistMapType,
	})
	if errors.Is(err, bolterrors.ErrTimeout) {
		return nil, fmt.Errorf("store: open %q: %w (waited %s): another residentd is probably running on the same state directory; stop it, or give this one a different state directory", path, ErrLocked, opts.LockTimeout)
	}
	if err != nil {
		return nil, fmt.Errorf("store: open %q: %w", path, err)
	}
	var prefix string
	err = db.Update(func(tx *bolt.Tx) error {
		if err := migrate(tx, migrations); err != nil {
			return err
		}
		p, err := ensureMarkPrefix(tx)
		prefix = p
		if err != nil {
			return err
		}
		return ensureWorktrees(tx)
	})
	if err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("store: open %q: %w", path, err)
	}
	s := &Store{db: db, path: path, opts: opts, check: check, markPrefix: prefix}
	if err := s.collectAttachments(); err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("store: open %q: %w", path, err)
	}
	return s, nil
}

// Close releases the file and its lock. Calling it again returns the first
// result.
func (s *Store) Close() error {
	s.closeOnce.Do(func() {
		if s.agentsPending() {
			// The agent records still to write or to drop go before the
			// file closes.
			if err := s.update(func(*bolt.Tx) error { return nil }); err != nil {
				s.closeErr = fmt.Errorf("store: close %q: write pending agent records: %w", s.path, err)
			}
		}
		if err := s.db.Close(); err != nil {
			s.closeErr = fmt.Errorf("store: close %q: %w", s.path, err)
		}
	})
	return s.closeErr
}

// Path is the database file the store was opened at.
func (s *Store) Path() string { return s.path }

// Check runs bbolt's consistency check and returns the first problem found.
func (s *Store) Check() error {
	return s.view(func(tx *bolt.Tx) error {
		var first error
		// Drain every report: the checker goroutine blocks on the channel
		// until it is read to the end and must not outlive the transaction.
		for err := range tx.Check() {
			if first == nil {
				first = err
			}
		}
		if first != nil {
			return fmt.Errorf("store: check %q: %w", s.path, first)
		}
		return nil
	})
}

// migration moves the file from version-1 to version.
type migration struct {
	version int
	name    string
	apply   func(tx *bolt.Tx) error
}

// migrations is the ordered schema history; append, never edit.
var migrations = []migration{
	{version: 1, name: "initial layout", apply: migrateInitialLayout},
	{version: 2, name: "channel projects", apply: migrateChannelProjects},
	{version: 3, name: "arrival order, seq watermarks, compact turns", apply: migrateArrivals},
	{version: 4, name: "key session options, budget spending", apply: migrateSettings},
	{version: 5, name: "first arrival of every message", apply: migrateFirstArrivals},
	{version: 6, name: "exact budget spending", apply: migrateExactSpend},
	{version: 7, name: "run records", apply: migrateRuns},
}

// migrateChannelProjects adds the channel -> project mapping, which lived
// only in the daemon's memory before.
func migrateChannelProjects(tx *bolt.Tx) error {
	_, err := tx.CreateBucketIfNotExists(bucketProjects)
	return err
}

func migrateInitialLayout(tx *bolt.Tx) error {
	for _, name := range [][]byte{bucketMeta, bucketConversations, bucketWatermarks, bucketChannels, bucketRoster, bucketActivity, bucketAgents} {
		if _, err := tx.CreateBucketIfNotExists(name); err != nil {
			return fmt.Errorf("create bucket %q: %w", name, err)
		}
	}
	return nil
}

// schemaVersion reads the file's version; 0 means a new, empty file.
func schemaVersion(tx *bolt.Tx) (int, error) {
	meta := tx.Bucket(bucketMeta)
	if meta == nil {
		return 0, nil
	}
	v := meta.Get(keyVersion)
	if v == nil {
		return 0, nil
	}
	if len(v) != 8 {
		return 0, fmt.Errorf("schema version record is %d bytes, want 8", len(v))
	}
	return int(binary.BigEndian.Uint64(v)), nil
}

// migrate applies every migration in list newer than the file's version.
func migrate(tx *bolt.Tx, list []migration) error {
	for i, m := range list {
		if m.version != i+1 {
			return fmt.Errorf("migration %q has version %d, want %d (the list must be 1, 2, 3, ...)", m.name, m.version, i+1)
		}
	}
	cur, err := schemaVersion(tx)
	if err != nil {
		return err
	}
	if cur > len(list) {
		return fmt.Errorf("%w: file has version %d, this build knows up to %d", ErrSchemaTooNew, cur, len(list))
	}
	for _, m := range list[cur:] {
		if err := m.apply(tx); err != nil {
			return fmt.Errorf("migrate to schema version %d (%s): %w", m.version, m.name, err)
		}
		meta, err := tx.CreateBucketIfNotExists(bucketMeta)
		if err != nil {
			return fmt.Errorf("migrate to schema version %d: %w", m.version, err)
		}
		if err := meta.Put(keyVersion, u64(uint64(m.version))); err != nil {
			return fmt.Errorf("migrate to schema version %d: record version: %w", m.version, err)
		}
	}
	return nil
}
