package daemon_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/residentd/residentd/apitype"
	"github.com/residentd/residentd/internal/channel"
	"github.com/residentd/residentd/internal/config"
	"github.com/residentd/residentd/internal/delivery"
	"github.com/residentd/residentd/internal/testkit"
)

// TestExactlyOnceProperty drives random channel histories through the real
// daemon and the built-in agent, and checks what the agent received against
// a model of the channel: per native session every message version is shown
// exactly once, or counted in a block's pointer (and returned by
// channel_history), or carried by the prompt another way (the mention, a
// replayed mention), or is the agent's own; nothing is shown twice, nothing
// unseen is left out uncounted, nothing deleted or stale is shown.
//
// The histories hold bursts larger than the bound, equal and out-of-order
// created_at, messages that arrive while a turn runs, mentions pushed after
// their turn, failed and crashed runs, evictions (two channels, one slot)
// with and without restore, daemon restarts, edits, deletes and threads,
// edits of seen messages inside bursts beyond the bound, two versions of
// one id in one push, and people whose name is the agent's handle.
//
// Edits are checked for content, not only ids: every edit of a message a
// session saw is either shown to it once, marked (edited), or counted as
// an edit in a block's pointer (and channel_history returns its body); a
// message the session never saw is never marked (edited). The agent's own
// posts are left out and counted in done.context.own_omitted, exactly.
// RESIDENTD_PROPERTY_STEPS and RESIDENTD_PROPERTY_SEEDS make longer runs.
func TestExactlyOnceProperty(t *testing.T) {
	steps, seeds := 60, []uint64{1, 2}
	if v, err := strconv.Atoi(os.Getenv("RESIDENTD_PROPERTY_STEPS")); err == nil && v > 0 {
		steps = v
	}
	if v, err := strconv.Atoi(os.Getenv("RESIDENTD_PROPERTY_SEEDS")); err == nil && v > 0 {
		seeds = nil
		for i := range v {
			seeds = append(seeds, uint64(i+1))
		}
	}
	var total propCounts
	for _, restore := range []bool{true, false} {
		for _, seed := range seeds {
			t.Run(fmt.Sprintf("restore=%v/seed=%d", restore, seed), func(t *testing.T) {
				c := runProperty(t, seed, steps, restore)
				testkit.AddCounts(&total, c)
				t.Logf("%+v", c)
			})
		}
	}
	t.Logf("checked %d successful turns over %d message versions: %d shown once, %d counted in a pointer (all in channel_history), %d carried as the mention, %d edits of seen messages shown marked (edited), %d counted as edits in a pointer, %d own posts left out and counted, %d posts by a person named like the agent shown or counted, %d deleted before shown, %d not rendered yet; %d duplicates, %d silent losses",
		total.Turns, total.Versions, total.Shown, total.Counted, total.Known, total.EditsShown, total.EditsCounted, total.Own, total.Namesakes, total.DeletedUnseen, total.Pending, total.Duplicates, total.Losses)
}

type propCounts struct {
	Turns, Failed, Versions, Shown, Counted, Known, EditsShown, EditsCounted, Own, Namesakes, DeletedUnseen, Pending, Duplicates, Losses int
}

// pmsg is the model's view of one channel message.
type pmsg struct {
	id, ch, thread, author, binding string
	at                              time.Time
	ver                             int // current version, 1 for the first push
	pushed, deleted                 bool
	own                             bool
	namesake                        bool // a person whose name is the agent's handle: not the agent
}

func (m *pmsg) key() string  { return m.ch + "/" + m.id }
func (m *pmsg) body() string { return fmt.Sprintf("%s v%d %s", m.id, m.ver, filler(m.id, m.ver)) }

// filler gives some bodies more than the 600 characters a line keeps.
func filler(id string, ver int) string {
	if len(id)%7 == 0 {
		return strings.Repeat("long log line ", 60)
	}
	return fmt.Sprintf("about the refund spec (%d)", ver)
}

var propEdits = regexp.MustCompile(`earlier messages? not shown here, (?:(\d+) of them )?edited since`)

// pointerEdits returns how many of a block's pointer's messages it says
// are edits of seen messages.
func pointerEdits(turn string) int {
	m := propEdits.FindStringSubmatch(turn)
	switch {
	case m == nil:
		return 0
	case m[1] == "":
		return 1
	}
	n, _ := strconv.Atoi(m[1])
	return n
}

var propLine = regexp.MustCompile(`^- \[(user|agent)\] (?:(.*?)( \(edited\))?: |(\(edited\) ))?(\S+) v(\d+) `)
var propMention = regexp.MustCompile(`"message_id":"([^"]*)"`)

type propRecord struct {
	Method  string `json:"method"`
	Session string `json:"session"`
	Prompt  string `json:"prompt"`
}

// readRecords returns the prompts recorded after byte offset *off, and
// moves *off past them.
func readRecords(t *testing.T, path string, off *int64) []propRecord {
	t.Helper()
	f, err := os.Open(path)
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.Seek(*off, 0); err != nil {
		t.Fatal(err)
	}
	var out []propRecord
	r := bufio.NewReaderSize(f, 1<<20)
	for {
		line, err := r.ReadBytes('\n')
		if err != nil {
			break // a partial last line is read next time
		}
		*off += int64(len(line))
		var rec propRecord
		if err := json.Unmarshal(line, &rec); err != nil {
			t.Fatal(err)
		}
		if rec.Method == "session/prompt" {
			out = append(out, rec)
		}
	}
	return out
}

type propRun struct {
	t      *testing.T
	h      *harness
	rnd    *rand.Rand
	rec    string
	off    int64 // bytes of the record consumed
	msgs   map[string]*pmsg
	order  []*pmsg
	at     time.Time
	n      int
	counts propCounts
	// what each native session has been given: message key -> version
	got map[string]map[string]int
	// messages a pointer counted, to look up in channel_history
	counted []*pmsg
	lastOK  bool // the last turn succeeded
	// the version of each answered mention its turn carried (1 when it was
	// not pushed yet: the app's first version)
	carried map[string]int
}

func runProperty(t *testing.T, seed uint64, steps int, restore bool) propCounts {
	var rec string
	h := newHarness(t, func(c *config.Config) {
		rec = filepath.Join(c.StateDir, "record.jsonl")
		c.MaxLive = 1
		c.Bindings[0].Restore = &restore
		c.Bindings[0].Args = append(c.Bindings[0].Args, "--record", rec)
	})
	p := &propRun{t: t, h: h, rnd: rand.New(rand.NewPCG(seed, 0x5eed)), rec: rec, msgs: map[string]*pmsg{},
		at: time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC), got: map[string]map[string]int{}, carried: map[string]int{}}
	for range steps {
		switch x := p.rnd.IntN(100); {
		case x < 30:
			p.pushBatch()
		case x < 34:
			p.editBurst()
		case x < 40:
			p.edit()
		case x < 43:
			p.repushSame()
		case x < 47:
			p.del()
		case x < 97:
			p.mention(p.pick("c1", "c2"))
		default:
			h.restart()
		}
	}
	// A last good turn on every timeline renders whatever is still unseen.
	for _, ch := range []string{"c1", "c2"} {
		p.turn(ch, "", true, false, "")
		for _, root := range p.roots(ch) {
			p.turn(ch, root.id, true, false, "")
		}
	}
	p.finish()
	return p.counts
}

func (p *propRun) pick(opts ...string) string { return opts[p.rnd.IntN(len(opts))] }

func (p *propRun) newMsg(ch, thread string) *pmsg {
	p.n++
	m := &pmsg{id: fmt.Sprintf("%s-m%d", ch, p.n), ch: ch, thread: thread, author: p.pick("aiko", "ben", "carla"), ver: 1}
	switch x := p.rnd.IntN(100); {
	case x < 20: // same created_at as the last message
	case x < 35:
		m.at = p.at.Add(-time.Duration(1+p.rnd.IntN(600)) * time.Second) // late: posted offline
	default:
		p.at = p.at.Add(time.Second)
	}
	if m.at.IsZero() {
		m.at = p.at
	}
	switch x := p.rnd.IntN(20); {
	case x < 2:
		m.own = true
		switch p.rnd.IntN(4) {
		case 0:
			m.author = "@agent"
		case 1:
			m.author = "agent"
		case 2:
			m.author = "Agent"
		default:
			m.author, m.binding = "Resident", "b-builtin"
		}
	case x < 3:
		m.author, m.namesake = "@agent", true
	}
	p.msgs[m.key()] = m
	p.order = append(p.order, m)
	return m
}

func (p *propRun) roots(ch string) []*pmsg {
	var out []*pmsg
	for _, m := range p.order {
		if m.ch == ch && m.thread == "" && m.pushed && !m.deleted && !strings.Contains(m.id, "-q") {
			out = append(out, m)
		}
	}
	return out
}

func (p *propRun) push(ms ...*pmsg) {
	p.t.Helper()
	if err := p.put(ms...); err != nil {
		p.t.Fatal(err)
	}
}

// apiMsg is m as the desktop app pushes it.
func (m *pmsg) apiMsg() channel.Message {
	kind := apitype.AuthorUser
	if m.own && m.binding == "" {
		kind = apitype.AuthorAgent // a binding id needs no kind
	}
	return channel.Message{ID: m.id, Channel: m.ch, ThreadRoot: m.thread, Author: m.author, AuthorKind: kind, BindingID: m.binding, CreatedAt: m.at, Body: m.body()}
}

// put pushes ms to the daemon; it may run off the test's goroutine.
func (p *propRun) put(ms ...*pmsg) error {
	in := make([]channel.Message, len(ms))
	for i, m := range ms {
		in[i] = m.apiMsg()
	}
	if _, err := p.h.inbox.PutMessages(in); err != nil {
		return err
	}
	for _, m := range ms {
		if !m.pushed {
			m.pushed = true
			p.counts.Versions++
		}
	}
	return nil
}

func (p *propRun) pushBatch() {
	ch := p.pick("c1", "c2")
	n := 1 + p.rnd.IntN(5)
	if p.rnd.IntN(10) == 0 {
		n = 13 + p.rnd.IntN(18) // a burst over the 12-line bound
	}
	var batch []*pmsg
	for range n {
		thread := ""
		if roots := p.roots(ch); len(roots) > 0 && p.rnd.IntN(5) == 0 {
			thread = roots[p.rnd.IntN(len(roots))].id
		}
		batch = append(batch, p.newMsg(ch, thread))
	}
	p.push(batch...)
}

// editBurst pushes a burst over the 12-line bound in a few pushes, with
// edits of live messages of the channel (most of them seen) arriving among
// the new lines, and now and then a new line pushed twice in one push
// (one message, its last version).
func (p *propRun) editBurst() {
	ch := p.pick("c1", "c2")
	var targets []*pmsg
	for _, m := range p.live() {
		if m.ch == ch {
			targets = append(targets, m)
		}
	}
	var batch []channel.Message
	var fresh []*pmsg
	flush := func() {
		if len(batch) == 0 {
			return
		}
		if _, err := p.h.inbox.PutMessages(batch); err != nil {
			p.t.Fatal(err)
		}
		for _, m := range fresh {
			m.pushed = true
		}
		batch, fresh = nil, nil
	}
	n := 13 + p.rnd.IntN(18)
	for range n {
		switch x := p.rnd.IntN(100); {
		case x < 12 && len(targets) > 0:
			m := targets[p.rnd.IntN(len(targets))]
			m.ver++
			p.counts.Versions++
			batch = append(batch, m.apiMsg())
		case x < 18:
			flush()
		}
		m := p.newMsg(ch, "")
		p.counts.Versions++
		batch, fresh = append(batch, m.apiMsg()), append(fresh, m)
		if p.rnd.IntN(10) == 0 {
			m.ver++ // a second version in the same push
			batch = append(batch, m.apiMsg())
		}
	}
	flush()
}

func (p *propRun) live() []*pmsg {
	var out []*pmsg
	for _, m := range p.order {
		if m.pushed && !m.deleted {
			out = append(out, m)
		}
	}
	return out
}

func (p *propRun) edit() {
	if l := p.live(); len(l) > 0 {
		m := l[p.rnd.IntN(len(l))]
		m.ver++
		p.counts.Versions++
		p.push(m)
	}
}

func (p *propRun) repushSame() {
	if l := p.live(); len(l) > 0 {
		p.push(l[p.rnd.IntN(len(l))])
	}
}

func (p *propRun) del() {
	if l := p.live(); len(l) > 0 {
		m := l[p.rnd.IntN(len(l))]
		if err := p.h.inbox.DeleteMessage(m.ch, m.id); err != nil {
			p.t.Fatal(err)
		}
		m.deleted = true
	}
}

// mention runs one turn on ch, in the main timeline or a thread, good or
// failing, its mention pushed before, after, or never.
func (p *propRun) mention(ch string) {
	thread := ""
	if roots := p.roots(ch); len(roots) > 0 && p.rnd.IntN(4) == 0 {
		thread = roots[p.rnd.IntN(len(roots))].id
	}
	fault := ""
	switch x := p.rnd.IntN(100); {
	case x < 8:
		fault = "fail-turn"
	case x < 13 && p.lastOK:
		// One crash at a time: two in a row put the binding in crash-loop
		// backoff, which refuses turns for a while (tested elsewhere).
		fault = "exit-turn"
	}
	p.turn(ch, thread, fault == "" && p.rnd.IntN(5) > 0, fault == "" && p.rnd.IntN(6) == 0, fault)
}

func (p *propRun) turn(ch, thread string, pushFirst, during bool, fault string) {
	t := p.t
	t.Helper()
	p.n++
	q := &pmsg{id: fmt.Sprintf("%s-q%d", ch, p.n), ch: ch, thread: thread, author: "dana", ver: 1}
	p.at = p.at.Add(time.Second)
	q.at = p.at
	text := q.body()
	if fault != "" {
		text += " [[fault:" + fault + "]]" // never pushed: it would fault every later prompt
	} else {
		p.msgs[q.key()] = q
		p.order = append(p.order, q)
		if pushFirst {
			p.push(q)
		}
	}
	req := apitype.TurnRequest{Channel: ch, Binding: "b-builtin", MessageID: q.id, Text: text}
	if thread != "" {
		req.ThreadRoot = &thread
	}
	// Messages that arrive while the agent works: pushed on its first
	// update, after the prompt was rendered and recorded.
	var (
		once    sync.Once
		pushing sync.WaitGroup
		arrived []*pmsg
		pushErr error
	)
	if during {
		for range 1 + p.rnd.IntN(3) {
			arrived = append(arrived, p.newMsg(ch, thread))
		}
	}
	done, err := p.h.d.Turn(t.Context(), req, func(ev apitype.Event) {
		if ev.Event == apitype.EventUpdate && len(arrived) > 0 {
			once.Do(func() {
				pushing.Add(1)
				go func() { defer pushing.Done(); pushErr = p.put(arrived...) }()
			})
		}
	})
	pushing.Wait()
	if pushErr != nil {
		t.Fatal(pushErr)
	}
	fresh := readRecords(t, p.rec, &p.off)
	switch {
	case fault != "" && err == nil:
		t.Fatalf("turn with fault %s succeeded", fault)
	case fault == "" && err != nil:
		t.Fatalf("turn %s failed: %v", q.id, err)
	case err != nil:
		p.counts.Failed++
		p.lastOK = false
	default:
		p.lastOK = true
		if len(fresh) != 1 || fresh[0].Session != done.Native {
			t.Fatalf("turn %s: %d new prompts (want 1, session %s)", q.id, len(fresh), done.Native)
		}
		p.check(fresh[0], q, done, arrived)
	}
	for _, m := range arrived {
		if !m.pushed { // the agent sent no update: push them now
			p.push(m)
		}
	}
	if fault == "" && !pushFirst && p.rnd.IntN(2) == 0 {
		p.push(q) // the desktop app pushes the mention only after its turn
	}
}

// check compares one successful prompt with the model.
func (p *propRun) check(r propRecord, q *pmsg, done apitype.Event, arrived []*pmsg) {
	t := p.t
	p.counts.Turns++
	got := p.got[r.Session]
	if got == nil {
		got = map[string]int{}
		p.got[r.Session] = got
	}
	// The version of each mention the prompt carries: the current one for
	// this turn's, the one its own turn answered for a replayed one.
	known := map[string]int{}
	for _, m := range propMention.FindAllStringSubmatch(r.Prompt, -1) {
		if k := q.ch + "/" + m[1]; m[1] == q.id {
			known[m[1]] = q.ver
		} else {
			known[m[1]] = p.carried[k]
		}
	}
	carries := func(m *pmsg) bool { return m.ver <= known[m.id] }
	// An earlier version was given to this session: shown, counted, or
	// carried by this prompt's replay.
	sawEarlier := func(m *pmsg) bool { return got[m.key()] > 0 || known[m.id] > 0 }
	// What the block must account for: every live message of the timeline
	// (a thread's root included) this session has not been given; the
	// agent's own of them are left out and counted.
	var unseen, own []*pmsg
	for _, m := range p.order {
		inTimeline := m.thread == q.thread || (q.thread != "" && m.id == q.thread)
		if m.ch != q.ch || !inTimeline || !m.pushed || m.deleted || got[m.key()] >= m.ver || carries(m) || slices.Contains(arrived, m) {
			continue
		}
		if m.own {
			own = append(own, m)
			continue
		}
		unseen = append(unseen, m)
	}
	turn := delivery.NewestTurn(r.Prompt)
	shown := map[string]bool{}
	for _, line := range strings.Split(turn, "\n") {
		if !strings.HasPrefix(line, "- [") {
			continue
		}
		mm := propLine.FindStringSubmatch(line)
		if mm == nil {
			t.Fatalf("unparsed block line %.120q", line)
		}
		edited := mm[3] != "" || mm[4] != ""
		ver, _ := strconv.Atoi(mm[6])
		m := p.msgs[q.ch+"/"+mm[5]]
		switch {
		case m == nil:
			t.Fatalf("line for an unknown message: %q", line)
		case m.deleted:
			p.counts.Losses++
			t.Errorf("turn %s shows deleted %s", q.id, m.id)
		case ver != m.ver:
			t.Errorf("turn %s shows %s v%d, current is v%d", q.id, m.id, ver, m.ver)
		case edited != sawEarlier(m):
			t.Errorf("turn %s: %s v%d marked edited=%v, but the session was given v%d before", q.id, m.id, ver, edited, got[m.key()])
		case got[m.key()] >= ver || carries(m):
			p.counts.Duplicates++
			t.Errorf("turn %s (session %s) shows %s v%d again (given v%d before)", q.id, r.Session, m.id, ver, got[m.key()])
		case m.own:
			t.Errorf("turn %s shows the agent's own post %s", q.id, m.id)
		}
		shown[m.key()] = true
	}
	want, wantEdits := 0, 0
	for _, m := range unseen {
		if !shown[m.key()] {
			want++
			if sawEarlier(m) {
				wantEdits++
			}
		}
	}
	if n := pointer(turn); n != want {
		p.counts.Losses += max(0, want-n)
		t.Errorf("turn %s (%s, thread %q): pointer says %d earlier messages, %d unseen were left out (%d shown, %d unseen)", q.id, done.Shape, q.thread, n, want, len(shown), len(unseen))
	}
	if n := pointerEdits(turn); n != wantEdits {
		p.counts.Losses += max(0, wantEdits-n)
		t.Errorf("turn %s: pointer says %d of its messages are edits of seen ones, %d are", q.id, n, wantEdits)
	}
	if c := done.Context; c.DroppedBound != want || c.DroppedBoundEdits != wantEdits || c.Lines != len(shown) || c.OwnOmitted != len(own) {
		t.Errorf("turn %s: context report %+v, want %d lines, %d left out (%d edits), %d own posts", q.id, done.Context, len(shown), want, wantEdits, len(own))
	}
	for _, m := range own {
		p.counts.Own++
		got[m.key()] = m.ver
	}
	for _, m := range unseen {
		edit := sawEarlier(m)
		switch {
		case shown[m.key()] && edit:
			p.counts.EditsShown++
		case shown[m.key()]:
			p.counts.Shown++
		case edit:
			p.counts.EditsCounted++
		default:
			p.counts.Counted++
		}
		if m.namesake {
			p.counts.Namesakes++
		}
		if !shown[m.key()] {
			p.counted = append(p.counted, m)
		}
		got[m.key()] = m.ver
	}
	for id, ver := range known {
		if m := p.msgs[q.ch+"/"+id]; m != nil {
			if got[m.key()] < ver {
				p.counts.Known++
			}
			got[m.key()] = max(got[m.key()], ver)
		}
	}
	p.carried[q.key()] = q.ver
	if t.Failed() {
		t.FailNow()
	}
}

// finish counts what was never shown and why, and looks up every message a
// pointer counted in channel_history.
func (p *propRun) finish() {
	t := p.t
	for _, m := range p.counted {
		if m.deleted {
			continue
		}
		if !p.inHistory(m) {
			p.counts.Losses++
			t.Errorf("%s was counted in a pointer but channel_history does not return it", m.id)
		}
	}
	for _, m := range p.order {
		switch {
		case !m.pushed, m.own:
		case m.deleted && !p.given(m):
			p.counts.DeletedUnseen++
		case !p.given(m):
			p.counts.Pending++
		}
	}
}

func (p *propRun) given(m *pmsg) bool {
	for _, got := range p.got {
		if got[m.key()] > 0 {
			return true
		}
	}
	return false
}

func (p *propRun) inHistory(m *pmsg) bool {
	thread, before := m.thread, ""
	for {
		page, next, err := p.h.inbox.History(m.ch, thread, before, 100)
		if err != nil {
			p.t.Fatal(err)
		}
		if slices.ContainsFunc(page, func(h apitype.HistoryMessage) bool { return h.ID == m.id && strings.HasPrefix(h.Body, m.body()) }) {
			return true
		}
		if next == "" {
			return false
		}
		before = next
	}
}
