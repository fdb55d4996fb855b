package daemon

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/residentd/residentd/apitype"
	"github.com/residentd/residentd/internal/acp"
	"github.com/residentd/residentd/internal/channel"
	"github.com/residentd/residentd/internal/pool"
	"github.com/residentd/residentd/internal/run"
	"github.com/residentd/residentd/internal/store"
)

// Code names the class of a daemon error with its stable API code
// (apitype.Code*); the API maps codes to HTTP statuses. Order matters: a
// cancellation names its cause first.
func Code(err error) string {
	switch {
	case err == nil:
		return ""
	case errors.Is(err, ErrBadRequest):
		return apitype.CodeBadRequest
	case errors.Is(err, ErrInvalidConfig):
		return apitype.CodeInvalidConfig
	case errors.Is(err, ErrNoConfigFile):
		return apitype.CodeNoConfigFile
	case errors.Is(err, channel.ErrInvalidAttachment):
		return apitype.CodeInvalidAttachment
	case errors.Is(err, channel.ErrInvalid):
		return apitype.CodeInvalidMessage
	case errors.Is(err, ErrUnknownBinding):
		return apitype.CodeUnknownBinding
	case errors.Is(err, ErrUnknownRun):
		return apitype.CodeUnknownRun
	case errors.Is(err, ErrUnknownThread):
		return apitype.CodeUnknownThread
	case errors.Is(err, run.ErrUnknownRequest):
		return apitype.CodeUnknownRequest
	case errors.Is(err, run.ErrBadOption):
		return apitype.CodeBadOption
	case errors.Is(err, run.ErrAlreadyAnswered):
		return apitype.CodeAlreadyAnswered
	case errors.Is(err, ErrRunEnded):
		return apitype.CodeRunEnded
	case errors.Is(err, ErrInterrupted):
		return apitype.CodeInterrupted
	case errors.Is(err, store.ErrDamaged):
		return apitype.CodeStoreDamaged
	case errors.Is(err, store.ErrNotFound):
		return apitype.CodeNotFound
	case errors.Is(err, run.ErrInUse):
		return apitype.CodeRunInUse
	case errors.Is(err, pool.ErrQueueFull):
		return apitype.CodeQueueFull
	case errors.Is(err, pool.ErrQueueTimeout):
		return apitype.CodeQueueTimeout
	case errors.Is(err, ErrBackoff):
		return apitype.CodeAgentBackoff
	case errors.Is(err, ErrBudgetExceeded):
		return apitype.CodeBudgetExceeded
	case errors.Is(err, ErrInvalidOption):
		return apitype.CodeInvalidOption
	case errors.Is(err, ErrShuttingDown), errors.Is(err, pool.ErrClosed):
		return apitype.CodeShuttingDown
	case errors.Is(err, context.DeadlineExceeded):
		return apitype.CodeTimeout
	case errors.Is(err, context.Canceled):
		return apitype.CodeCancelled
	case errors.Is(err, acp.ErrStart):
		return apitype.CodeAgentStartFailed
	case errors.Is(err, acp.ErrExited):
		return apitype.CodeAgentCrashed
	case errors.Is(err, ErrAgentFailed), errors.Is(err, acp.ErrProtocol), errors.Is(err, acp.ErrLimit):
		return apitype.CodeAgentFailed
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
