package handlers

import (
	"errors"
	"fmt"
	"net/http"

	"github.com/presenced/presenced/lastseen"
	"github.com/presenced/presenced/presence"
	"github.com/presenced/presenced/store"
)

// Error codes of acks and REST errors (CONTRACT §1, §2).
const (
	CodeInvalidArgument = "invalid_argument"
	CodeUnauthorized    = "unauthorized"
	CodeForbidden       = "forbidden"
	CodeNotFound        = "not_found"
	CodeLimitExceeded   = "limit_exceeded"
	CodeRateLimited     = "rate_limited"
	CodeUnavailable     = "unavailable"
	CodeInternal        = "internal"
)

// Error is an error with a contract code and a client-safe message.
type Error struct {
	Code    string
	Message string
}

func (e *Error) Error() string { return e.Code + ": " + e.Message }

func errorf(code, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

// classify maps any error to its contract code and message. Errors that are
// not ours become "internal" with a generic message (the caller logs them).
func classify(err error) *Error {
	var e *Error
	switch {
	case errors.As(err, &e):
		return e
	case errors.Is(err, presence.ErrNotJoined):
		return errorf(CodeForbidden, "join the conversation first")
	case errors.Is(err, presence.ErrLimit):
		var le *presence.LimitError
		if errors.As(err, &le) {
			return errorf(CodeLimitExceeded, "too many conversations on this connection (at most %d)", le.Max)
		}
		return errorf(CodeLimitExceeded, "too many conversations on this connection")
	case errors.Is(err, presence.ErrUnknown):
		return errorf(CodeUnavailable, "connection is closing")
	case errors.Is(err, presence.ErrUnavailable), errors.Is(err, store.ErrUnavailable), errors.Is(err, lastseen.ErrUnavailable):
		return errorf(CodeUnavailable, "temporarily unavailable, retry")
	case errors.Is(err, store.ErrInvalid):
		return errorf(CodeInvalidArgument, "invalid argument")
	}
	return errorf(CodeInternal, "internal error")
}

// HTTPStatus is the HTTP status of a code: the one mapping, for every
// HTTP answer of an error (REST, admin).
func HTTPStatus(code string) int {
	switch code {
	case CodeInvalidArgument:
		return http.StatusBadRequest
	case CodeUnauthorized:
		return http.StatusUnauthorized
	case CodeForbidden:
		return http.StatusForbidden
	case CodeNotFound:
		return http.StatusNotFound
	case CodeLimitExceeded:
		return http.StatusRequestEntityTooLarge
	case CodeRateLimited:
		return http.StatusTooManyRequests
	case CodeUnavailable:
		return http.StatusServiceUnavailable
	}
	return http.StatusInternalServerError
}

// ackError is the ack body of a failure.
func ackError(e *Error) map[string]any {
	return map[string]any{"ok": false, "error": map[string]any{"code": e.Code, "message": e.Message}}
}

// RefusalReason is the short, client-safe reason of a handshake refused by
// Sockets.Prepare (the `reason` of connect_error's data).
func RefusalReason(err error) string {
	var e *Error
	if errors.As(err, &e) {
		return e.Message
	}
	return "refused"
}
