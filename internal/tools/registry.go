// Package tools owns the agent tools residentd serves over MCP
// (channel_history, channel_roster, project_activity) and the capability
// registry that scopes each agent process's tools to its own channel.
package tools

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"sync"
)

// Capability errors; the API answers both with 401.
var (
	ErrUnknownCapability = errors.New("unknown capability")
	ErrRevokedCapability = errors.New("revoked capability")
)

// maxRevoked bounds how many revoked tokens are remembered so a late call
// gets "revoked" instead of "unknown"; older ones fall back to "unknown".
const maxRevoked = 1024

// Scope is what a capability may read: one channel, and within it one
// thread ("" for the whole channel). The zero Scope is a capability not
// yet bound to a channel (IssueUnbound): it reads nothing.
type Scope struct {
	Channel string
	Thread  string
}

// Registry holds the live capabilities. It keeps only SHA-256 digests of
// tokens, so a memory dump does not hand them out. Safe for concurrent use.
type Registry struct {
	mu      sync.Mutex // nothing else is locked under it
	live    map[[32]byte]Scope
	revoked map[[32]byte]bool
	order   [][32]byte // revoked digests, oldest first
}

// NewRegistry returns an empty registry.
func NewRegistry() *Registry {
	return &Registry{live: map[[32]byte]Scope{}, revoked: map[[32]byte]bool{}}
}

// Issue returns a new random 256-bit token (64 hex characters) for s.
func (r *Registry) Issue(s Scope) (string, error) {
	if s.Channel == "" {
		return "", fmt.Errorf("tools: issue capability: channel must be set")
	}
	var raw [32]byte
	if _, err := rand.Read(raw[:]); err != nil {
		return "", fmt.Errorf("tools: issue capability for channel %q: %w", s.Channel, err)
	}
	token := hex.EncodeToString(raw[:])
	r.mu.Lock()
	r.live[sha256.Sum256([]byte(token))] = s
	r.mu.Unlock()
	return token, nil
}

// IssueUnbound returns a new token that reads nothing until Bind gives it
// a channel: a spare's session, opened before any turn named its key,
// carries one, so its MCP server is in place when a turn takes it.
func (r *Registry) IssueUnbound() (string, error) {
	var raw [32]byte
	if _, err := rand.Read(raw[:]); err != nil {
		return "", fmt.Errorf("tools: issue unbound capability: %w", err)
	}
	token := hex.EncodeToString(raw[:])
	r.mu.Lock()
	r.live[sha256.Sum256([]byte(token))] = Scope{}
	r.mu.Unlock()
	return token, nil
}

// ErrBound means Bind was asked to bind a token that is not live and
// unbound: revoked, unknown, or bound already (a token is bound once).
var ErrBound = errors.New("capability not live and unbound")

// Bind gives the unbound token its scope.
func (r *Registry) Bind(token string, s Scope) error {
	if s.Channel == "" {
		return fmt.Errorf("tools: bind capability: channel must be set")
	}
	h := sha256.Sum256([]byte(token))
	r.mu.Lock()
	defer r.mu.Unlock()
	if cur, ok := r.live[h]; !ok || cur != (Scope{}) {
		return fmt.Errorf("tools: bind capability to channel %q: %w", s.Channel, ErrBound)
	}
	r.live[h] = s
	return nil
}

// Revoke ends token; later checks fail with ErrRevokedCapability.
// Revoking twice, or an unknown token, does nothing.
func (r *Registry) Revoke(token string) {
	h := sha256.Sum256([]byte(token))
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.live[h]; !ok {
		return
	}
	delete(r.live, h)
	r.revoked[h] = true
	r.order = append(r.order, h)
	if len(r.order) > maxRevoked {
		delete(r.revoked, r.order[0])
		r.order = r.order[1:]
	}
}

// Scope returns the scope of a live token.
func (r *Registry) Scope(token string) (Scope, error) {
	h := sha256.Sum256([]byte(token))
	r.mu.Lock()
	defer r.mu.Unlock()
	if s, ok := r.live[h]; ok {
		if s == (Scope{}) {
			return Scope{}, fmt.Errorf("%w: it is not bound to a channel yet (a spare's session no turn has taken)", ErrUnknownCapability)
		}
		return s, nil
	}
	if r.revoked[h] {
		return Scope{}, fmt.Errorf("%w: the agent process it was issued to has exited; its MCP server must not be reused", ErrRevokedCapability)
	}
	return Scope{}, fmt.Errorf("%w: the daemon never issued it, or issued it before a restart", ErrUnknownCapability)
}

// Check is Scope in the shape the API server consumes.
func (r *Registry) Check(token string) (channelID, thread string, err error) {
	s, err := r.Scope(token)
	return s.Channel, s.Thread, err
}

// Live returns how many capabilities are live.
func (r *Registry) Live() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.live)
}
