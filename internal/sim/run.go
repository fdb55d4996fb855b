package sim

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	sdk "github.com/coder/acp-go-sdk"
	"go.uber.org/zap"

	"github.com/residentd/residentd/apitype"
	"github.com/residentd/residentd/internal/channel"
	"github.com/residentd/residentd/internal/config"
	"github.com/residentd/residentd/internal/daemon"
	"github.com/residentd/residentd/internal/delivery"
	"github.com/residentd/residentd/internal/inbox"
	"github.com/residentd/residentd/internal/metrics"
	"github.com/residentd/residentd/internal/session"
	"github.com/residentd/residentd/internal/store"
)

// Strategy names, the keys of the JSON report.
const (
	Window             = "window"
	Watermark          = "watermark"
	Unstable           = "unstable"
	WatermarkNoOwn     = "watermark_no_own_posts"
	BriefInFraming     = "brief_in_framing"
	WindowEvicted      = "window_evicted"
	WatermarkRestored  = "watermark_evicted_restored"
	WatermarkEvictCold = "watermark_evicted_cold"
)

// Options configures a run.
type Options struct {
	Messages     []Message // the channel, in posting order
	PrefixTokens int       // size of the modeled system prompt + tools
	EvictAt      int       // 1-based mention before which the eviction runs restart the daemon; 0 skips them
	Limit        int       // lines shown
	MaxChars     int       // characters per body
	// SourceChannel says Messages is the default generated channel, the
	// one shaped like the source article's: only then does the table quote
	// the source's figures beside ours.
	SourceChannel bool

	// AgentCommand runs the built-in agent: AgentCommand AgentArgs... --state
	// DIR --record FILE, with AgentEnv added to the environment.
	AgentCommand string
	AgentArgs    []string
	AgentEnv     map[string]string

	Dir string // state for the daemons and agents; a temporary dir when empty
	// FailAt (1-based mention, tests only) sends that mention's turn with the
	// built-in agent's fail-turn marker; the channel never holds the marker.
	FailAt   int
	Progress io.Writer // one progress line per mention; nil for none
	Log      *zap.Logger
}

// outcome is what the daemon reported for one run id.
type outcome struct {
	mention int // 0-based
	ok      bool
	reply   string
	shape   string
	shown   []string // ids of the block's lines, from the done event
}

// binding returns the daemon binding for strategy name.
func (o *Options) binding(name, dir string) config.Binding {
	own := false
	// The shipped built-in binding, one per strategy, recording what it gets.
	b := config.Builtin(o.AgentCommand, "")
	b.ID, b.Handle, b.Env, b.OmitOwnPosts = bindingID(name), AgentHandle, o.AgentEnv, &own
	b.Args = append(append([]string(nil), o.AgentArgs...),
		"--state", filepath.Join(dir, "agent-"+name), "--record", recordPath(dir, name))
	// The source's brief rides in every user turn; the daemon's own default
	// for a resident binding is its own strategy, BriefInFraming.
	b.BriefPlacement = delivery.InTurn
	switch name {
	case Window, WindowEvicted:
		// The source's window: the process stays warm, but no state says
		// what it was shown, so every turn gets a snapshot of the newest
		// lines. residentd itself gives every resident process a
		// watermark; the sim forgets it before each of this strategy's
		// turns (see forget), which is all that tells the two apart. No
		// restore either: the source's window evicted starts cold.
		off := false
		b.Restore = &off
	case WatermarkNoOwn:
		b.OmitOwnPosts = nil // the daemon's default: own posts left out
	case BriefInFraming:
		b.BriefPlacement = delivery.InFraming
	case WatermarkEvictCold:
		off := false
		b.Restore = &off
	}
	return b
}

// bindingID is the id of strategy name's binding.
func bindingID(name string) string { return "b-" + strings.ReplaceAll(name, "_", "-") }

func recordPath(dir, name string) string { return filepath.Join(dir, "record-"+name+".jsonl") }

// play runs every mention of o.Messages through one daemon holding one
// binding per strategy, all strategies answering each mention at once.
// With evictAt > 0 the daemon is restarted on the same store just before
// that mention, which evicts every process.
func (o *Options) play(ctx context.Context, dir string, names []string, evictAt int, progress func(int)) (map[string]outcome, error) {
	cfg := &config.Config{
		StateDir: dir, MaxLive: len(names), AgentGrace: config.Duration(2 * time.Second),
		Context: config.Context{Limit: o.Limit, MaxChars: o.MaxChars},
	}
	for _, n := range names {
		cfg.Bindings = append(cfg.Bindings, o.binding(n, dir))
	}
	cfg.SetDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	d, st, closeD, err := o.open(cfg)
	f := inbox.New(st, metrics.New("sim", nil), config.Attachments{})
	if err != nil {
		return nil, err
	}
	defer func() { closeD() }()

	outs := map[string]outcome{}
	var mu sync.Mutex
	posted, mention := 0, 0
	for i, m := range o.Messages {
		if !m.MentionsAgent {
			continue
		}
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("sim: stopped before mention %d: %w", mention+1, context.Cause(ctx))
		}
		if _, err := f.PutMessages(toChannel(o.Messages[posted : i+1])); err != nil {
			return nil, fmt.Errorf("sim: post messages up to %q: %w", m.ID, err)
		}
		posted = i + 1
		mention++
		if mention == evictAt {
			closeD()
			if d, st, closeD, err = o.open(cfg); err != nil {
				return nil, fmt.Errorf("sim: restart the daemon at mention %d: %w", mention, err)
			}
			f = inbox.New(st, metrics.New("sim", nil), config.Attachments{})
		}
		text := m.Body
		if mention == o.FailAt {
			text += " [[fault:fail-turn]]"
		}
		var wg sync.WaitGroup
		errs := make([]error, len(cfg.Bindings))
		for j, b := range cfg.Bindings {
			wg.Add(1)
			go func() {
				defer wg.Done()
				run := fmt.Sprintf("%s-%03d", b.ID, mention)
				if err := forget(st, b.ID); err != nil {
					errs[j] = err
					return
				}
				done, err := d.Turn(ctx, apitype.TurnRequest{
					Channel: ChannelID, Binding: b.ID, MessageID: m.ID, RunID: run, Text: text,
					ChannelAgents: []apitype.Agent{{Handle: AgentHandle, Reachable: true}}, MaxRecipients: 3,
				}, func(apitype.Event) {})
				if err != nil && mention != o.FailAt {
					errs[j] = fmt.Errorf("sim: mention %d (%s) for binding %q: %w", mention, m.ID, b.ID, err)
				}
				var shown []string
				if done.Context != nil {
					shown = done.Context.Shown
				}
				mu.Lock()
				outs[b.ID+"/"+m.ID] = outcome{mention: mention - 1, ok: err == nil, reply: done.Text, shape: done.Shape, shown: shown}
				mu.Unlock()
			}()
		}
		wg.Wait()
		if err := errors.Join(errs...); err != nil {
			return nil, err
		}
		if progress != nil {
			progress(mention)
		}
	}
	return outs, nil
}

func toChannel(msgs []Message) []channel.Message {
	out := make([]channel.Message, len(msgs))
	for i, m := range msgs {
		out[i] = m.ToChannel(ChannelID)
	}
	return out
}

// forget drops what binding's session was shown of the channel when it
// plays a window strategy: the source's window keeps no state.
func forget(st *store.Store, binding string) error {
	if binding != "b-"+strings.ReplaceAll(Window, "_", "-") && binding != "b-"+strings.ReplaceAll(WindowEvicted, "_", "-") {
		return nil
	}
	if err := st.DeleteWatermark(channel.WatermarkKey{Key: session.Key{Channel: ChannelID, Binding: binding}}); err != nil {
		return fmt.Errorf("sim: forget what %q was shown: %w", binding, err)
	}
	return nil
}

// open starts a daemon on cfg's state dir; the returned func stops it and
// closes its store (idempotent).
func (o *Options) open(cfg *config.Config) (*daemon.Daemon, *store.Store, func(), error) {
	st, err := store.Open(filepath.Join(cfg.StateDir, "residentd.db"), store.Options{})
	if err != nil {
		return nil, nil, nil, err
	}
	log := o.Log
	if log == nil {
		log = zap.NewNop()
	}
	d, err := daemon.New(daemon.Options{Config: cfg, Store: st, Metrics: metrics.New("sim", nil), Log: log})
	if err != nil {
		st.Close()
		return nil, nil, nil, err
	}
	var once sync.Once
	return d, st, func() {
		once.Do(func() {
			d.Close(5 * time.Second)
			st.Close()
		})
	}, nil
}

// received is one prompt the agent got, joined with the daemon's outcome.
type received struct {
	mention int
	native  string
	text    string
	ok      bool
	reply   string
	shape   string
	shown   []string
}

// readRecord reads the --record file of binding's agent and joins every
// prompt with the outcome of its run (by the newest mention line's
// message id: each binding answers each mention once).
func readRecord(path, binding string, outs map[string]outcome) ([]received, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("sim: open agent record: %w", err)
	}
	defer f.Close()
	var got []received
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 1<<20), 64<<20)
	for sc.Scan() {
		var rec struct {
			Method  string `json:"method"`
			Session string `json:"session"`
			Prompt  string `json:"prompt"`
		}
		if err := json.Unmarshal(sc.Bytes(), &rec); err != nil {
			return nil, fmt.Errorf("sim: agent record %s: %w", path, err)
		}
		if rec.Method != sdk.AgentMethodSessionPrompt {
			continue
		}
		id := mentionMessageID(rec.Prompt)
		out, ok := outs[binding+"/"+id]
		if !ok {
			return nil, fmt.Errorf("sim: agent record %s: prompt for unknown mention %q", path, id)
		}
		got = append(got, received{mention: out.mention, native: rec.Session, text: rec.Prompt, ok: out.ok, reply: out.reply, shape: out.shape, shown: out.shown})
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("sim: agent record %s: %w", path, err)
	}
	sort.SliceStable(got, func(i, j int) bool { return got[i].mention < got[j].mention })
	return got, nil
}

// mentionMessageID reads message_id from the newest mention line in a
// prompt (a cold replay carries the older ones before it, after "User: ").
func mentionMessageID(prompt string) string {
	lines := strings.Split(prompt, "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		l := strings.TrimPrefix(lines[i], "User: ")
		if !delivery.IsMentionLine(l) {
			continue
		}
		var p struct {
			MessageID string `json:"message_id"`
		}
		if json.Unmarshal([]byte(l), &p) == nil && p.MessageID != "" {
			return p.MessageID
		}
	}
	return ""
}
