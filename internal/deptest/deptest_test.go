package deptest

import "testing"

func TestBadPatterns(t *testing.T) {
	c := DepChecker{
		BadDeps: map[string]string{
			Module + "/...":              "ours",
			"go.uber.org/zap":            "zap",
			Module + "/internal/child/x": "exact",
		},
		GoodDeps: []string{Module + "/internal/session"},
	}
	for dep, want := range map[string]string{
		Module:                              "ours",
		Module + "/internal/acp":            "ours",
		Module + "/internal/session":        "",
		Module + "/internal/session/sub":    "ours",
		Module + "/internal/child/x":        "exact",
		Module + "extra/internal/acp":       "",
		"go.uber.org/zap":                   "zap",
		"go.uber.org/zap/zapcore":           "",
		"github.com/residentd/residentdx/a": "",
	} {
		if why, _ := c.bad(dep); why != want {
			t.Errorf("bad(%q) = %q, want %q", dep, why, want)
		}
	}

	std := DepChecker{NonStd: "std", GoodDeps: []string{Module + "/apitype"}}
	for dep, want := range map[string]string{
		"net/http":                     "",
		"vendor/golang.org/x/net/idna": "",
		Module + "/apitype":            "",
		Module + "/internal/store":     "std",
		"go.etcd.io/bbolt":             "std",
		"golang.org/x/sys/unix":        "std",
	} {
		if why, _ := std.bad(dep); why != want {
			t.Errorf("NonStd: bad(%q) = %q, want %q", dep, why, want)
		}
	}
}
