// Package errhttp maps errdefs kinds to HTTP statuses and writes E2B's JSON
// error body {"code":<status>,"message":...}, exactly once for the REST API
// and the sandbox proxy, so the SDKs' status/body checks always agree.
package errhttp

import (
	"context"
	"encoding/json"
	"errors"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/moatsh/moat/internal/errdefs"
)

var table = []struct {
	kind   error
	status int
}{
	{errdefs.ErrNotFound, http.StatusNotFound},
	{errdefs.ErrAlreadyExists, http.StatusConflict},
	{errdefs.ErrInvalidArgument, http.StatusBadRequest},
	{errdefs.ErrFailedPrecondition, http.StatusBadRequest},
	{errdefs.ErrConflict, http.StatusConflict},
	{errdefs.ErrUnauthenticated, http.StatusUnauthorized},
	{errdefs.ErrPermissionDenied, http.StatusForbidden},
	{errdefs.ErrResourceExhausted, http.StatusTooManyRequests},
	{errdefs.ErrUnavailable, http.StatusServiceUnavailable},
	{errdefs.ErrNotImplemented, http.StatusNotImplemented},
	{errdefs.ErrInternal, http.StatusInternalServerError},
	{context.DeadlineExceeded, http.StatusGatewayTimeout},
}

// Error is E2B's error body.
type Error struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
}

// ToHTTP returns the HTTP status for err's kind (500 when it has none).
func ToHTTP(err error) int {
	for _, e := range table {
		if errors.Is(err, e.kind) {
			return e.status
		}
	}
	return http.StatusInternalServerError
}

// ToNative turns an HTTP status back into an errdefs kind (nil for 2xx/3xx).
func ToNative(status int) error {
	if status < 400 {
		return nil
	}
	for _, e := range table {
		if e.status == status {
			return e.kind
		}
	}
	if status >= 500 {
		return errdefs.ErrInternal
	}
	return errdefs.ErrInvalidArgument
}

// WriteError writes err as an E2B JSON error with the status of its kind.
// Internal errors are reported with a generic message: their text may carry
// host details that do not belong to API clients.
// An error that says when to retry (a RetryAfter method, as admission's
// refusals have) also sets the Retry-After header, in whole seconds.
func WriteError(w http.ResponseWriter, err error) {
	var ra interface{ RetryAfter() time.Duration }
	if errors.As(err, &ra) && ra.RetryAfter() > 0 {
		w.Header().Set("Retry-After", strconv.Itoa(int(math.Ceil(ra.RetryAfter().Seconds()))))
	}
	status := ToHTTP(err)
	Write(w, status, Message(err))
}

// Message is the client-facing text of err: its text without the trailing
// ": <kind>" that wrapping adds, or a generic text for internal errors.
func Message(err error) string {
	for _, e := range table {
		if errors.Is(err, e.kind) {
			if e.status == http.StatusInternalServerError {
				break
			}
			return strings.TrimSuffix(err.Error(), ": "+e.kind.Error())
		}
	}
	return "internal server error"
}

// Write writes {"code":status,"message":msg} with status.
func Write(w http.ResponseWriter, status int, msg string) {
	WriteJSON(w, status, Error{Code: status, Message: msg})
}

// WriteJSON writes v as a JSON response with status.
func WriteJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}
