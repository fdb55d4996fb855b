package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/residentd/residentd/apitype"
	"github.com/residentd/residentd/client"
	"github.com/residentd/residentd/internal/testkit"
)

// TestMentionProperty drives random bursts of mentions through a real
// `residentd serve` (built with the crash points) over its socket, on
// three bindings of the built-in agent, one per bursts mode (queue,
// coalesce, steer), in two channels: six keys on four slots, so keys are
// evicted and restored. Mentions fail on purpose, are cancelled, hold
// their turn while the next ones queue behind it; the daemon is killed
// (SIGKILL) at each step of a turn (accepted, started, answered,
// committed) and mid-prompt, and stopped cleanly, and restarted; the
// desktop side resubmits (same run id) what it does not know was accepted
// and pushes again what it could not push. Every mention is submitted
// before its message is pushed, so a turn that shows it as a line would
// have shown a mention the daemon already held.
//
// At the end, from the runs' results and the prompts the agents recorded,
// it checks that:
//   - every accepted mention ends once; one that ends done is answered by
//     exactly one successful turn (its own, or the turn whose answers list
//     it), and one that does not is answered by none;
//   - per key, mentions are answered in the order they were accepted;
//   - a successful prompt carries each mention it answers once, and no
//     prompt of the key carries an answered mention after the prompt that
//     answered it (no second listing, no second answer);
//   - no prompt of a key shows a mention it answered as a channel line:
//     not before its turn (it was held), nor after (it was seen).
//
// RESIDENTD_MENTION_STEPS and RESIDENTD_MENTION_SEEDS make longer runs.
func TestMentionProperty(t *testing.T) {
	steps, seeds := 200, 4
	if v, err := strconv.Atoi(os.Getenv("RESIDENTD_MENTION_STEPS")); err == nil && v > 0 {
		steps = v
	}
	if v, err := strconv.Atoi(os.Getenv("RESIDENTD_MENTION_SEEDS")); err == nil && v > 0 {
		seeds = v
	}
	var total mentionCounts
	for seed := 1; seed <= seeds; seed++ {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			m := newMentionRun(t, uint64(seed))
			for range steps {
				m.step()
			}
			c := m.finish()
			t.Logf("%+v", c)
			testkit.AddCounts(&total, c)
		})
	}
	t.Logf("%d mentions accepted: %d answered in their own turn, %d in a coalesced turn, %d steered into a running turn; %d failed, %d cancelled; %d successful prompts; %d SIGKILLs, %d clean restarts; %d answered twice, %d out of order, %d listed again, %d shown as a line",
		total.Accepted, total.Own, total.Coalesced, total.Steered, total.Failed, total.Cancelled, total.Prompts, total.Kills, total.Restarts, total.Twice, total.Disorder, total.Relisted, total.AsLine)
}

type mentionCounts struct {
	Accepted, Own, Coalesced, Steered, Failed, Cancelled, Prompts, Kills, Restarts int
	Twice, Disorder, Relisted, AsLine                                              int
}

var (
	mentionBindings = []string{"b-queue", "b-coalesce", "b-steer"}
	mentionChannels = []string{"c1", "c2"}
	crashSteps      = []string{"accepted", "started", "answered", "committed"}
)

// pmention is one mention as the test's desktop side knows it.
type pmention struct {
	req      apitype.TurnRequest
	key      string // channel/binding
	accepted bool   // the daemon answered its submit
	order    int    // its place among its key's accepted mentions
	pushed   bool   // its message is in the channel
	result   *apitype.Event
}

type mentionRun struct {
	t       *testing.T
	rnd     *rand.Rand
	state   string
	sock    string
	crash   string // the file the daemon's crash points read
	cfg     string
	cmd     *exec.Cmd
	exited  chan struct{}
	c       *client.Client
	n       int // ids made so far
	at      time.Time
	all     []*pmention
	byRun   map[string]*pmention
	byMsg   map[string]*pmention
	orders  map[string]int // key -> mentions accepted on it so far
	holds   []string
	unpushd []apitype.Message // plain lines a crash kept from the channel
	counts  mentionCounts
}

func newMentionRun(t *testing.T, seed uint64) *mentionRun {
	sdir, err := os.MkdirTemp("", "rd")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(sdir) })
	m := &mentionRun{t: t, rnd: rand.New(rand.NewPCG(seed, 0x3e77)), state: t.TempDir(), sock: filepath.Join(sdir, "s", "residentd.sock"),
		at: time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC), byRun: map[string]*pmention{}, byMsg: map[string]*pmention{}, orders: map[string]int{}}
	m.crash = filepath.Join(m.state, "crash")
	var bindings []map[string]any
	for _, id := range mentionBindings {
		bindings = append(bindings, map[string]any{
			"id": id, "handle": "@agent", "runtime": "cli:builtin", "command": bin,
			"args":     []string{"agent", "--state", filepath.Join(m.state, "agent-"+id), "--record", filepath.Join(m.state, id+".jsonl")},
			"resident": true, "supervised": true, "bursts": strings.TrimPrefix(id, "b-"),
		})
	}
	data, err := json.Marshal(map[string]any{"bindings": bindings, "runs": map[string]any{"ended": 100000, "retention": "24h"}})
	if err != nil {
		t.Fatal(err)
	}
	m.cfg = filepath.Join(m.state, "config.json")
	if err := os.WriteFile(m.cfg, data, 0o600); err != nil {
		t.Fatal(err)
	}
	m.start()
	t.Cleanup(func() {
		if m.alive() {
			m.cmd.Process.Kill()
			<-m.exited
		}
	})
	return m
}

// start runs the daemon and waits for its socket.
func (m *mentionRun) start() {
	m.t.Helper()
	m.cmd = exec.Command(bin, "serve", "--state", m.state, "--socket", m.sock, "--config", m.cfg, "--log-format", "json", "--shutdown-grace", "200ms")
	m.cmd.Env = append(os.Environ(), "RESIDENTD_CRASH_FILE="+m.crash)
	log, err := os.OpenFile(filepath.Join(m.state, "daemon.log"), os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o600)
	if err != nil {
		m.t.Fatal(err)
	}
	defer log.Close()
	m.cmd.Stderr = log
	if err := m.cmd.Start(); err != nil {
		m.t.Fatal(err)
	}
	exited := make(chan struct{})
	go func(cmd *exec.Cmd) { cmd.Wait(); close(exited) }(m.cmd)
	m.exited = exited
	m.c = &client.Client{Socket: m.sock}
	deadline := time.Now().Add(30 * time.Second)
	for {
		if _, err := m.c.Health(context.Background()); err == nil {
			return
		}
		if !m.alive() || time.Now().After(deadline) {
			m.t.Fatalf("the daemon did not come up (see %s)", filepath.Join(m.state, "daemon.log"))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (m *mentionRun) alive() bool {
	select {
	case <-m.exited:
		return false
	default:
		return true
	}
}

// stop stops the daemon with sig and waits for it.
func (m *mentionRun) stop(sig syscall.Signal) {
	m.t.Helper()
	if m.alive() {
		m.cmd.Process.Signal(sig)
	}
	select {
	case <-m.exited:
	case <-time.After(60 * time.Second):
		m.t.Fatalf("the daemon did not stop on %v", sig)
	}
	m.c.Close()
}

// recover restarts a daemon that died (a crash point fired) and does what
// the desktop side would: submits again what it does not know was
// accepted (the same run id: the daemon returns the run when it has it)
// and pushes what it could not. It reports whether there was a restart.
func (m *mentionRun) recover() bool {
	if m.alive() {
		return false
	}
	m.counts.Kills++
	m.c.Close()
	m.start()
	m.settleDesktop()
	return true
}

// settleDesktop resubmits, then pushes, what a dead daemon left unknown.
func (m *mentionRun) settleDesktop() {
	for _, p := range m.all {
		if !p.accepted {
			m.submit(p)
		}
	}
	for _, p := range m.all {
		if p.accepted && !p.pushed {
			m.pushMention(p)
		}
	}
	if len(m.unpushd) > 0 {
		lines := m.unpushd
		m.unpushd = nil
		m.push(lines...)
	}
}

// call runs op against the daemon; on an error with the daemon gone it
// restarts it and reports false (the caller knows what to redo).
func (m *mentionRun) call(what string, op func() error) bool {
	m.t.Helper()
	err := op()
	if err == nil {
		return true
	}
	// A crash point may be firing: give the process a moment to be gone.
	select {
	case <-m.exited:
	case <-time.After(2 * time.Second):
	}
	if m.alive() {
		m.t.Fatalf("%s: %v (the daemon is up)", what, err)
	}
	return false
}

func (m *mentionRun) step() {
	m.recover()
	switch x := m.rnd.IntN(100); {
	case x < 40:
		m.burst()
	case x < 55:
		m.lines()
	case x < 63:
		m.cancel()
	case x < 70:
		m.arm(crashSteps[m.rnd.IntN(len(crashSteps))])
	case x < 74:
		m.killMidPrompt()
	case x < 77:
		m.restart()
	default:
		m.quiet()
	}
}

// burst submits one to five mentions on one key, the first of them often
// holding its turn until the burst is in, so the others queue behind it
// (or are coalesced, or steered into it); some fail on purpose.
func (m *mentionRun) burst() {
	ch, b := mentionChannels[m.rnd.IntN(2)], mentionBindings[m.rnd.IntN(3)]
	k := 1 + m.rnd.IntN(5)
	var hold string
	for i := range k {
		m.n++
		id := fmt.Sprintf("q%d", m.n)
		text := "@agent " + id + " why is the refund spec flaky?"
		if i == 0 && m.rnd.IntN(2) == 0 {
			hold = filepath.Join(m.state, "hold-"+id)
			m.holds = append(m.holds, hold)
			text += " [[hold:" + hold + "]]"
		}
		if m.rnd.IntN(10) == 0 {
			text += " [[fault:fail-turn]]"
		}
		p := &pmention{req: apitype.TurnRequest{Channel: ch, Binding: b, MessageID: id, RunID: "run-" + id, Text: text}, key: ch + "/" + b}
		m.all = append(m.all, p)
		m.byRun[p.req.RunID], m.byMsg[id] = p, p
		if m.submit(p) {
			m.pushMention(p)
		}
		if i == 0 && hold != "" {
			m.running(p) // the others come while its agent works on it
		}
	}
	m.release()
}

// running waits a little for p's run to be with its agent: it may wait
// behind others, or its daemon may die.
func (m *mentionRun) running(p *pmention) {
	deadline := time.Now().Add(2 * time.Second)
	for m.alive() && time.Now().Before(deadline) && p.accepted {
		if st := m.state1(p); st != apitype.RunQueued && st != apitype.RunStarting {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// submit sends p's mention; false when the daemon died meanwhile (p may
// or may not have been accepted: settleDesktop submits it again).
func (m *mentionRun) submit(p *pmention) bool {
	ok := m.call("submit "+p.req.RunID, func() error {
		r, err := m.c.Submit(context.Background(), p.req)
		if err == nil && r.ID != p.req.RunID {
			m.t.Fatalf("submit %s: got run %s", p.req.RunID, r.ID)
		}
		return err
	})
	if ok {
		p.accepted = true
		p.order = m.orders[p.key]
		m.orders[p.key]++
	}
	return ok
}

// message is a channel message of id: its body names it, for the checks.
func (m *mentionRun) message(ch, id, text string) apitype.Message {
	m.at = m.at.Add(time.Second)
	return apitype.Message{ID: id, Channel: ch, Author: []string{"aiko", "ben", "carla"}[m.rnd.IntN(3)], AuthorKind: apitype.AuthorUser, Body: "msg:" + id + " " + text, CreatedAt: m.at}
}

func (m *mentionRun) pushMention(p *pmention) {
	// The body has no directive: a block line must not make the agent
	// fault or hold.
	if m.call("push "+p.req.MessageID, func() error {
		_, err := m.c.PutMessages(context.Background(), []apitype.Message{m.message(p.req.Channel, p.req.MessageID, "@agent why is the refund spec flaky?")})
		return err
	}) {
		p.pushed = true
	}
}

func (m *mentionRun) push(msgs ...apitype.Message) {
	if !m.call("push lines", func() error { _, err := m.c.PutMessages(context.Background(), msgs); return err }) {
		m.unpushd = append(m.unpushd, msgs...)
	}
}

// lines pushes a few plain channel lines.
func (m *mentionRun) lines() {
	ch := mentionChannels[m.rnd.IntN(2)]
	var msgs []apitype.Message
	for range 1 + m.rnd.IntN(5) {
		m.n++
		msgs = append(msgs, m.message(ch, fmt.Sprintf("l%d", m.n), "the cache key needs the locale"))
	}
	m.push(msgs...)
}

// release lets every held turn answer.
func (m *mentionRun) release() {
	for _, h := range m.holds {
		if err := os.WriteFile(h, nil, 0o600); err != nil {
			m.t.Fatal(err)
		}
	}
	m.holds = nil
}

// cancel cancels one accepted mention, ended or not (an ended one answers
// run_ended).
func (m *mentionRun) cancel() {
	if len(m.all) == 0 {
		return
	}
	p := m.all[len(m.all)-1-m.rnd.IntN(min(len(m.all), 8))]
	if !p.accepted {
		return
	}
	m.call("cancel "+p.req.RunID, func() error {
		err := m.c.Cancel(context.Background(), p.req.RunID)
		if client.IsCode(err, apitype.CodeRunEnded) {
			return nil
		}
		return err
	})
}

// arm makes the next turn that reaches step kill the daemon.
func (m *mentionRun) arm(step string) {
	if err := os.WriteFile(m.crash, []byte(step), 0o600); err != nil {
		m.t.Fatal(err)
	}
}

// killMidPrompt holds a mention's turn in its agent and kills the daemon
// there.
func (m *mentionRun) killMidPrompt() {
	m.n++
	id := fmt.Sprintf("q%d", m.n)
	ch, b := mentionChannels[m.rnd.IntN(2)], mentionBindings[m.rnd.IntN(3)]
	hold := filepath.Join(m.state, "hold-"+id)
	p := &pmention{req: apitype.TurnRequest{Channel: ch, Binding: b, MessageID: id, RunID: "run-" + id, Text: "@agent " + id + " hold on [[hold:" + hold + "]]"}, key: ch + "/" + b}
	m.all = append(m.all, p)
	m.byRun[p.req.RunID], m.byMsg[id] = p, p
	if m.submit(p) {
		m.pushMention(p)
	}
	// Its turn may wait behind others: whatever is in flight now is cut.
	m.running(p)
	m.stop(syscall.SIGKILL)
	m.holds = append(m.holds, hold)
	m.release()
	m.recover()
}

// state1 is p's run's state now ("" when the daemon does not answer).
func (m *mentionRun) state1(p *pmention) string {
	r, err := m.c.Run(context.Background(), p.req.RunID)
	if err != nil {
		return ""
	}
	return r.State
}

// restart stops the daemon cleanly (SIGTERM) and starts it again.
func (m *mentionRun) restart() {
	m.stop(syscall.SIGTERM)
	m.counts.Restarts++
	m.start()
	m.settleDesktop()
}

// quiet waits until every accepted mention's run has ended.
func (m *mentionRun) quiet() {
	m.release()
	deadline := time.Now().Add(60 * time.Second)
	for _, p := range m.all {
		for p.accepted {
			if m.recover() {
				continue
			}
			var r apitype.Run
			if !m.call("run "+p.req.RunID, func() (err error) { r, err = m.c.Run(context.Background(), p.req.RunID); return err }) {
				continue // the daemon died: recovered above
			}
			if r.Result != nil {
				break
			}
			if time.Now().After(deadline) {
				m.t.Fatalf("run %s did not end (state %s)", p.req.RunID, r.State)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
}

// finish lets everything end, then reads every result and every prompt
// and checks them.
func (m *mentionRun) finish() mentionCounts {
	t := m.t
	if err := os.WriteFile(m.crash, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	m.recover()
	m.settleDesktop()
	m.quiet()
	for _, p := range m.all {
		r, err := m.c.Run(context.Background(), p.req.RunID)
		if err != nil || r.Result == nil {
			t.Fatalf("run %s: %+v %v", p.req.RunID, r, err)
		}
		p.result = r.Result
		m.counts.Accepted++
	}
	m.stop(syscall.SIGTERM)
	prompts := map[string][]agentPrompt{}
	for _, b := range mentionBindings {
		prompts[b] = readAgentPrompts(t, filepath.Join(m.state, b+".jsonl"))
	}
	m.check(prompts)
	if dir := os.Getenv("RESIDENTD_MENTION_KEEP"); dir != "" && t.Failed() {
		// The state, the agents' records and the daemon's log, to read.
		keep := filepath.Join(dir, strings.ReplaceAll(t.Name(), "/", "_"))
		if err := os.CopyFS(keep, os.DirFS(m.state)); err != nil {
			t.Logf("keep %s: %v", keep, err)
		}
		t.Logf("the run's files are in %s", keep)
	}
	return m.counts
}

// agentPrompt is one prompt (or steer) an agent recorded.
type agentPrompt struct {
	session string
	turn    int
	steer   bool
	mention string   // the newest mention's message id ("" for a steer)
	listed  []string // the mentions it carries: its own, a coalesced list, a steered one
	lines   []string // the message ids of its block's lines
}

var (
	listedLine = regexp.MustCompile(`^- \[([^\]]+)\] `)
	blockLine  = regexp.MustCompile(`^- \[(?:user|agent)\] .*?msg:(\S+)`)
	replyTurn  = regexp.MustCompile(`^builtin turn=(\d+) `)
)

func readAgentPrompts(t *testing.T, path string) []agentPrompt {
	t.Helper()
	var out []agentPrompt
	for _, rec := range testkit.Records[struct {
		Method, Session, Prompt string
		Turn                    int
	}](t, path, "session/prompt", "_session/steering") {
		if rec.Method == "session/prompt" {
			out = append(out, parsePrompt(rec.Session, rec.Turn, rec.Prompt))
			continue
		}
		p := agentPrompt{session: rec.Session, steer: true}
		if mm := listedLine.FindStringSubmatch(rec.Prompt); mm != nil {
			p.listed = []string{mm[1]}
		}
		out = append(out, p)
	}
	return out
}

// parsePrompt reads a prompt's newest mention (the last payload line), the
// mentions its text lists, and its block's lines.
func parsePrompt(session string, turn int, prompt string) agentPrompt {
	p := agentPrompt{session: session, turn: turn}
	for _, line := range strings.Split(prompt, "\n") {
		line = strings.TrimPrefix(line, "User: ")
		if mm := blockLine.FindStringSubmatch(line); mm != nil {
			p.lines = append(p.lines, mm[1])
			continue
		}
		var payload struct {
			MessageID string `json:"message_id"`
			Text      string `json:"text"`
		}
		if strings.HasPrefix(line, `{"`) && json.Unmarshal([]byte(line), &payload) == nil && payload.MessageID != "" {
			p.mention, p.listed = payload.MessageID, []string{payload.MessageID}
			for _, l := range strings.Split(payload.Text, "\n") {
				if mm := listedLine.FindStringSubmatch(l); mm != nil && mm[1] != payload.MessageID {
					p.listed = append(p.listed, mm[1])
				}
			}
		}
	}
	return p
}

// check tests the recorded prompts and the runs' results against what the
// desktop side accepted.
func (m *mentionRun) check(prompts map[string][]agentPrompt) {
	t := m.t
	answerAt := map[*pmention]int{} // the index of the prompt that answered it, in its binding's record
	answering := map[string]map[int]bool{}
	for _, b := range mentionBindings {
		answering[b] = map[int]bool{}
	}
	// Each done run that answered its own mention: the prompt it was
	// answered in, and every mention that prompt answered.
	heads := 0
	for _, p := range m.all {
		r := p.result
		if r.Event != apitype.EventDone || r.AnsweredBy != "" {
			continue
		}
		heads++
		mm := replyTurn.FindStringSubmatch(r.Text)
		if mm == nil {
			t.Fatalf("%s: done with %q, not the built-in agent's reply", p.req.RunID, r.Text)
		}
		n, _ := strconv.Atoi(mm[1])
		idx := -1
		for i, ap := range prompts[p.req.Binding] {
			if !ap.steer && ap.session == r.Native && ap.turn == n && ap.mention == p.req.MessageID {
				idx = i
			}
		}
		if idx < 0 {
			t.Fatalf("%s: no recorded prompt of session %s turn %d for %s", p.req.RunID, r.Native, n, p.req.MessageID)
		}
		answering[p.req.Binding][idx] = true
		answerAt[p] = idx
		for _, a := range r.Answers {
			if o := m.byRun[a.RunID]; o != nil && o != p {
				if _, dup := answerAt[o]; dup {
					m.counts.Twice++
					t.Errorf("%s is answered by two turns", a.RunID)
				}
				answerAt[o] = idx
			}
		}
	}
	m.counts.Prompts = heads
	for _, p := range m.all {
		r := p.result
		idx, answered := answerAt[p]
		switch {
		case r.Event == apitype.EventDone && !answered:
			m.counts.Twice++
			t.Errorf("%s ended done (answered_by %q) but no successful turn lists it", p.req.RunID, r.AnsweredBy)
		case r.Event != apitype.EventDone && answered:
			m.counts.Twice++
			t.Errorf("%s ended %s (%s) but turn %d answered it", p.req.RunID, r.Event, r.Code, idx)
		case r.Event == apitype.EventDone && r.AnsweredBy == "":
			m.counts.Own++
		case r.Event == apitype.EventDone && m.byRun[r.AnsweredBy] != nil && m.byRun[r.AnsweredBy].req.Binding == "b-steer":
			m.counts.Steered++
		case r.Event == apitype.EventDone:
			m.counts.Coalesced++
		case r.Code == apitype.CodeCancelled:
			m.counts.Cancelled++
		default:
			m.counts.Failed++
		}
		if r.AnsweredBy != "" && r.Event == apitype.EventDone {
			if by := m.byRun[r.AnsweredBy]; by == nil || answerAt[by] != idx {
				m.counts.Twice++
				t.Errorf("%s points at %s, which did not answer it", p.req.RunID, r.AnsweredBy)
			}
		}
	}
	m.checkKeys(prompts, answerAt, answering)
}

// checkKeys checks each key's order and what its prompts carried.
func (m *mentionRun) checkKeys(prompts map[string][]agentPrompt, answerAt map[*pmention]int, answering map[string]map[int]bool) {
	t := m.t
	byKey := map[string][]*pmention{}
	for _, p := range m.all {
		byKey[p.key] = append(byKey[p.key], p)
	}
	for key, ps := range byKey {
		slices.SortFunc(ps, func(a, b *pmention) int { return a.order - b.order })
		last := -1
		for _, p := range ps {
			idx, ok := answerAt[p]
			if !ok {
				continue
			}
			if idx < last {
				m.counts.Disorder++
				t.Errorf("%s: %s was answered (prompt %d) before a mention accepted ahead of it (prompt %d)", key, p.req.MessageID, idx, last)
			}
			last = max(last, idx)
		}
	}
	carries := map[string][][]string{}
	for b, aps := range prompts {
		carries[b] = carried(aps)
	}
	for _, p := range m.all {
		idx, answered := answerAt[p]
		if !answered {
			continue
		}
		for i, ap := range prompts[p.req.Binding] {
			if o := m.byMsg[ap.mention]; ap.steer || o == nil || o.key != p.key {
				continue // a steer (counted with its prompt), or another key's prompt
			}
			n := 0
			for _, id := range carries[p.req.Binding][i] {
				if id == p.req.MessageID {
					n++
				}
			}
			switch {
			case i == idx && n != 1:
				m.counts.Relisted++
				t.Errorf("%s: the prompt that answered %s carries it %d times", p.key, p.req.MessageID, n)
			case i > idx && n > 0:
				m.counts.Relisted++
				t.Errorf("%s: prompt %d carries %s again after prompt %d answered it", p.key, i, p.req.MessageID, idx)
			}
			if slices.Contains(ap.lines, p.req.MessageID) {
				m.counts.AsLine++
				t.Errorf("%s: prompt %d shows mention %s (answered in prompt %d) as a channel line", p.key, i, p.req.MessageID, idx)
			}
		}
	}
}

// carried lists, by prompt, the mentions each carries: its own, the ones
// its text lists, and those steered into it (the steers of its session
// recorded after it and before that session's next prompt).
func carried(aps []agentPrompt) [][]string {
	out := make([][]string, len(aps))
	open := map[string]int{} // session -> its newest prompt
	for i, ap := range aps {
		if !ap.steer {
			out[i] = append(out[i], ap.listed...)
			open[ap.session] = i
			continue
		}
		if j, ok := open[ap.session]; ok {
			out[j] = append(out[j], ap.listed...)
		}
	}
	return out
}
