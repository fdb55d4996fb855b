package session

import (
	"errors"
	"testing"
)

func TestKeyString(t *testing.T) {
	for _, tt := range []struct {
		k    Key
		want string
	}{
		{Key{Channel: "ch-backend", Binding: "b-claude"}, "ch-backend/b-claude"},
		{Key{Channel: "team/backend", Binding: "b-1"}, "team/backend/b-1"},
	} {
		if got := tt.k.String(); got != tt.want {
			t.Errorf("%#v.String() = %q, want %q", tt.k, got, tt.want)
		}
		back, err := ParseKey(tt.want)
		if err != nil || back != tt.k {
			t.Errorf("ParseKey(%q) = %#v, %v; want %#v", tt.want, back, err, tt.k)
		}
	}
	for _, bad := range []string{"", "no-slash", "/b", "ch/"} {
		if _, err := ParseKey(bad); !errors.Is(err, ErrBadKey) {
			t.Errorf("ParseKey(%q) error = %v, want ErrBadKey", bad, err)
		}
	}
	th := Key{Channel: "ch", Binding: "b", Thread: "m1/x"}
	if th.String() != "ch/b#m1/x" || th.Main() != (Key{Channel: "ch", Binding: "b"}) {
		t.Errorf("thread key: String %q, Main %#v", th.String(), th.Main())
	}
	if err := (Key{Channel: "ch"}).Check(); !errors.Is(err, ErrBadKey) {
		t.Errorf("a key without binding passed Check: %v", err)
	}
}

func TestRoleStored(t *testing.T) {
	for r, want := range map[Role]bool{RoleUser: true, RoleAssistant: true, RoleSystem: false, RoleTool: false, "human": false} {
		if r.Stored() != want {
			t.Errorf("%q.Stored() = %v, want %v", r, r.Stored(), want)
		}
	}
}
