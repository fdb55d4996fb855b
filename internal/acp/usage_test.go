package acp

import (
	"context"
	"testing"
)

// TestUsageWhereverReported: a turn's tokens are read from the prompt
// response's usage with its cache and thought counts (--usage detail, as
// codex-acp 2.6 reports them), from its _meta.quota.token_count when it
// has no usage (--usage meta, codex-acp's older shape), summed from each
// model call's usage_update (--usage detail with [[calls:2]]), and a turn
// that reports none says so.
func TestUsageWhereverReported(t *testing.T) {
	const prompt = "0123456789abcdef0123456789abcdef" // 32 bytes: 8 tokens in
	for _, tt := range []struct {
		usage, directive string
		from             string
		want             func(in, out int64) *Usage
	}{
		{"detail", "", UsageFromResponse, func(in, out int64) *Usage {
			return &Usage{InputTokens: in, OutputTokens: out, CacheReadTokens: 2 * in, CacheWriteTokens: in / 2, ThoughtTokens: out / 2}
		}},
		{"meta", "", UsageFromMeta, func(in, out int64) *Usage {
			return &Usage{InputTokens: in, OutputTokens: out, CacheReadTokens: 2 * in, ThoughtTokens: out / 2}
		}},
		{"detail", " [[calls:2]]", UsageFromUpdates, func(in, out int64) *Usage {
			return &Usage{InputTokens: 2 * in, OutputTokens: 2 * out, CacheReadTokens: 4 * in, CacheWriteTokens: 2 * (in / 2), ThoughtTokens: 2 * (out / 2)}
		}},
		{"none", "", UsageFromNone, func(in, out int64) *Usage { return nil }},
	} {
		t.Run(tt.usage+tt.directive, func(t *testing.T) {
			a := start(t, builtinSpec(t, "--usage", tt.usage))
			text := prompt + tt.directive
			res, err := a.Prompt(context.Background(), newSession(t, a), text, nil)
			if err != nil {
				t.Fatalf("Prompt: %v", err)
			}
			in, out := int64(len(text)/4), int64(len(res.Text)/4)
			want := tt.want(in, out)
			if res.UsageFrom != tt.from || (res.Usage == nil) != (want == nil) || want != nil && *res.Usage != *want {
				t.Fatalf("usage %+v from %q, want %+v from %q", res.Usage, res.UsageFrom, want, tt.from)
			}
		})
	}
}
