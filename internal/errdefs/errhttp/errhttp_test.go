package errhttp

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/moatsh/moat/internal/errdefs"
)

func TestRoundTrip(t *testing.T) {
	tests := []struct {
		kind   error
		status int
		back   error
	}{
		{errdefs.ErrNotFound, 404, errdefs.ErrNotFound},
		{errdefs.ErrInvalidArgument, 400, errdefs.ErrInvalidArgument},
		{errdefs.ErrConflict, 409, errdefs.ErrAlreadyExists},
		{errdefs.ErrUnauthenticated, 401, errdefs.ErrUnauthenticated},
		{errdefs.ErrPermissionDenied, 403, errdefs.ErrPermissionDenied},
		{errdefs.ErrResourceExhausted, 429, errdefs.ErrResourceExhausted},
		{errdefs.ErrUnavailable, 503, errdefs.ErrUnavailable},
		{errdefs.ErrNotImplemented, 501, errdefs.ErrNotImplemented},
		{errdefs.ErrInternal, 500, errdefs.ErrInternal},
		{errors.New("plain"), 500, errdefs.ErrInternal},
	}
	for _, tt := range tests {
		t.Run(tt.kind.Error(), func(t *testing.T) {
			wrapped := fmt.Errorf("ctx: %w", tt.kind)
			if got := ToHTTP(wrapped); got != tt.status {
				t.Fatalf("ToHTTP = %d, want %d", got, tt.status)
			}
			if got := ToNative(tt.status); !errors.Is(got, tt.back) {
				t.Fatalf("ToNative(%d) = %v, want %v", tt.status, got, tt.back)
			}
		})
	}
	if ToNative(204) != nil {
		t.Fatal("ToNative(204) != nil")
	}
}

func TestWriteError(t *testing.T) {
	rec := httptest.NewRecorder()
	WriteError(rec, fmt.Errorf("sandbox x: %w", errdefs.ErrNotFound))
	if rec.Code != http.StatusNotFound || rec.Header().Get("Content-Type") != "application/json" {
		t.Fatalf("got %d %q", rec.Code, rec.Header().Get("Content-Type"))
	}
	var e Error
	if err := json.Unmarshal(rec.Body.Bytes(), &e); err != nil || e.Code != 404 || e.Message != "sandbox x" {
		t.Fatalf("body %q err %v", rec.Body.String(), err)
	}
	rec = httptest.NewRecorder()
	WriteError(rec, errors.New("/var/lib secret path"))
	if err := json.Unmarshal(rec.Body.Bytes(), &e); err != nil || e.Message != "internal server error" {
		t.Fatalf("internal leaked: %q", rec.Body.String())
	}
}

type retryErr struct{ d time.Duration }

func (e retryErr) Error() string             { return "busy: " + errdefs.ErrResourceExhausted.Error() }
func (e retryErr) Unwrap() error             { return errdefs.ErrResourceExhausted }
func (e retryErr) RetryAfter() time.Duration { return e.d }

func TestWriteErrorRetryAfter(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want string
	}{
		{retryErr{1500 * time.Millisecond}, "2"},
		{fmt.Errorf("create: %w", retryErr{time.Second}), "1"},
		{retryErr{0}, ""},
		{errdefs.ErrResourceExhausted, ""},
	} {
		rec := httptest.NewRecorder()
		WriteError(rec, tc.err)
		if got := rec.Header().Get("Retry-After"); got != tc.want || rec.Code != http.StatusTooManyRequests {
			t.Errorf("WriteError(%v): status %d Retry-After %q, want 429 %q", tc.err, rec.Code, got, tc.want)
		}
	}
}
