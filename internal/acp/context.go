package acp

// ContextUsed is the context tokens session native had in use at the
// agent's last usage_update, 0 when it sent none. It takes the agent's
// lock only, never a session's: the pool's residency policy asks it
// under the pool's lock.
func (a *Agent) ContextUsed(native string) int64 {
	a.mu.Lock()
	r := a.routes[native]
	a.mu.Unlock()
	if r == nil {
		return 0
	}
	return r.inUse.Load()
}
