package errhttp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/moatsh/moat/internal/errdefs"
)

// TestRoundTrip walks every kind through kind → status → JSON body → kind.
func TestRoundTrip(t *testing.T) {
	want := map[error]struct {
		status int
		back   error // the kind ToNative returns for status
	}{
		errdefs.ErrNotFound:           {404, errdefs.ErrNotFound},
		errdefs.ErrAlreadyExists:      {409, errdefs.ErrConflict},
		errdefs.ErrInvalidArgument:    {400, errdefs.ErrInvalidArgument},
		errdefs.ErrFailedPrecondition: {400, errdefs.ErrInvalidArgument},
		errdefs.ErrConflict:           {409, errdefs.ErrConflict},
		errdefs.ErrUnauthenticated:    {401, errdefs.ErrUnauthenticated},
		errdefs.ErrPermissionDenied:   {403, errdefs.ErrPermissionDenied},
		errdefs.ErrResourceExhausted:  {429, errdefs.ErrResourceExhausted},
		errdefs.ErrNoSpace:            {507, errdefs.ErrNoSpace},
		errdefs.ErrUnavailable:        {503, errdefs.ErrUnavailable},
		errdefs.ErrNotImplemented:     {501, errdefs.ErrNotImplemented},
		errdefs.ErrInternal:           {500, errdefs.ErrInternal},
	}
	kinds := append(errdefs.Kinds(), context.DeadlineExceeded, errors.New("plain"))
	want[context.DeadlineExceeded] = struct {
		status int
		back   error
	}{504, context.DeadlineExceeded}
	want[kinds[len(kinds)-1]] = struct {
		status int
		back   error
	}{500, errdefs.ErrInternal}
	for _, kind := range kinds {
		w, ok := want[kind]
		if !ok {
			t.Fatalf("kind %v has no expected status in this test", kind)
		}
		t.Run(kind.Error(), func(t *testing.T) {
			wrapped := fmt.Errorf("ctx at /var/lib/moat/x: %w", kind)
			if got := ToHTTP(wrapped); got != w.status {
				t.Fatalf("ToHTTP = %d, want %d", got, w.status)
			}
			rec := httptest.NewRecorder()
			WriteError(rec, wrapped)
			var e Error
			if err := json.Unmarshal(rec.Body.Bytes(), &e); err != nil || rec.Code != w.status || e.Code != w.status {
				t.Fatalf("body %q (status %d) err %v", rec.Body.String(), rec.Code, err)
			}
			if e.Message != Generic(kind) || strings.Contains(e.Message, "/var/lib") {
				t.Fatalf("message %q, want the generic %q", e.Message, Generic(kind))
			}
			if got := ToNative(rec.Code); !errors.Is(got, w.back) {
				t.Fatalf("ToNative(%d) = %v, want %v", rec.Code, got, w.back)
			}
		})
	}
	for status, k := range map[int]error{204: nil, 502: errdefs.ErrUnavailable, 413: errdefs.ErrInvalidArgument,
		418: errdefs.ErrInvalidArgument, 599: errdefs.ErrInternal} {
		if got := ToNative(status); got != k {
			t.Errorf("ToNative(%d) = %v, want %v", status, got, k)
		}
	}
}

func TestPublicMessage(t *testing.T) {
	pub := errdefs.Publicf(errdefs.ErrConflict, "sandbox %s is paused", "abc")
	err := fmt.Errorf("pause at 10.11.0.2: %w", pub)
	rec := httptest.NewRecorder()
	WriteError(rec, err)
	var e Error
	if json.Unmarshal(rec.Body.Bytes(), &e); rec.Code != 409 || e.Message != "sandbox abc is paused" {
		t.Fatalf("got %d %q", rec.Code, rec.Body.String())
	}
	if !errors.Is(err, errdefs.ErrConflict) {
		t.Fatal("public error lost its kind")
	}
}

func TestWriteError(t *testing.T) {
	rec := httptest.NewRecorder()
	WriteError(rec, fmt.Errorf("sandbox x: %w", errdefs.ErrNotFound))
	if rec.Code != http.StatusNotFound || rec.Header().Get("Content-Type") != "application/json" {
		t.Fatalf("got %d %q", rec.Code, rec.Header().Get("Content-Type"))
	}
	var e Error
	if err := json.Unmarshal(rec.Body.Bytes(), &e); err != nil || e.Code != 404 || e.Message != "not found" {
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
	// Every 503 says when to retry (1 s when the error does not know better).
	for _, tc := range []struct {
		err  error
		want string
	}{
		{fmt.Errorf("sandbox x: envd not reachable: %w", errdefs.ErrUnavailable), "1"},
	} {
		rec := httptest.NewRecorder()
		WriteError(rec, tc.err)
		if got := rec.Header().Get("Retry-After"); got != tc.want || rec.Code != http.StatusServiceUnavailable {
			t.Errorf("WriteError(%v): status %d Retry-After %q, want 503 %q", tc.err, rec.Code, got, tc.want)
		}
	}
}

// TestErrorCode: E2B's error_code is sent when the error carries one, and
// left out otherwise (envd's bodies, most API errors).
func TestErrorCode(t *testing.T) {
	for _, tt := range []struct {
		err  error
		want string
	}{
		{errdefs.WithCode(errdefs.Publicf(errdefs.ErrResourceExhausted, "busy"), errdefs.CodeCapacityUnavailable), `{"code":429,"error_code":"sandbox_capacity_unavailable","message":"busy"}`},
		{errdefs.WithCode(errdefs.WithCode(errdefs.ErrInternal, errdefs.CodeCreateFailed), errdefs.CodeInternal), `{"code":500,"error_code":"sandbox_create_failed","message":"internal server error"}`},
		{errdefs.Publicf(errdefs.ErrNotFound, "no such sandbox"), `{"code":404,"message":"no such sandbox"}`},
		{errdefs.ErrInternal, `{"code":500,"message":"internal server error"}`},
	} {
		rec := httptest.NewRecorder()
		WriteError(rec, tt.err)
		if got := strings.TrimSpace(rec.Body.String()); got != tt.want {
			t.Errorf("%v: body %s, want %s", tt.err, got, tt.want)
		}
	}
	if errdefs.WithCode(nil, "x") != nil {
		t.Error("WithCode(nil) is not nil")
	}
}
