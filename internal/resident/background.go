package resident

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.uber.org/zap"

	"github.com/residentd/residentd/apitype"
	"github.com/residentd/residentd/internal/session"
)

// ErrNoProcess: the key has no live agent process (nothing runs in its
// background).
var ErrNoProcess = errors.New("the key has no live agent process")

// cancelWait bounds how long a background item's cancel waits for the
// agent's answer.
const cancelWait = 30 * time.Second

// background fills in the sessions listing what an ACP v2 agent reports of
// p's session: its work state and the work it lists as still running.
func (p *Process) background(ses *apitype.Session) {
	items, state := p.a.Background(p.native)
	ses.AgentState = state
	for _, it := range items {
		ses.Background = append(ses.Background, apitype.BackgroundItem{Type: it.Type, ID: it.ID, Cancelable: it.Cancelable})
	}
}

// CancelBackground asks the agent of key k's live process to cancel item
// (a terminal or a tool call its session lists as still running, which the
// agent lets be cancelled on its own). It returns once the agent answered;
// the item leaves the list when the agent reports it ended.
func (kp *Keeper) CancelBackground(k session.Key, typ, item string) (apitype.BackgroundCancelResponse, error) {
	if _, ok := kp.conf().Binding(k.Binding); !ok {
		return apitype.BackgroundCancelResponse{}, fmt.Errorf("%w %q", ErrUnknownBinding, k.Binding)
	}
	var p *Process
	kp.procs.Range(func(_, v any) bool {
		if x := v.(*Process); x.key == k {
			p = x
		}
		return p == nil
	})
	if p == nil {
		return apitype.BackgroundCancelResponse{}, fmt.Errorf("cancel %s %q of %s: %w", typ, item, k, ErrNoProcess)
	}
	ctx, cancel := context.WithTimeout(context.Background(), cancelWait)
	defer cancel()
	if err := p.a.CancelBackground(ctx, p.native, typ, item); err != nil {
		return apitype.BackgroundCancelResponse{}, fmt.Errorf("cancel %s %q of %s: %w", typ, item, k, err)
	}
	p.between.log.Info("background item cancelled at the API's request", zap.String("type", typ), zap.String("item", item), zap.String("native", p.native))
	return apitype.BackgroundCancelResponse{Native: p.native, Type: typ, Item: item}, nil
}
