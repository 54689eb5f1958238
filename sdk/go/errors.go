package moat

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/moatsh/moat/api/rest"
	"github.com/moatsh/moat/internal/errdefs"
	"github.com/moatsh/moat/internal/errdefs/errconnect"
	"github.com/moatsh/moat/internal/errdefs/errhttp"
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

func kindOfStatus(status int) error { return kindOf(errhttp.ToNative(status)) }

// kinds maps the server's error kinds (internal/errdefs, which errhttp and
// errconnect map to HTTP statuses and Connect codes and back, once for
// server and client) to this package's. A precondition failure is an
// invalid argument, as its REST status (400) says, whichever way it came.
var kinds = []struct{ native, sdk error }{
	{errdefs.ErrInvalidArgument, ErrInvalidArgument},
	{errdefs.ErrFailedPrecondition, ErrInvalidArgument},
	{errdefs.ErrUnauthenticated, ErrUnauthorized},
	{errdefs.ErrPermissionDenied, ErrForbidden},
	{errdefs.ErrNotFound, ErrNotFound},
	{errdefs.ErrConflict, ErrConflict},
	{errdefs.ErrAlreadyExists, ErrConflict},
	{errdefs.ErrResourceExhausted, ErrRateLimited},
	{errdefs.ErrNoSpace, ErrNoSpace},
	{errdefs.ErrUnavailable, ErrUnavailable},
	{errdefs.ErrNotImplemented, ErrNotImplemented},
	{context.DeadlineExceeded, context.DeadlineExceeded},
	{context.Canceled, context.Canceled},
}

// kindOf is this package's kind of a server kind (ErrInternal for none).
func kindOf(native error) error {
	for _, k := range kinds {
		if errors.Is(native, k.native) {
			return k.sdk
		}
	}
	return ErrInternal
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
	return fmt.Errorf("%s: %w (%w)", op, kindOf(errconnect.ToNative(err)), err)
}
