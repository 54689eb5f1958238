// Package errdefs is Moat's closed set of error kinds. Code anywhere wraps one
// of these sentinels with %w; each transport (REST, Connect) maps kinds to its
// own codes exactly once, in errhttp and errconnect.
//
// The text a client sees is chosen deliberately: an error made with Public
// or Publicf carries it, and everything else is answered with a generic text
// for its kind, so that host paths, addresses and log tails that wrapping
// collects on the way up stay in the server's log.
package errdefs

import (
	"errors"
	"fmt"
)

// The error kinds.
var (
	ErrNotFound           = errors.New("not found")
	ErrAlreadyExists      = errors.New("already exists")
	ErrInvalidArgument    = errors.New("invalid argument")
	ErrFailedPrecondition = errors.New("failed precondition")
	ErrConflict           = errors.New("conflict")
	ErrUnauthenticated    = errors.New("unauthenticated")
	ErrPermissionDenied   = errors.New("permission denied")
	ErrResourceExhausted  = errors.New("resource exhausted")
	// ErrNoSpace is a full disk or quota (ENOSPC, EDQUOT): envd answers
	// it with 507, which the SDKs turn into NotEnoughSpaceError.
	ErrNoSpace        = errors.New("not enough disk space")
	ErrUnavailable    = errors.New("unavailable")
	ErrNotImplemented = errors.New("not implemented")
	ErrInternal       = errors.New("internal")
)

// Kinds lists every kind, for tables and tests that must cover them all.
func Kinds() []error {
	return []error{ErrNotFound, ErrAlreadyExists, ErrInvalidArgument, ErrFailedPrecondition,
		ErrConflict, ErrUnauthenticated, ErrPermissionDenied, ErrResourceExhausted, ErrNoSpace,
		ErrUnavailable, ErrNotImplemented, ErrInternal}
}

// IsNotFound reports whether err is of kind ErrNotFound.
func IsNotFound(err error) bool { return errors.Is(err, ErrNotFound) }

// IsInvalidArgument reports whether err is of kind ErrInvalidArgument.
func IsInvalidArgument(err error) bool { return errors.Is(err, ErrInvalidArgument) }

// IsConflict reports whether err is of kind ErrConflict.
func IsConflict(err error) bool { return errors.Is(err, ErrConflict) }

// PublicError is an error whose text is meant for API clients. Its Error
// is that text; wrapping it with fmt.Errorf adds context for the log only.
type PublicError struct {
	msg     string
	err     error // the kind (Public) or the wrapped error (PublicWrap)
	wrapped bool
}

// Public returns an error of kind whose client-facing text is msg.
func Public(kind error, msg string) error { return &PublicError{msg: msg, err: kind} }

// Publicf is Public with a format. It does not wrap: %w in format is an
// error, since whatever it wrapped would not be public.
func Publicf(kind error, format string, args ...any) error {
	return &PublicError{msg: fmt.Sprintf(format, args...), err: kind}
}

// PublicWrap adds public context to err, keeping its kind: the client sees
// "<context>: <err's public text>", or only the context when err has none.
func PublicWrap(err error, format string, args ...any) error {
	if err == nil {
		return nil
	}
	return &PublicError{msg: fmt.Sprintf(format, args...), err: err, wrapped: true}
}

func (e *PublicError) Error() string {
	if e.wrapped {
		return e.msg + ": " + e.err.Error()
	}
	return e.msg
}

// Unwrap returns the kind, or the error PublicWrap wrapped.
func (e *PublicError) Unwrap() error { return e.err }

// PublicMessage returns the client-facing text of the outermost
// PublicError in err's chain, and false when there is none.
func PublicMessage(err error) (string, bool) {
	var pe *PublicError
	if !errors.As(err, &pe) {
		return "", false
	}
	if !pe.wrapped {
		return pe.msg, true
	}
	if inner, ok := PublicMessage(pe.err); ok {
		return pe.msg + ": " + inner, true
	}
	return pe.msg, true
}

// Machine-readable codes of E2B's error body (its `error_code`, "not a
// closed set"): the ones Moat sends.
const (
	CodeCapacityUnavailable = "sandbox_capacity_unavailable"
	CodeCreateFailed        = "sandbox_create_failed"
	CodeInternal            = "internal_server_error"
)

// codedError carries an error_code beside its error.
type codedError struct {
	err  error
	code string
}

func (e *codedError) Error() string     { return e.err.Error() }
func (e *codedError) Unwrap() error     { return e.err }
func (e *codedError) ErrorCode() string { return e.code }

// WithCode marks err with E2B's machine-readable error_code (nil stays nil;
// an error that has a code keeps its first).
func WithCode(err error, code string) error {
	if err == nil {
		return nil
	}
	if _, ok := ErrorCode(err); ok {
		return err
	}
	return &codedError{err: err, code: code}
}

// ErrorCode returns the error_code err carries, if any.
func ErrorCode(err error) (string, bool) {
	var c interface{ ErrorCode() string }
	if errors.As(err, &c) {
		return c.ErrorCode(), true
	}
	return "", false
}
