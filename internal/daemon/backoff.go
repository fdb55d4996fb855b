package daemon

import (
	"fmt"
	"time"

	"go.uber.org/zap"

	"github.com/residentd/residentd/internal/session"
)

// crashLoop is one run of consecutive failures: a binding's agent that
// cannot start (spawn, initialize, a session), or one key's process that
// keeps crashing mid-turn. Each backs off alone: a key that crashes does
// not hold up the binding's other channels.
type crashLoop struct {
	n     int
	until time.Time // no spawn before this
	last  string    // the last failure, for the error
}

// A crash loop's scope: the binding (`binding "b-x"`) or one key (`key
// "ch/b-x"`); the scope names it in errors and logs.
func bindingScope(binding string) string { return fmt.Sprintf("binding %q", binding) }
func keyScope(k session.Key) string      { return fmt.Sprintf("key %q", k.String()) }

// checkBackoff refuses a spawn for key k of binding while the binding's or
// the key's crash-loop backoff runs.
func (d *Daemon) checkBackoff(binding string, k session.Key) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, scope := range []string{bindingScope(binding), keyScope(k)} {
		cl := d.loops[scope]
		if cl == nil {
			continue
		}
		if wait := cl.until.Sub(d.now()); wait > 0 {
			return fmt.Errorf("%w: %s failed %d times in a row (last: %s); next start allowed in %s",
				ErrBackoff, scope, cl.n, cl.last, wait.Round(time.Millisecond))
		}
	}
	return nil
}

// spawnFailed records a failure in scope (bindingScope: the agent could
// not start; keyScope: the key's process crashed mid-turn). The first is
// retried at once; from the second on the scope backs off base, 2*base,
// ... up to the cap, so a broken agent is not respawned in a tight loop.
func (d *Daemon) spawnFailed(scope string, err error) {
	d.mu.Lock()
	cl := d.loops[scope]
	if cl == nil {
		cl = &crashLoop{}
		d.loops[scope] = cl
	}
	cl.n++
	cl.last = err.Error()
	if len(cl.last) > 300 {
		cl.last = cl.last[:300] + "…"
	}
	var wait time.Duration
	if cl.n >= 2 {
		wait = d.backoffCap
		if shift := cl.n - 2; shift < 30 {
			wait = min(d.backoffBase<<shift, d.backoffCap)
		}
	}
	cl.until = d.now().Add(wait)
	n := cl.n
	d.mu.Unlock()
	if wait > 0 {
		d.log.Warn("agent crash loop: backing off", zap.String("scope", scope), zap.Int("failures", n), zap.Duration("backoff", wait), zap.Error(err))
	}
}

// spawnOK ends the crash loops of binding and of key k after a
// successful turn.
func (d *Daemon) spawnOK(binding string, k session.Key) {
	d.mu.Lock()
	delete(d.loops, bindingScope(binding))
	delete(d.loops, keyScope(k))
	d.mu.Unlock()
}
