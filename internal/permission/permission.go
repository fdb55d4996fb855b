// Package permission owns how an agent's permission requests are answered:
// the binding policies, which tool kinds each allows, and which of the
// agent's own options carries the answer.
package permission

import (
	"errors"
	"fmt"
)

// Policy is a binding's rule for the agent's session/request_permission.
type Policy string

// Policies.
const (
	Deny        Policy = "deny"          // reject every tool permission (the default)
	ReadOnly    Policy = "read-only"     // allow read, search, fetch and think; reject the rest
	Allow       Policy = "allow"         // allow everything
	Ask         Policy = "ask"           // ask a person about everything
	ReadOnlyAsk Policy = "read-only+ask" // allow read, search, fetch and think; ask a person about the rest
)

// Policies lists every policy, in the order the docs give them.
var Policies = []Policy{Deny, ReadOnly, Allow, Ask, ReadOnlyAsk}

// ErrBadPolicy classifies a policy name that is not one of Policies.
var ErrBadPolicy = errors.New("unknown permission policy")

// Parse reads a policy name; "" is Deny.
func Parse(s string) (Policy, error) {
	if s == "" {
		return Deny, nil
	}
	p := Policy(s)
	if err := p.Check(); err != nil {
		return "", err
	}
	return p, nil
}

// Check reports a policy that is not one of Policies.
func (p Policy) Check() error {
	for _, q := range Policies {
		if p == q {
			return nil
		}
	}
	return fmt.Errorf("%w %q: use deny, read-only, allow, ask or read-only+ask", ErrBadPolicy, string(p))
}

// AllowsFiles reports whether the agent may write files (fs/write_text_file).
func (p Policy) AllowsFiles() bool { return p == Allow }

// readKinds are the ACP tool kinds that only look.
var readKinds = map[string]bool{"read": true, "search": true, "fetch": true, "think": true}

// Decision is what a policy does with one request.
type Decision int

const (
	Reject    Decision = iota // answer with a reject option
	Grant                     // answer with an allow option
	AskPerson                 // put the request to a person and wait
)

// Decide says what the policy does with a tool call of ACP kind kind (""
// when the agent named none) whose locations are all inside the agent's
// working directory.
func (p Policy) Decide(kind string) Decision { return p.DecideAt(kind, true) }

// DecideAt is Decide for a tool call whose locations are all inside the
// working directory, or not (inside false): the read-only policies allow
// reads only inside it; one outside is rejected (read-only) or put to a
// person (read-only+ask).
func (p Policy) DecideAt(kind string, inside bool) Decision {
	switch {
	case p == Allow, (p == ReadOnly || p == ReadOnlyAsk) && readKinds[kind] && inside:
		return Grant
	case p == Ask, p == ReadOnlyAsk:
		return AskPerson
	}
	return Reject
}

// Asks reports whether the policy may put a request to a person.
func (p Policy) Asks() bool { return p == Ask || p == ReadOnlyAsk }

// Option kinds, as ACP names them.
const (
	AllowOnce    = "allow_once"
	AllowAlways  = "allow_always"
	RejectOnce   = "reject_once"
	RejectAlways = "reject_always"
)

// Option is one of the choices an agent offers with a permission request.
type Option struct {
	ID   string
	Name string
	Kind string // AllowOnce, AllowAlways, RejectOnce or RejectAlways
}

// Pick returns the option that carries allow (or reject): a once option
// before an always option, so no automatic answer outlives the turn. ok is
// false when the agent offered no option of that sense; the request is
// then answered as cancelled.
func Pick(options []Option, allow bool) (Option, bool) {
	prefs := []string{RejectOnce, RejectAlways}
	if allow {
		prefs = []string{AllowOnce, AllowAlways}
	}
	for _, kind := range prefs {
		for _, o := range options {
			if o.Kind == kind {
				return o, true
			}
		}
	}
	return Option{}, false
}
