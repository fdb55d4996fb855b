package resident

import (
	"fmt"
	"time"

	"go.uber.org/zap"
)

// checkBackoff refuses a spawn of binding while its crash-loop backoff runs.
func (d *Keeper) checkBackoff(binding string) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	h := d.health[binding]
	if h == nil || h.crash.n == 0 {
		return nil
	}
	if wait := h.until.Sub(d.now()); wait > 0 {
		last := h.crash.last
		if len(last) > 300 {
			last = last[:300] + "…"
		}
		return fmt.Errorf("%w: binding %q failed %d times in a row (last: %s); next start allowed in %s",
			ErrBackoff, binding, h.crash.n, last, wait.Round(time.Millisecond))
	}
	return nil
}

// spawnFailed records a spawn failure or crash of binding. The first is
// retried at once; from the second on the binding backs off base, 2*base,
// ... up to the cap, so a broken agent is not respawned in a tight loop.
func (d *Keeper) spawnFailed(binding string, err error) {
	d.mu.Lock()
	h := d.of(binding)
	n := h.crash.fail(err)
	var wait time.Duration
	if n >= 2 {
		wait = d.backoffCap
		if shift := n - 2; shift < 30 {
			wait = min(d.backoffBase<<shift, d.backoffCap)
		}
	}
	h.until = d.now().Add(wait)
	d.mu.Unlock()
	if wait > 0 {
		d.log.Warn("agent crash loop: backing off", zap.String("binding", binding), zap.Int("failures", n), zap.Duration("backoff", wait), zap.Error(err))
	}
}

// spawnOK ends binding's crash loop after a successful turn.
func (d *Keeper) spawnOK(binding string) {
	d.mu.Lock()
	if h := d.health[binding]; h != nil {
		h.crash.ok()
		h.until = time.Time{}
	}
	d.mu.Unlock()
}
