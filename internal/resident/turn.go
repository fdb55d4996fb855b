package resident

import (
	"context"
	"time"

	"go.uber.org/zap"

	"github.com/residentd/residentd/apitype"
	"github.com/residentd/residentd/internal/acp"
	"github.com/residentd/residentd/internal/config"
	"github.com/residentd/residentd/internal/delivery"
	"github.com/residentd/residentd/internal/lease"
	"github.com/residentd/residentd/internal/session"
)

// Prepared is what the keeper knows of a process that a turn's prompt
// depends on.
type Prepared struct {
	Pid int // the process's
	// BriefCount is the process's warm turns since the brief last went out
	// in full; BriefDue says it is due anyway (the agent compacted).
	BriefCount int
	BriefDue   bool
	// Facts is the key's facts JSON the process was last given (brief in
	// the framing): a warm turn says only when they changed.
	Facts string
	// Worktree is the key's worktree the session works in (a fact of the
	// key's), nil when it works in the binding's dir.
	Worktree *delivery.Worktree
	// Missed is how many of the newest stored turns the process's session
	// lacks: a set-aside session reopened, for its first turn to carry.
	Missed int
	// SystemPrompt: the session has the binding's framing (and a brief in
	// the framing) as its system prompt, so no turn carries it.
	SystemPrompt bool
}

// Prepare readies process p for a turn of key k: it takes what of binding b
// changed since its last turn (a config reload: the policy answering its
// permission requests, the brief), its session options are brought to what
// the key wants, and its mode to what the binding's permission policy
// needs (bounded by ctx, and by limit from now).
func (kp *Keeper) Prepare(ctx context.Context, limit time.Duration, k session.Key, b config.Binding, p *Process, log *zap.Logger) (Prepared, error) {
	if err := p.takeBinding(b); err != nil {
		return Prepared{}, err
	}
	bctx := bounded{parent: ctx, at: time.Now().Add(limit)}
	if err := kp.setOptions(bctx, p, b, k, kp.wantOptions(k, b), true, log); err != nil {
		return Prepared{}, err
	}
	// After the options: the policy's mode wins over a session option that
	// moved the same thing.
	if err := kp.applyPolicy(bctx, p, b, log); err != nil {
		return Prepared{}, err
	}
	kp.spareWanted(b.ID) // any turn keeps the binding's spares; a taken one is replaced now
	n, due, facts := p.Brief()
	return Prepared{Pid: p.Pid(), BriefCount: n, BriefDue: due, Facts: facts, Worktree: p.worktreeFact(), Missed: p.takeMissed(), SystemPrompt: p.a.SystemPromptTaken()}, nil
}

// Settlement is how a turn that reached the agent ended.
type Settlement struct {
	Result  acp.Result    // what the agent reported, also on failure
	Outcome lease.Outcome // the turn's outcome
	Err     error         // why it failed, nil on OutcomeOK
	// BriefCount and BriefSent are what the turn's compose decided of the
	// brief (lease.Output).
	BriefCount int
	BriefSent  bool
	Facts      string // the facts the turn gave the process (lease.Output)
}

// Settle is what the keeper tells the turn back.
type Settle struct {
	Usage apitype.Usage // what the turn used
	// SaveNative: the session is new and its id is to be saved with the
	// turn's commit (on OutcomeOK); on a failed commit call
	// Process.KeepUnsaved.
	SaveNative bool
}

// Settled records how a turn on process p ended: the brief count, the
// tool calls the agent reported (by outcome), the usage delta, a compaction (the next warm turn carries the full brief),
// and the binding's crash loop (a crash counts, a success ends it).
func (kp *Keeper) Settled(b config.Binding, p *Process, s Settlement, log *zap.Logger) Settle {
	p.BriefSent(s.BriefCount, s.BriefSent, s.Facts)
	for _, c := range s.Result.ToolCalls {
		kp.m.ToolCall(b.ID, c.Kind, c.Outcome())
	}
	u := p.turnUsage(b, s.Result)
	if s.Outcome == lease.OutcomeOK || u.Cost != nil {
		// A failed turn that reported nothing says nothing of the agent.
		kp.noteCost(b, p, u, s.Result.UsageFrom)
	}
	if s.Result.Compacted {
		p.compacted()
		kp.m.Compacted(b.ID)
		log.Info("agent compacted its history; the next warm turn carries the full brief", zap.String("native", p.native))
	}
	out := Settle{Usage: u}
	switch s.Outcome {
	case lease.OutcomeCrash:
		kp.keyCrashed(p.key, s.Err) // this key's process; the binding's others are fine
	case lease.OutcomeOK:
		kp.spawnOK(b.ID, p.key)
		out.SaveNative = p.TakeUnsaved()
	}
	return out
}

// SaveNative saves a new session's id after a turn that stored nothing, so
// a later process can still restore the session the agent keeps.
func (kp *Keeper) SaveNative(k session.Key, p *Process, log *zap.Logger) {
	if !p.TakeUnsaved() {
		return
	}
	if err := kp.st.SetNativeID(k, p.native); err != nil {
		p.KeepUnsaved()
		log.Error("save native session id failed", zap.String("native", p.native), zap.Error(err))
	}
}

// bounded is a context and a deadline that is made into a context only
// when a request needs it: most turns send none, and a deadline context is
// a timer and half a dozen allocations.
type bounded struct {
	parent context.Context
	at     time.Time
}

// context is b as a context; cancel releases it.
func (b bounded) context() (ctx context.Context, cancel context.CancelFunc) {
	return context.WithDeadline(b.parent, b.at)
}
