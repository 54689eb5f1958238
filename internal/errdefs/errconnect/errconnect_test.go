package errconnect

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"connectrpc.com/connect"

	"github.com/moatsh/moat/internal/errdefs"
)

// TestRoundTrip walks every kind through kind → Connect code → kind.
func TestRoundTrip(t *testing.T) {
	want := map[error]struct {
		code connect.Code
		back error
	}{
		errdefs.ErrNotFound:           {connect.CodeNotFound, errdefs.ErrNotFound},
		errdefs.ErrAlreadyExists:      {connect.CodeAlreadyExists, errdefs.ErrAlreadyExists},
		errdefs.ErrInvalidArgument:    {connect.CodeInvalidArgument, errdefs.ErrInvalidArgument},
		errdefs.ErrFailedPrecondition: {connect.CodeFailedPrecondition, errdefs.ErrFailedPrecondition},
		errdefs.ErrConflict:           {connect.CodeAborted, errdefs.ErrConflict},
		errdefs.ErrUnauthenticated:    {connect.CodeUnauthenticated, errdefs.ErrUnauthenticated},
		errdefs.ErrPermissionDenied:   {connect.CodePermissionDenied, errdefs.ErrPermissionDenied},
		errdefs.ErrResourceExhausted:  {connect.CodeResourceExhausted, errdefs.ErrResourceExhausted},
		errdefs.ErrNoSpace:            {connect.CodeResourceExhausted, errdefs.ErrResourceExhausted},
		errdefs.ErrUnavailable:        {connect.CodeUnavailable, errdefs.ErrUnavailable},
		errdefs.ErrNotImplemented:     {connect.CodeUnimplemented, errdefs.ErrNotImplemented},
		errdefs.ErrInternal:           {connect.CodeInternal, errdefs.ErrInternal},
		context.DeadlineExceeded:      {connect.CodeDeadlineExceeded, context.DeadlineExceeded},
		context.Canceled:              {connect.CodeCanceled, context.Canceled},
	}
	for _, kind := range append(errdefs.Kinds(), context.DeadlineExceeded, context.Canceled) {
		w, ok := want[kind]
		if !ok {
			t.Fatalf("kind %v has no expected code in this test", kind)
		}
		t.Run(kind.Error(), func(t *testing.T) {
			ce := ToConnect(fmt.Errorf("op: %w", kind))
			if got := connect.CodeOf(ce); got != w.code {
				t.Fatalf("code %v, want %v", got, w.code)
			}
			// What a client sees: a new error with only the code and text.
			remote := connect.NewError(connect.CodeOf(ce), errors.New(ce.(*connect.Error).Message()))
			if got := ToNative(remote); !errors.Is(got, w.back) {
				t.Fatalf("ToNative = %v, want %v", got, w.back)
			}
		})
	}
	if ToConnect(nil) != nil || ToNative(nil) != nil {
		t.Fatal("nil must stay nil")
	}
	if got := connect.CodeOf(ToConnect(errors.New("plain"))); got != connect.CodeInternal {
		t.Fatalf("plain error: %v", got)
	}
	for code, k := range map[connect.Code]error{connect.CodeUnknown: errdefs.ErrInternal,
		connect.CodeOutOfRange: errdefs.ErrInvalidArgument, connect.CodeDataLoss: errdefs.ErrInternal} {
		if got := ToNative(connect.NewError(code, errors.New("x"))); !errors.Is(got, k) {
			t.Errorf("ToNative(%v) = %v, want %v", code, got, k)
		}
	}
}
