package redistest

import (
	"context"
	"errors"
	"strings"

	"github.com/redis/go-redis/v9"
)

// ErrInjected is the error of a command FailHook fails.
var ErrInjected = errors.New("redistest: injected failure")

// FailHook fails with ErrInjected, without sending them, the commands sent
// alone (not in a pipeline) for which Fail returns true.
type FailHook struct{ Fail func(cmd redis.Cmder) bool }

// DialHook implements redis.Hook.
func (FailHook) DialHook(next redis.DialHook) redis.DialHook { return next }

// ProcessHook implements redis.Hook.
func (h FailHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if h.Fail(cmd) {
			cmd.SetErr(ErrInjected)
			return ErrInjected
		}
		return next(ctx, cmd)
	}
}

// ProcessPipelineHook implements redis.Hook.
func (FailHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// IsScript reports whether cmd runs a script (EVAL or EVALSHA).
func IsScript(cmd redis.Cmder) bool {
	n := strings.ToLower(cmd.Name())
	return n == "evalsha" || n == "eval"
}
