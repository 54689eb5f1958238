// Package errhttp maps errdefs kinds to HTTP statuses and writes E2B's JSON
// error body {"code":<status>,"message":...}, exactly once for the REST API,
// the sandbox proxy and envd's /files, so the SDKs' status/body checks always
// agree. The message is the error's public text (errdefs.Public) or a
// generic text for its kind, never the rest of its chain.
package errhttp

import (
	"context"
	"encoding/json"
	"errors"
	"math"
	"net/http"
	"strconv"
	"time"

	"github.com/moatsh/moat/internal/errdefs"
)

// table is the one kind → status mapping. For ToNative the first row with
// a status wins.
var table = []struct {
	kind    error
	status  int
	generic string // message when the error carries no public text
}{
	{errdefs.ErrNotFound, http.StatusNotFound, "not found"},
	{errdefs.ErrConflict, http.StatusConflict, "conflict"},
	{errdefs.ErrAlreadyExists, http.StatusConflict, "already exists"},
	{errdefs.ErrInvalidArgument, http.StatusBadRequest, "invalid request"},
	{errdefs.ErrFailedPrecondition, http.StatusBadRequest, "failed precondition"},
	{errdefs.ErrUnauthenticated, http.StatusUnauthorized, "unauthenticated"},
	{errdefs.ErrPermissionDenied, http.StatusForbidden, "permission denied"},
	{errdefs.ErrResourceExhausted, http.StatusTooManyRequests, "too many requests; retry later"},
	{errdefs.ErrNoSpace, http.StatusInsufficientStorage, "not enough disk space available"},
	{errdefs.ErrUnavailable, http.StatusServiceUnavailable, "service unavailable"},
	{errdefs.ErrNotImplemented, http.StatusNotImplemented, "not implemented"},
	{errdefs.ErrInternal, http.StatusInternalServerError, "internal server error"},
	{context.DeadlineExceeded, http.StatusGatewayTimeout, "deadline exceeded"},
}

// nativeOnly are statuses other servers (envd, the proxy) answer that have
// no row of their own: 502 is a sandbox that is gone.
var nativeOnly = map[int]error{
	http.StatusBadGateway:            errdefs.ErrUnavailable,
	http.StatusRequestEntityTooLarge: errdefs.ErrInvalidArgument,
	http.StatusNotAcceptable:         errdefs.ErrInvalidArgument,
	http.StatusMethodNotAllowed:      errdefs.ErrNotImplemented,
}

// Error is E2B's error body; ErrorCode is its machine-readable
// error_code, sent only when the error carries one (errdefs.WithCode).
type Error struct {
	Code      int    `json:"code"`
	ErrorCode string `json:"error_code,omitempty"`
	Message   string `json:"message"`
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
	if k, ok := nativeOnly[status]; ok {
		return k
	}
	if status >= 500 {
		return errdefs.ErrInternal
	}
	return errdefs.ErrInvalidArgument
}

// WriteError writes err as an E2B JSON error with the status of its kind
// and Message(err). Callers log err itself when they want it kept.
// An error that says when to retry (a RetryAfter method, as admission's
// refusals have) also sets the Retry-After header, in whole seconds; any
// other 503 (unavailable is transient by definition: a sandbox that did
// not come up in time, an unreachable database) says 1 s, so that clients
// that honour the header retry instead of giving up.
func WriteError(w http.ResponseWriter, err error) {
	status := ToHTTP(err)
	var ra interface{ RetryAfter() time.Duration }
	if errors.As(err, &ra) && ra.RetryAfter() > 0 {
		w.Header().Set("Retry-After", strconv.Itoa(int(math.Ceil(ra.RetryAfter().Seconds()))))
	} else if status == http.StatusServiceUnavailable {
		w.Header().Set("Retry-After", "1")
	}
	code, _ := errdefs.ErrorCode(err)
	WriteJSON(w, status, Error{Code: status, ErrorCode: code, Message: Message(err)})
}

// Message is the client-facing text of err: its public text
// (errdefs.Public), else the generic text of its kind.
func Message(err error) string {
	if msg, ok := errdefs.PublicMessage(err); ok {
		return msg
	}
	return Generic(err)
}

// Generic is the generic text of err's kind ("internal server error" for
// an error without one).
func Generic(err error) string {
	for _, e := range table {
		if errors.Is(err, e.kind) {
			return e.generic
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
