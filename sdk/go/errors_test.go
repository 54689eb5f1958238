package moat

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"testing"

	"connectrpc.com/connect"

	"github.com/moatsh/moat/internal/errdefs"
	"github.com/moatsh/moat/internal/errdefs/errconnect"
	"github.com/moatsh/moat/internal/errdefs/errhttp"
)

// TestKindsAgreeAcrossTransports: every server error kind reaches an SDK
// caller as the same kind whether it came over REST (a status) or from
// envd over Connect (a code). Before one table served both, a precondition
// failure was an invalid argument over REST and a conflict over Connect,
// and a 504 was "unavailable". The one exception is a full disk, which
// Connect has no code for (envd answers resource_exhausted; its HTTP file
// API answers 507).
func TestKindsAgreeAcrossTransports(t *testing.T) {
	for _, k := range append(errdefs.Kinds(), context.DeadlineExceeded) {
		cause := fmt.Errorf("boom: %w", k)
		viaREST := (&APIError{StatusCode: errhttp.ToHTTP(cause)}).Unwrap()
		// on the wire only the code and the message travel
		wire := connect.NewError(connect.CodeOf(errconnect.ToConnect(cause)), errors.New(cause.Error()))
		viaConnect := fromConnect("op", wire)
		if k == errdefs.ErrNoSpace {
			if !errors.Is(viaConnect, ErrRateLimited) || viaREST != ErrNoSpace {
				t.Errorf("no space: REST %v, Connect %v", viaREST, viaConnect)
			}
			continue
		}
		if !errors.Is(viaConnect, viaREST) {
			t.Errorf("%v: REST gives %v, Connect gives %v", k, viaREST, viaConnect)
		}
	}
}

func TestKindOfStatus(t *testing.T) {
	for _, tt := range []struct {
		status int
		want   error
	}{
		{http.StatusBadRequest, ErrInvalidArgument},
		{http.StatusUnprocessableEntity, ErrInvalidArgument},
		{http.StatusUnauthorized, ErrUnauthorized},
		{http.StatusForbidden, ErrForbidden},
		{http.StatusNotFound, ErrNotFound},
		{http.StatusConflict, ErrConflict},
		{http.StatusTooManyRequests, ErrRateLimited},
		{http.StatusInsufficientStorage, ErrNoSpace},
		{http.StatusBadGateway, ErrUnavailable},
		{http.StatusServiceUnavailable, ErrUnavailable},
		{http.StatusGatewayTimeout, context.DeadlineExceeded},
		{http.StatusNotImplemented, ErrNotImplemented},
		{http.StatusInternalServerError, ErrInternal},
		{599, ErrInternal},
	} {
		if got := kindOfStatus(tt.status); got != tt.want {
			t.Errorf("%d: %v, want %v", tt.status, got, tt.want)
		}
	}
	for _, tt := range []struct {
		code connect.Code
		want error
	}{
		{connect.CodeFailedPrecondition, ErrInvalidArgument},
		{connect.CodeOutOfRange, ErrInvalidArgument},
		{connect.CodeAborted, ErrConflict},
		{connect.CodeAlreadyExists, ErrConflict},
		{connect.CodeDeadlineExceeded, context.DeadlineExceeded},
		{connect.CodeCanceled, context.Canceled},
		{connect.CodeDataLoss, ErrInternal},
	} {
		if err := fromConnect("op", connect.NewError(tt.code, errors.New("x"))); !errors.Is(err, tt.want) {
			t.Errorf("%v: %v, want %v", tt.code, err, tt.want)
		}
	}
}
