package resident

import (
	"fmt"
	"time"

	"go.uber.org/zap"

	"github.com/residentd/residentd/internal/session"
)

// A crash loop backs off where it happens: a binding whose agent cannot
// start (spawn, initialize, a session, a restore that kills it) as a
// whole; a key whose process keeps crashing mid-turn alone, so the
// binding's other channels go on.

// keyLoop is one key's run of mid-turn crashes.
type keyLoop struct {
	crash streak
	until time.Time // no spawn for the key before this
}

// checkBackoff refuses a spawn for key k of binding while the binding's or
// the key's crash-loop backoff runs.
func (kp *Keeper) checkBackoff(binding string, k session.Key) error {
	kp.mu.Lock()
	defer kp.mu.Unlock()
	check := func(scope string, s streak, until time.Time) error {
		if s.n == 0 {
			return nil
		}
		if wait := until.Sub(kp.now()); wait > 0 {
			last := s.last
			if len(last) > 300 {
				last = last[:300] + "…"
			}
			return fmt.Errorf("%w: %s failed %d times in a row (last: %s); next start allowed in %s",
				ErrBackoff, scope, s.n, last, wait.Round(time.Millisecond))
		}
		return nil
	}
	if h := kp.health[binding]; h != nil {
		if err := check(fmt.Sprintf("binding %q", binding), h.crash, h.until); err != nil {
			return err
		}
	}
	if l := kp.keyLoops[k]; l != nil {
		return check(fmt.Sprintf("key %q", k.String()), l.crash, l.until)
	}
	return nil
}

// backoff is the wait after the n-th failure in a row: none for the
// first, then base, 2*base, ... up to the cap, so a broken agent is not
// respawned in a tight loop.
func (kp *Keeper) backoff(n int) time.Duration {
	if n < 2 {
		return 0
	}
	if shift := n - 2; shift < 30 {
		return min(kp.backoffBase<<shift, kp.backoffCap)
	}
	return kp.backoffCap
}

// spawnFailed records a spawn failure of binding: its agent could not
// start.
func (kp *Keeper) spawnFailed(binding string, err error) {
	kp.mu.Lock()
	h := kp.of(binding)
	n := h.crash.fail(err)
	wait := kp.backoff(n)
	h.until = kp.now().Add(wait)
	kp.mu.Unlock()
	if wait > 0 {
		kp.log.Warn("agent crash loop: backing off", zap.String("binding", binding), zap.Int("failures", n), zap.Duration("backoff", wait), zap.Error(err))
	}
}

// keyCrashed records a mid-turn crash of key k's process: the key backs
// off alone.
func (kp *Keeper) keyCrashed(k session.Key, err error) {
	kp.mu.Lock()
	l := kp.keyLoops[k]
	if l == nil {
		l = &keyLoop{}
		kp.keyLoops[k] = l
	}
	n := l.crash.fail(err)
	wait := kp.backoff(n)
	l.until = kp.now().Add(wait)
	kp.mu.Unlock()
	if wait > 0 {
		kp.log.Warn("agent crash loop: backing off", zap.String("key", k.String()), zap.Int("failures", n), zap.Duration("backoff", wait), zap.Error(err))
	}
}

// spawnOK ends the crash loops of binding and of key k after a successful
// turn.
func (kp *Keeper) spawnOK(binding string, k session.Key) {
	kp.mu.Lock()
	if h := kp.health[binding]; h != nil {
		h.crash.ok()
		h.until = time.Time{}
	}
	delete(kp.keyLoops, k)
	kp.mu.Unlock()
}
