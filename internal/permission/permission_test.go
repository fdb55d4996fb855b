package permission

import (
	"errors"
	"testing"
)

func TestParse(t *testing.T) {
	for _, tt := range []struct {
		in   string
		want Policy
		err  bool
	}{
		{"", Deny, false}, {"deny", Deny, false}, {"read-only", ReadOnly, false}, {"allow", Allow, false},
		{"ask", Ask, false}, {"read-only+ask", ReadOnlyAsk, false},
		{"yolo", "", true}, {"Allow", "", true}, {"allow+ask", "", true},
	} {
		got, err := Parse(tt.in)
		if (err != nil) != tt.err || got != tt.want {
			t.Errorf("Parse(%q) = %q, %v; want %q, err %v", tt.in, got, err, tt.want, tt.err)
		}
		if err != nil && !errors.Is(err, ErrBadPolicy) {
			t.Errorf("Parse(%q) error %v does not wrap ErrBadPolicy", tt.in, err)
		}
	}
}

func TestDecide(t *testing.T) {
	kinds := []string{"read", "search", "fetch", "think", "edit", "execute", "delete", "move", "other", ""}
	reads := map[string]bool{"read": true, "search": true, "fetch": true, "think": true}
	for _, tt := range []struct {
		p    Policy
		want func(kind string) Decision
	}{
		{Deny, func(string) Decision { return Reject }},
		{ReadOnly, func(k string) Decision {
			if reads[k] {
				return Grant
			}
			return Reject
		}},
		{Allow, func(string) Decision { return Grant }},
		{Ask, func(string) Decision { return AskPerson }},
		{ReadOnlyAsk, func(k string) Decision {
			if reads[k] {
				return Grant
			}
			return AskPerson
		}},
	} {
		for _, k := range kinds {
			if got := tt.p.Decide(k); got != tt.want(k) {
				t.Errorf("%s.Decide(%q) = %v, want %v", tt.p, k, got, tt.want(k))
			}
		}
		// Outside the working directory a read is no read-only grant.
		for _, k := range kinds {
			want := tt.want(k)
			if want == Grant && tt.p != Allow {
				want = map[Policy]Decision{ReadOnly: Reject, ReadOnlyAsk: AskPerson}[tt.p]
			}
			if got := tt.p.DecideAt(k, false); got != want {
				t.Errorf("%s.DecideAt(%q, outside) = %v, want %v", tt.p, k, got, want)
			}
		}
		if tt.p.Asks() != (tt.p == Ask || tt.p == ReadOnlyAsk) {
			t.Errorf("%s.Asks() = %v", tt.p, tt.p.Asks())
		}
	}
	if Deny.AllowsFiles() || ReadOnly.AllowsFiles() || !Allow.AllowsFiles() {
		t.Error("only allow may write files")
	}
}

func TestPick(t *testing.T) {
	all := []Option{{"aa", "Always", AllowAlways}, {"ao", "Once", AllowOnce}, {"ra", "Never", RejectAlways}, {"ro", "No", RejectOnce}}
	for _, tt := range []struct {
		name  string
		opts  []Option
		allow bool
		want  string
		ok    bool
	}{
		{"allow prefers once", all, true, "ao", true},
		{"reject prefers once", all, false, "ro", true},
		{"allow falls back to always", all[:1], true, "aa", true},
		{"reject falls back to always", all[2:3], false, "ra", true},
		{"no allow option", all[2:], true, "", false},
		{"no reject option", all[:2], false, "", false},
		{"none offered", nil, true, "", false},
	} {
		got, ok := Pick(tt.opts, tt.allow)
		if ok != tt.ok || got.ID != tt.want {
			t.Errorf("%s: Pick = %q, %v; want %q, %v", tt.name, got.ID, ok, tt.want, tt.ok)
		}
	}
}
