package daemon

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/residentd/residentd/apitype"
	"github.com/residentd/residentd/internal/acp"
	"github.com/residentd/residentd/internal/channel"
	"github.com/residentd/residentd/internal/elicit"
	"github.com/residentd/residentd/internal/pool"
	"github.com/residentd/residentd/internal/resident"
	"github.com/residentd/residentd/internal/run"
	"github.com/residentd/residentd/internal/store"
	"github.com/residentd/residentd/internal/workspace"
)

// errorCodes names each class of daemon error with its stable API code
// (apitype.Code*), in the order they are asked: a cancellation names its
// cause first.
var errorCodes = []struct {
	err  error
	code string
}{
	{ErrBadRequest, apitype.CodeBadRequest},
	{ErrInvalidConfig, apitype.CodeInvalidConfig},
	{ErrNoConfigFile, apitype.CodeNoConfigFile},
	{channel.ErrInvalidAttachment, apitype.CodeInvalidAttachment},
	{channel.ErrInvalid, apitype.CodeInvalidMessage},
	{ErrUnknownBinding, apitype.CodeUnknownBinding},
	{ErrUnknownRun, apitype.CodeUnknownRun},
	{ErrUnknownThread, apitype.CodeUnknownThread},
	{run.ErrUnknownRequest, apitype.CodeUnknownRequest},
	{run.ErrBadOption, apitype.CodeBadOption},
	{run.ErrAlreadyAnswered, apitype.CodeAlreadyAnswered},
	{run.ErrBadAction, apitype.CodeBadRequest},
	{elicit.ErrBadContent, apitype.CodeInvalidContent},
	{ErrNotAnApprover, apitype.CodeNotAnApprover},
	{ErrRunEnded, apitype.CodeRunEnded},
	{ErrInterrupted, apitype.CodeInterrupted},
	{store.ErrDamaged, apitype.CodeStoreDamaged},
	{store.ErrNoSpace, apitype.CodeStorageFull},
	{store.ErrNotFound, apitype.CodeNotFound},
	{resident.ErrNoProcess, apitype.CodeNotFound},
	{acp.ErrNotCancelable, apitype.CodeNotFound},
	{run.ErrInUse, apitype.CodeRunInUse},
	{pool.ErrQueueFull, apitype.CodeQueueFull},
	{pool.ErrQueueTimeout, apitype.CodeQueueTimeout},
	{ErrBackoff, apitype.CodeAgentBackoff},
	{ErrBudgetExceeded, apitype.CodeBudgetExceeded},
	{ErrInvalidOption, apitype.CodeInvalidOption},
	{workspace.ErrUncommitted, apitype.CodeWorktreeHasChanges},
	{workspace.ErrUnavailable, apitype.CodeWorktreeFailed},
	{ErrShuttingDown, apitype.CodeShuttingDown},
	{pool.ErrClosed, apitype.CodeShuttingDown},
	{ErrPolicyRefused, apitype.CodePolicyRefused},
	{context.DeadlineExceeded, apitype.CodeTimeout},
	{context.Canceled, apitype.CodeCancelled},
	{acp.ErrStart, apitype.CodeAgentStartFailed},
	{acp.ErrExited, apitype.CodeAgentCrashed},
	{ErrAgentFailed, apitype.CodeAgentFailed},
	{acp.ErrProtocol, apitype.CodeAgentFailed},
	{acp.ErrLimit, apitype.CodeAgentFailed},
}

// Code names the class of a daemon error with its stable API code
// (apitype.Code*); the API maps codes to HTTP statuses. An error of no
// class is internal.
func Code(err error) string {
	if err == nil {
		return ""
	}
	for _, c := range errorCodes {
		if errors.Is(err, c.err) {
			return c.code
		}
	}
	return apitype.CodeInternal
}

func decodeEvent(line []byte) (apitype.Event, error) {
	var ev apitype.Event
	if err := json.Unmarshal(line, &ev); err != nil {
		return ev, fmt.Errorf("daemon: decode run event: %w", err)
	}
	return ev, nil
}
