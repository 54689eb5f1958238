package moat

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"connectrpc.com/connect"

	"github.com/moatsh/moat/api/rest"
)

// Error kinds. Every error returned by this package for a failed API or envd
// call wraps one of them, so callers test with errors.Is.
var (
	ErrInvalidArgument = errors.New("invalid argument")
	ErrUnauthorized    = errors.New("unauthorized")
	ErrForbidden       = errors.New("forbidden")
	ErrNotFound        = errors.New("not found")
	ErrConflict        = errors.New("conflict")
	ErrRateLimited     = errors.New("rate limited")
	ErrNoSpace         = errors.New("not enough disk space") // 507 from a sandbox's files API
	ErrUnavailable     = errors.New("unavailable")
	ErrNotImplemented  = errors.New("not implemented") // e.g. snapshots on the container runtime
	ErrInternal        = errors.New("internal error")
)

// APIError is a non-2xx answer of the REST API, carrying E2B's error body
// {"code","message"}. It unwraps to the matching kind (ErrNotFound, ...).
type APIError struct {
	StatusCode int    // HTTP status
	Code       int    // "code" of the body (usually the status again)
	Message    string // "message" of the body, or the raw body
}

func (e *APIError) Error() string {
	return fmt.Sprintf("moat api: %d %s: %s", e.StatusCode, http.StatusText(e.StatusCode), e.Message)
}

// Unwrap returns the error kind of the status.
func (e *APIError) Unwrap() error { return kindOfStatus(e.StatusCode) }

func kindOfStatus(status int) error {
	switch {
	case status == http.StatusBadRequest || status == http.StatusUnprocessableEntity:
		return ErrInvalidArgument
	case status == http.StatusUnauthorized:
		return ErrUnauthorized
	case status == http.StatusForbidden:
		return ErrForbidden
	case status == http.StatusNotFound:
		return ErrNotFound
	case status == http.StatusConflict:
		return ErrConflict
	case status == http.StatusTooManyRequests:
		return ErrRateLimited
	case status == http.StatusBadGateway || status == http.StatusServiceUnavailable ||
		status == http.StatusGatewayTimeout:
		return ErrUnavailable
	case status == http.StatusNotImplemented:
		return ErrNotImplemented
	case status == http.StatusInsufficientStorage:
		return ErrNoSpace
	default:
		return ErrInternal
	}
}

// parseAPIError builds an APIError from a response status and body.
func parseAPIError(status int, body []byte) error {
	e := &APIError{StatusCode: status, Code: status}
	var wire rest.Error
	if json.Unmarshal(body, &wire) == nil && wire.Message != "" {
		e.Message = wire.Message
		if wire.Code != 0 {
			e.Code = int(wire.Code)
		}
	} else {
		e.Message = strings.TrimSpace(string(body))
	}
	if e.Message == "" {
		e.Message = http.StatusText(status)
	}
	return e
}

// fromConnect converts an envd (Connect) error into one wrapping a kind.
func fromConnect(op string, err error) error {
	var kind error
	switch connect.CodeOf(err) {
	case connect.CodeCanceled:
		kind = context.Canceled
	case connect.CodeInvalidArgument, connect.CodeOutOfRange:
		kind = ErrInvalidArgument
	case connect.CodeUnauthenticated:
		kind = ErrUnauthorized
	case connect.CodePermissionDenied:
		kind = ErrForbidden
	case connect.CodeNotFound:
		kind = ErrNotFound
	case connect.CodeAlreadyExists, connect.CodeFailedPrecondition, connect.CodeAborted:
		kind = ErrConflict
	case connect.CodeResourceExhausted:
		kind = ErrRateLimited
	case connect.CodeUnavailable, connect.CodeDeadlineExceeded:
		kind = ErrUnavailable
	case connect.CodeUnimplemented:
		kind = ErrNotImplemented
	default:
		kind = ErrInternal
	}
	return fmt.Errorf("%s: %w (%w)", op, kind, err)
}
