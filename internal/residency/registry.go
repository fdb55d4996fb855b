package residency

import (
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"
)

// Settings are what a policy named in the config is made with.
type Settings struct {
	// Idle is the daemon's idle_timeout: the timer's, and the longest a
	// cache-aware policy keeps a process whose cache has expired.
	Idle time.Duration
}

var (
	regMu    sync.RWMutex
	registry = map[string]func(Settings) Policy{
		"timer": func(s Settings) Policy { return Timer{Idle: s.Idle} },
		"cache": func(s Settings) Policy { return CacheFirst{Idle: s.Idle} },
	}
)

// Register makes a policy selectable by name (the daemon's residency
// setting, the sim). A name given twice panics: it is a bug.
func Register(name string, mk func(Settings) Policy) {
	regMu.Lock()
	defer regMu.Unlock()
	if _, dup := registry[name]; dup || name == "" {
		panic("residency: policy " + fmt.Sprintf("%q", name) + " registered twice or unnamed")
	}
	registry[name] = mk
}

// ByName makes the policy registered as name.
func ByName(name string, s Settings) (Policy, error) {
	regMu.RLock()
	mk, ok := registry[name]
	regMu.RUnlock()
	if !ok {
		return nil, fmt.Errorf("residency policy %q is not one of %s", name, strings.Join(Names(), ", "))
	}
	return mk(s), nil
}

// Names lists the registered policies, sorted.
func Names() []string {
	regMu.RLock()
	defer regMu.RUnlock()
	out := make([]string, 0, len(registry))
	for n := range registry {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}
