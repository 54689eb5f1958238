package files

import (
	"errors"
	"net/http"
	"strings"
	"syscall"
	"testing"

	"github.com/moatsh/moat/internal/envd/signature"
	"github.com/moatsh/moat/internal/errdefs"
)

func TestChooseEncoding(t *testing.T) {
	tests := []struct {
		accept, want string
		ok           bool
	}{
		{"", "identity", true},
		{"gzip", "gzip", true},
		{"gzip, deflate, br", "gzip", true},
		{"br;q=1.0, gzip;q=0.5", "gzip", true},
		{"gzip;q=0", "identity", true},
		{"br", "identity", true},
		{"identity;q=0", "", false},
		{"*;q=0", "", false},
		{"br, *;q=0", "", false},
	}
	for _, tt := range tests {
		got, ok := chooseEncoding(tt.accept)
		if got != tt.want || ok != tt.ok {
			t.Errorf("chooseEncoding(%q) = %q %v, want %q %v", tt.accept, got, ok, tt.want, tt.ok)
		}
	}
}

func TestParseMetadata(t *testing.T) {
	tests := []struct {
		name    string
		hdr     http.Header
		want    map[string]string
		wantErr bool
	}{
		{"none", http.Header{"X-Other": {"1"}}, nil, false},
		{"lowercased", http.Header{"X-Metadata-Owner": {"Alice"}}, map[string]string{"owner": "Alice"}, false},
		{"bare prefix ignored", http.Header{"X-Metadata-": {"v"}}, nil, false},
		{"first of repeated values", http.Header{"X-Metadata-Owner": {"Alice", "Bob"}}, map[string]string{"owner": "Alice"}, false},
		{"non ascii value", http.Header{"X-Metadata-K": {"caf\u00e9"}}, nil, true},
		{"control char", http.Header{"X-Metadata-K": {"a\tb"}}, nil, true},
		{"key 246 ok", http.Header{"X-Metadata-" + strings.Repeat("k", 246): {"v"}}, map[string]string{strings.Repeat("k", 246): "v"}, false},
		{"key 247", http.Header{"X-Metadata-" + strings.Repeat("k", 247): {"v"}}, nil, true},
		// E2B counts the "user.e2b." prefix of every key in the 4096 bytes.
		{"total 4096 ok", http.Header{"X-Metadata-A": {strings.Repeat("v", 4086)}}, map[string]string{"a": strings.Repeat("v", 4086)}, false},
		{"total 4097", http.Header{"X-Metadata-A": {strings.Repeat("v", 4087)}}, nil, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parseMetadata(tt.hdr)
			if (err != nil) != tt.wantErr {
				t.Fatalf("err = %v", err)
			}
			if err != nil && !errors.Is(err, errdefs.ErrInvalidArgument) {
				t.Fatalf("err %v is not invalid argument", err)
			}
			if len(got) != len(tt.want) {
				t.Fatalf("got %v, want %v", got, tt.want)
			}
			for k, v := range tt.want {
				if got[k] != v {
					t.Fatalf("got %v, want %v", got, tt.want)
				}
			}
		})
	}
}

func TestStatusOf(t *testing.T) {
	tests := []struct {
		err  error
		want int
	}{
		{errdefs.ErrNotFound, 404},
		{errdefs.ErrInvalidArgument, 400},
		{errdefs.ErrUnauthenticated, 401},
		{signature.ErrExpired, 401},
		{syscall.ENOSPC, 507},
		{errors.Join(syscall.EACCES, errdefs.ErrPermissionDenied), 403},
		{errors.New("other"), 500},
	}
	for _, tt := range tests {
		if got := StatusOf(tt.err); got != tt.want {
			t.Errorf("StatusOf(%v) = %d, want %d", tt.err, got, tt.want)
		}
	}
}
