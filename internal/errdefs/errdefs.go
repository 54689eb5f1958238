// Package errdefs is Moat's closed set of error kinds. Code anywhere wraps one
// of these sentinels with %w; each transport (REST, Connect) maps kinds to its
// own codes exactly once, in errhttp and errconnect.
package errdefs

import "errors"

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
	ErrUnavailable        = errors.New("unavailable")
	ErrNotImplemented     = errors.New("not implemented")
	ErrInternal           = errors.New("internal")
)

// IsNotFound reports whether err is of kind ErrNotFound.
func IsNotFound(err error) bool { return errors.Is(err, ErrNotFound) }

// IsInvalidArgument reports whether err is of kind ErrInvalidArgument.
func IsInvalidArgument(err error) bool { return errors.Is(err, ErrInvalidArgument) }

// IsConflict reports whether err is of kind ErrConflict.
func IsConflict(err error) bool { return errors.Is(err, ErrConflict) }
