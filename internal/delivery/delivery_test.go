package delivery

import (
	"testing"

	"github.com/residentd/residentd/internal/session"
)

func TestBuildPrompt(t *testing.T) {
	tests := []struct {
		name string
		conv []session.Turn
		want string
	}{
		{"empty", nil, ""},
		{"only system and tool", []session.Turn{{Role: session.RoleSystem, Text: "framing"}, {Role: session.RoleTool, Text: "ls output"}}, ""},
		{"one user", []session.Turn{{Role: session.RoleUser, Text: "hi"}}, "User: hi"},
		{
			"user assistant user",
			[]session.Turn{{Role: session.RoleUser, Text: "a"}, {Role: session.RoleAssistant, Text: "b"}, {Role: session.RoleUser, Text: "c"}},
			"User: a\n\nAssistant: b\n\nUser: c",
		},
		{
			"system and tool skipped",
			[]session.Turn{{Role: session.RoleSystem, Text: "sys"}, {Role: session.RoleUser, Text: "a"}, {Role: session.RoleTool, Text: "t"}, {Role: session.RoleAssistant, Text: "b"}},
			"User: a\n\nAssistant: b",
		},
		{
			"multi-line keeps lines, prefix on first only",
			[]session.Turn{{Role: session.RoleUser, Text: "line1\nline2"}, {Role: session.RoleAssistant, Text: "x\n\ny"}},
			"User: line1\nline2\n\nAssistant: x\n\ny",
		},
		{"unknown role counts as user", []session.Turn{{Role: "human", Text: "q"}}, "User: q"},
		{"empty text kept", []session.Turn{{Role: session.RoleUser, Text: ""}, {Role: session.RoleAssistant, Text: "b"}}, "User: \n\nAssistant: b"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := BuildPrompt(tc.conv); got != tc.want {
				t.Errorf("BuildPrompt = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestLatestUserTurn(t *testing.T) {
	tests := []struct {
		name string
		conv []session.Turn
		want string
	}{
		{"empty", nil, ""},
		{"only non-user", []session.Turn{{Role: session.RoleSystem, Text: "s"}, {Role: session.RoleAssistant, Text: "a"}, {Role: session.RoleTool, Text: "t"}}, ""},
		{"last is user", []session.Turn{{Role: session.RoleUser, Text: "old"}, {Role: session.RoleAssistant, Text: "a"}, {Role: session.RoleUser, Text: "new"}}, "new"},
		{"assistant after user skipped", []session.Turn{{Role: session.RoleUser, Text: "q"}, {Role: session.RoleAssistant, Text: "a"}}, "q"},
		{"tool and system after user skipped", []session.Turn{{Role: session.RoleUser, Text: "q"}, {Role: session.RoleTool, Text: "t"}, {Role: session.RoleSystem, Text: "s"}}, "q"},
		{"unknown role counts as user", []session.Turn{{Role: session.RoleUser, Text: "q"}, {Role: "human", Text: "h"}, {Role: session.RoleAssistant, Text: "a"}}, "h"},
		{"multi-line returned whole", []session.Turn{{Role: session.RoleUser, Text: "a\nb"}}, "a\nb"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := LatestUserTurn(tc.conv); got != tc.want {
				t.Errorf("LatestUserTurn = %q, want %q", got, tc.want)
			}
		})
	}
}
