package config

import (
	"encoding/json"
	"fmt"
	"slices"
)

// Who may answer a binding's permission and elicitation requests.
const (
	ApproversAny    = "any"    // whoever answers (the default)
	ApproversAuthor = "author" // the mention's author only (the turn request's author)
)

// Approvers is a binding's approvers: "any", "author", or a list of the
// chat's user ids, as the config file writes it.
type Approvers struct {
	Mode  string   // ApproversAny, ApproversAuthor, or "" with Users
	Users []string // the user ids allowed, when the file gave a list
}

// UnmarshalJSON reads "any", "author" or a list of user ids.
func (a *Approvers) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err == nil {
		if s != ApproversAny && s != ApproversAuthor {
			return fmt.Errorf("approvers %q: use any, author or a list of user ids", s)
		}
		*a = Approvers{Mode: s}
		return nil
	}
	var users []string
	if err := json.Unmarshal(b, &users); err != nil || len(users) == 0 {
		return fmt.Errorf("approvers: use any, author or a non-empty list of user ids")
	}
	*a = Approvers{Users: users}
	return nil
}

// MarshalJSON writes what UnmarshalJSON reads.
func (a Approvers) MarshalJSON() ([]byte, error) {
	if a.Users != nil {
		return json.Marshal(a.Users)
	}
	if a.Mode == "" {
		return json.Marshal(ApproversAny)
	}
	return json.Marshal(a.Mode)
}

// IsZero makes omitzero leave the default out.
func (a Approvers) IsZero() bool { return a.Users == nil && (a.Mode == "" || a.Mode == ApproversAny) }

// Allows reports whether user (the answer's answered_by, "" when it named
// nobody) may answer a request of a run whose mention author wrote.
func (a Approvers) Allows(user, author string) bool {
	switch {
	case a.Users != nil:
		return user != "" && slices.Contains(a.Users, user)
	case a.Mode == ApproversAuthor:
		return user != "" && user == author
	}
	return true
}

// String names the rule for an error message.
func (a Approvers) String() string {
	if a.Users != nil {
		return fmt.Sprintf("%q", a.Users)
	}
	if a.Mode == "" {
		return ApproversAny
	}
	return a.Mode
}
