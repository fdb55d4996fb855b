package daemon

import (
	"fmt"
	"time"

	"go.uber.org/zap"
)

// crashLoop is one binding's run of consecutive spawn failures and crashes.
type crashLoop struct {
	n     int
	until time.Time // no spawn before this
	last  string    // the last failure, for the error
}

// checkBackoff refuses a spawn of binding while its crash-loop backoff runs.
func (d *Daemon) checkBackoff(binding string) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	cl := d.loops[binding]
	if cl == nil {
		return nil
	}
	if wait := cl.until.Sub(d.now()); wait > 0 {
		return fmt.Errorf("%w: binding %q failed %d times in a row (last: %s); next start allowed in %s",
			ErrBackoff, binding, cl.n, cl.last, wait.Round(time.Millisecond))
	}
	return nil
}

// spawnFailed records a spawn failure or crash of binding. The first is
// retried at once; from the second on the binding backs off base, 2*base,
// ... up to the cap, so a broken agent is not respawned in a tight loop.
func (d *Daemon) spawnFailed(binding string, err error) {
	d.mu.Lock()
	cl := d.loops[binding]
	if cl == nil {
		cl = &crashLoop{}
		d.loops[binding] = cl
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
		d.log.Warn("agent crash loop: backing off", zap.String("binding", binding), zap.Int("failures", n), zap.Duration("backoff", wait), zap.Error(err))
	}
}

// spawnOK ends binding's crash loop after a successful turn.
func (d *Daemon) spawnOK(binding string) {
	d.mu.Lock()
	delete(d.loops, binding)
	d.mu.Unlock()
}
