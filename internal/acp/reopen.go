package acp

import (
	"context"
	"errors"

	sdk "github.com/coder/acp-go-sdk"
)

// ErrUnknownSession: the agent answered session/resume or session/load
// that it does not know the session (ACP's -32002, resource not found,
// naming no other session). Matched along with ErrProtocol.
var ErrUnknownSession = errors.New("agent does not know the session")

// codeResourceNotFound is ACP's error code for a resource, a session
// among them, that does not exist.
const codeResourceNotFound = -32002

type progressKey struct{}

// WithProgress makes a session/resume or session/load sent under ctx call
// f for every update the agent sends for the session while the request
// runs (each message a load replays, anything a resume reports): the sign
// that the agent is working on it. f runs on the agent's reader, under the
// session's route: it must not block, nor call the Agent.
func WithProgress(ctx context.Context, f func()) context.Context {
	return context.WithValue(ctx, progressKey{}, f)
}

func progressOf(ctx context.Context) func() {
	f, _ := ctx.Value(progressKey{}).(func())
	return f
}

// unknownSession reports whether err, the agent's answer to a reopen of
// native, says it does not know that session.
func unknownSession(err error, native string) bool {
	var re *sdk.RequestError
	if !errors.As(err, &re) || re.Code != codeResourceNotFound {
		return false
	}
	// ACP names the session in data.sessionId; the SDKs' older helper puts
	// a resource in data.uri. Another name is another resource.
	if m, ok := re.Data.(map[string]any); ok {
		for _, field := range []string{"sessionId", "uri"} {
			if s, ok := m[field].(string); ok && s != native {
				return false
			}
		}
	}
	return true
}
