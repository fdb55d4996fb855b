package resident

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/residentd/residentd/internal/config"
)

// envValue is the value a child gets for name from env: the last one.
func envValue(env []string, name string) (string, bool) {
	v, ok := "", false
	for _, kv := range env {
		if len(kv) > len(name) && kv[:len(name)+1] == name+"=" {
			v, ok = kv[len(name)+1:], true
		}
	}
	return v, ok
}

// TestSpawnEnvAsksForTheCache: a claude-agent-acp binding's spawn is asked
// for the cache TTL its cache_ttl names (the 1-hour one by
// ENABLE_PROMPT_CACHING_1H, anything shorter by FORCE_PROMPT_CACHING_5M,
// each clearing the other), auto's choice is counted, an unset cache_ttl
// leaves the binding's env to say it, and the agent's own idle-compaction
// timer is put out of reach unless the binding leaves compaction to it.
// The built-in agent's env is left as it is.
func TestSpawnEnvAsksForTheCache(t *testing.T) {
	kp, _ := newKeeper(t, Options{})
	claude := func(ttl, compaction string, env map[string]string) config.Binding {
		return config.Binding{ID: "b-claude", Command: "/opt/bin/claude-agent-acp", CacheTTL: ttl, IdleCompaction: compaction, Env: env}
	}
	for _, tc := range []struct {
		name             string
		b                config.Binding
		enable1h, force5 string // "" with absent: not set
		delay            bool
		ttl              time.Duration
	}{
		{"1h", claude("1h", "", nil), "1", "", true, time.Hour},
		{"5m", claude("5m", "", map[string]string{"ENABLE_PROMPT_CACHING_1H": "1"}), "", "1", true, 5 * time.Minute},
		{"seconds", claude("3s", "", nil), "", "1", true, 3 * time.Second},
		{"unset, env 1h", claude("", "", map[string]string{"ENABLE_PROMPT_CACHING_1H": "1"}), "1", "-", true, time.Hour},
		{"auto, no returns yet", claude("auto", "", nil), "", "1", true, 5 * time.Minute},
		{"compaction agent", claude("", config.CompactAgent, nil), "-", "-", false, 5 * time.Minute},
		{"builtin", kp.conf().Bindings[0], "-", "-", false, 5 * time.Minute},
	} {
		t.Run(tc.name, func(t *testing.T) {
			spec, err := kp.agentSpec(tc.b)
			if err != nil {
				t.Fatal(err)
			}
			for name, want := range map[string]string{"ENABLE_PROMPT_CACHING_1H": tc.enable1h, "FORCE_PROMPT_CACHING_5M": tc.force5} {
				got, ok := envValue(spec.Env, name)
				if want == "-" && ok || want != "-" && got != want {
					t.Errorf("%s=%q (set %v), want %q; env %q", name, got, ok, want, spec.Env)
				}
			}
			if got, ok := envValue(spec.Env, "CLAUDE_AGENT_ACP_IDLE_COMPACT_DELAY_MS"); ok != tc.delay || ok && got != ttlEnvMax {
				t.Errorf("idle compaction delay %q (set %v), want set %v", got, ok, tc.delay)
			}
			if got := procResOf(tc.b, spec.Env).ttl; got != tc.ttl {
				t.Errorf("the process's cache TTL %v, want %v", got, tc.ttl)
			}
		})
	}
	if n := testutil.ToFloat64(kp.m.ResidencyDecisions.WithLabelValues("b-claude", "rule", "ttl_5m", "too few returns")); n != 1 {
		t.Fatalf("auto's choice counted %v times, want 1", n)
	}
}
