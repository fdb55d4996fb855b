package agent

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	acp "github.com/coder/acp-go-sdk"
)

// The built-in agent's session modes, as coding agents list permission
// modes: in auto (the default) it runs its own tools ([[tool:KIND]]) without
// asking, as claude-agent-acp runs the commands it judges safe; in manual
// it asks the client before each one. A client that wants every tool call
// to reach it sets manual.
const (
	modeAuto   = "auto"
	modeManual = "manual"
)

// manual is the id of the mode in which the agent asks before each tool
// call: "manual", or --ask-mode's name (an agent it announces itself as
// names it so: claude-agent-acp's is "default").
func (b *builtin) manual() string {
	if b.opts.askMode != "" {
		return b.opts.askMode
	}
	return modeManual
}

// modes lists s's modes; none with --no-modes.
func (b *builtin) modes(s *session) *acp.SessionModeState {
	if b.opts.noModes {
		return nil
	}
	b.mu.Lock()
	cur := s.mode
	b.mu.Unlock()
	autoDesc, manualDesc := "runs its tools without asking", "asks before every tool call"
	return &acp.SessionModeState{CurrentModeId: acp.SessionModeId(cur), AvailableModes: []acp.SessionMode{
		{Id: modeAuto, Name: "Auto", Description: &autoDesc},
		{Id: acp.SessionModeId(b.manual()), Name: "Manual", Description: &manualDesc},
	}}
}

func (b *builtin) SetSessionMode(ctx context.Context, p acp.SetSessionModeRequest) (acp.SetSessionModeResponse, error) {
	if b.opts.noModes {
		return acp.SetSessionModeResponse{}, &acp.RequestError{Code: -32602, Message: "builtin: this agent lists no session modes (--no-modes)"}
	}
	m := string(p.ModeId)
	if m != modeAuto && m != b.manual() {
		return acp.SetSessionModeResponse{}, &acp.RequestError{Code: -32602, Message: fmt.Sprintf("builtin: unknown mode %q: %s or %s", m, modeAuto, b.manual())}
	}
	b.mu.Lock()
	s, ok := b.sessions[string(p.SessionId)]
	if ok {
		s.mode = m
	}
	b.mu.Unlock()
	if !ok {
		return acp.SetSessionModeResponse{}, &acp.RequestError{Code: -32602, Message: fmt.Sprintf("builtin: unknown session %q", p.SessionId)}
	}
	return acp.SetSessionModeResponse{}, nil
}

// runTool runs the n-th [[tool:KIND(:PATH)]] directive of a turn: it
// reports the tool call, asks first in manual mode, and runs it when not
// refused. Running a read (with PATH) reads the file itself, not through
// the client, as real agents' own tools do; running any other kind leaves
// the file builtin-tool-KIND-N in the session's cwd, so a test sees the
// effect. The thought says "tool KIND ran" or "tool KIND refused". It
// reports false when a permission request for the call was not allowed.
func (b *builtin) runTool(ctx context.Context, id string, n int, kind, path string) bool {
	b.mu.Lock()
	s := b.sessions[id]
	mode, cwd := s.mode, s.Cwd
	b.mu.Unlock()
	callID := acp.ToolCallId(fmt.Sprintf("tool-%d", n))
	title := "builtin " + kind + " tool"
	var locs []acp.ToolCallLocation
	if path != "" {
		locs = []acp.ToolCallLocation{{Path: path}}
	}
	_ = b.send(ctx, id, acp.SessionUpdate{ToolCall: &acp.SessionUpdateToolCall{
		SessionUpdate: "tool_call", ToolCallId: callID, Title: title, Kind: acp.ToolKind(kind), Status: acp.ToolCallStatusPending, Locations: locs}})
	done := func(status acp.ToolCallStatus, thought, result string, err error) {
		if err != nil {
			status = acp.ToolCallStatusFailed
		}
		_ = b.send(ctx, id, acp.SessionUpdate{ToolCallUpdate: &acp.SessionToolCallUpdate{
			SessionUpdate: "tool_call_update", ToolCallId: callID, Status: &status}})
		b.thought(ctx, id, thought, result, err)
	}
	if slices.Contains(strings.Split(b.opts.denyTools, ","), kind) {
		// Taken away by its own rules, as claude-agent-acp's deny rules
		// take a tool away: nothing is asked, and the call fails saying
		// the tool does not exist.
		failed := acp.ToolCallStatusFailed
		_ = b.send(ctx, id, acp.SessionUpdate{ToolCallUpdate: &acp.SessionToolCallUpdate{
			SessionUpdate: "tool_call_update", ToolCallId: callID, Status: &failed,
			Content: []acp.ToolCallContent{acp.ToolContent(acp.TextBlock("<tool_use_error>Error: No such tool available: " + title + "</tool_use_error>"))}}})
		b.thought(ctx, id, "tool "+kind+" unavailable", "", nil)
		return true
	}
	if mode == b.manual() {
		k := acp.ToolKind(kind)
		resp, err := b.conn.RequestPermission(ctx, acp.RequestPermissionRequest{
			SessionId: acp.SessionId(id),
			ToolCall:  acp.ToolCallUpdate{ToolCallId: callID, Title: &title, Kind: &k, Locations: locs},
			Options: []acp.PermissionOption{
				{OptionId: "allow", Name: "Allow", Kind: acp.PermissionOptionKindAllowOnce},
				{OptionId: "reject", Name: "Reject", Kind: acp.PermissionOptionKindRejectOnce},
			},
		})
		if err != nil || resp.Outcome.Selected == nil || resp.Outcome.Selected.OptionId != "allow" {
			done(acp.ToolCallStatusFailed, "tool "+kind+" refused", "", err)
			return false
		}
	}
	if kind == string(acp.ToolKindRead) && path != "" {
		data, err := os.ReadFile(path)
		done(acp.ToolCallStatusCompleted, "tool "+kind+" ran", string(data), err)
		return true
	}
	err := os.WriteFile(filepath.Join(cwd, fmt.Sprintf("builtin-tool-%s-%d", kind, n)), []byte(mode+"\n"), 0o644)
	done(acp.ToolCallStatusCompleted, "tool "+kind+" ran", "", err)
	return true
}

// switchMode moves session id to mode by the agent's own choice and tells
// the client (current_mode_update).
func (b *builtin) switchMode(ctx context.Context, id, mode string) {
	if mode != modeAuto && mode != b.manual() {
		b.thought(ctx, id, "switch-mode "+mode, "", fmt.Errorf("unknown mode: %s or %s", modeAuto, b.manual()))
		return
	}
	b.mu.Lock()
	b.sessions[id].mode = mode
	b.mu.Unlock()
	_ = b.send(ctx, id, acp.SessionUpdate{CurrentModeUpdate: &acp.SessionCurrentModeUpdate{SessionUpdate: "current_mode_update", CurrentModeId: acp.SessionModeId(mode)}})
	b.thought(ctx, id, "switch-mode "+mode, "", nil)
}

// writeCwd writes the file name (a path inside the session's cwd) there
// itself, as an agent's own edit tool does: "written by builtin session
// <id>", one line. It returns the path written.
func (b *builtin) writeCwd(id, name string) (string, error) {
	b.mu.Lock()
	cwd := b.sessions[id].Cwd
	b.mu.Unlock()
	if !filepath.IsLocal(name) {
		return "", fmt.Errorf("write-cwd %q: the name must be a relative path inside the session's cwd", name)
	}
	path := filepath.Join(cwd, name)
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return "", err
	}
	return path, os.WriteFile(path, []byte("written by builtin session "+id+"\n"), 0o644)
}
