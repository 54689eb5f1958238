// Package errconnect maps errdefs kinds to Connect codes for envd's RPCs,
// once, so that every service answers the codes the E2B SDKs expect, and
// maps the codes of envd's answers back to kinds for the orchestrator. It
// covers the same kinds as errhttp; for the way back the first row with a
// code wins.
package errconnect

import (
	"context"
	"errors"

	"connectrpc.com/connect"

	"github.com/moatsh/moat/internal/errdefs"
)

var table = []struct {
	kind error
	code connect.Code
}{
	{errdefs.ErrNotFound, connect.CodeNotFound},
	{errdefs.ErrAlreadyExists, connect.CodeAlreadyExists},
	{errdefs.ErrInvalidArgument, connect.CodeInvalidArgument},
	{errdefs.ErrFailedPrecondition, connect.CodeFailedPrecondition},
	{errdefs.ErrConflict, connect.CodeAborted},
	{errdefs.ErrUnauthenticated, connect.CodeUnauthenticated},
	{errdefs.ErrPermissionDenied, connect.CodePermissionDenied},
	{errdefs.ErrResourceExhausted, connect.CodeResourceExhausted},
	{errdefs.ErrNoSpace, connect.CodeResourceExhausted},
	{errdefs.ErrUnavailable, connect.CodeUnavailable},
	{errdefs.ErrNotImplemented, connect.CodeUnimplemented},
	{errdefs.ErrInternal, connect.CodeInternal},
	{context.DeadlineExceeded, connect.CodeDeadlineExceeded},
	{context.Canceled, connect.CodeCanceled},
}

// ToConnect wraps err in a *connect.Error with the code of its kind
// (CodeInternal when it has none). nil stays nil.
func ToConnect(err error) error {
	if err == nil {
		return nil
	}
	var ce *connect.Error
	if errors.As(err, &ce) {
		return err
	}
	for _, e := range table {
		if errors.Is(err, e.kind) {
			return connect.NewError(e.code, err)
		}
	}
	return connect.NewError(connect.CodeInternal, err)
}

// ToNative turns a Connect error from a remote envd back into an errdefs kind.
func ToNative(err error) error {
	if err == nil {
		return nil
	}
	code := connect.CodeOf(err)
	for _, e := range table {
		if e.code == code {
			if errors.Is(err, e.kind) {
				return err
			}
			return errors.Join(e.kind, err)
		}
	}
	if k, ok := nativeOnly[code]; ok {
		return errors.Join(k, err)
	}
	return errors.Join(errdefs.ErrInternal, err)
}

// nativeOnly are codes no kind maps to.
var nativeOnly = map[connect.Code]error{
	connect.CodeOutOfRange: errdefs.ErrInvalidArgument,
	connect.CodeUnknown:    errdefs.ErrInternal,
	connect.CodeDataLoss:   errdefs.ErrInternal,
}
