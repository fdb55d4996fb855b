package delivery

import "testing"

func TestBuildPrompt(t *testing.T) {
	tests := []struct {
		name string
		conv []Turn
		want string
	}{
		{"empty", nil, ""},
		{"only system and tool", []Turn{{RoleSystem, "framing"}, {RoleTool, "ls output"}}, ""},
		{"one user", []Turn{{RoleUser, "hi"}}, "User: hi"},
		{
			"user assistant user",
			[]Turn{{RoleUser, "a"}, {RoleAssistant, "b"}, {RoleUser, "c"}},
			"User: a\n\nAssistant: b\n\nUser: c",
		},
		{
			"system and tool skipped",
			[]Turn{{RoleSystem, "sys"}, {RoleUser, "a"}, {RoleTool, "t"}, {RoleAssistant, "b"}},
			"User: a\n\nAssistant: b",
		},
		{
			"multi-line keeps lines, prefix on first only",
			[]Turn{{RoleUser, "line1\nline2"}, {RoleAssistant, "x\n\ny"}},
			"User: line1\nline2\n\nAssistant: x\n\ny",
		},
		{"unknown role counts as user", []Turn{{"human", "q"}}, "User: q"},
		{"empty text kept", []Turn{{RoleUser, ""}, {RoleAssistant, "b"}}, "User: \n\nAssistant: b"},
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
		conv []Turn
		want string
	}{
		{"empty", nil, ""},
		{"only non-user", []Turn{{RoleSystem, "s"}, {RoleAssistant, "a"}, {RoleTool, "t"}}, ""},
		{"last is user", []Turn{{RoleUser, "old"}, {RoleAssistant, "a"}, {RoleUser, "new"}}, "new"},
		{"assistant after user skipped", []Turn{{RoleUser, "q"}, {RoleAssistant, "a"}}, "q"},
		{"tool and system after user skipped", []Turn{{RoleUser, "q"}, {RoleTool, "t"}, {RoleSystem, "s"}}, "q"},
		{"unknown role counts as user", []Turn{{RoleUser, "q"}, {"human", "h"}, {RoleAssistant, "a"}}, "h"},
		{"multi-line returned whole", []Turn{{RoleUser, "a\nb"}}, "a\nb"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := LatestUserTurn(tc.conv); got != tc.want {
				t.Errorf("LatestUserTurn = %q, want %q", got, tc.want)
			}
		})
	}
}
