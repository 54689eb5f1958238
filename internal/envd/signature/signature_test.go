package signature

import (
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/moatsh/moat/internal/errdefs"
)

func TestSignMatchesSDK(t *testing.T) {
	// Reference computed as the JS SDK does: sha256 of the colon-joined
	// fields, standard base64 with the padding stripped.
	ref := func(raw string) string {
		s := sha256.Sum256([]byte(raw))
		return "v1_" + strings.TrimRight(base64.StdEncoding.EncodeToString(s[:]), "=")
	}
	tests := []struct {
		name                  string
		path, op, user, token string
		exp                   int64
		raw                   string
	}{
		{"no expiry", "/home/user/a.txt", OpRead, "user", "tok", 0, "/home/user/a.txt:read:user:tok"},
		{"no user", "a.txt", OpWrite, "", "tok", 0, "a.txt:write::tok"},
		{"expiry", "/x", OpRead, "root", "t", 1700000000, "/x:read:root:t:1700000000"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Sign(tt.path, tt.op, tt.user, tt.token, tt.exp)
			if want := ref(tt.raw); got != want {
				t.Fatalf("Sign = %q, want %q", got, want)
			}
			if strings.Contains(got, "=") {
				t.Fatalf("signature %q has padding", got)
			}
		})
	}
}

func TestVerify(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	future := now.Add(time.Hour).Unix()
	past := now.Add(-time.Hour).Unix()
	fmtI := func(n int64) string { return strconv.FormatInt(n, 10) }
	tests := []struct {
		name     string
		sig, exp string
		user     string
		wantErr  error
	}{
		{"valid no expiry", Sign("/p", OpRead, "user", "tok", 0), "", "user", nil},
		{"valid future", Sign("/p", OpRead, "user", "tok", future), fmtI(future), "user", nil},
		{"expired", Sign("/p", OpRead, "user", "tok", past), fmtI(past), "user", ErrExpired},
		{"missing", "", "", "user", ErrMissing},
		{"wrong user", Sign("/p", OpRead, "root", "tok", 0), "", "user", ErrInvalid},
		{"wrong op", Sign("/p", OpWrite, "user", "tok", 0), "", "user", ErrInvalid},
		{"expiry not signed", Sign("/p", OpRead, "user", "tok", 0), fmtI(future), "user", ErrInvalid},
		{"expiry stripped", Sign("/p", OpRead, "user", "tok", future), "", "user", ErrInvalid},
		{"bad expiry", Sign("/p", OpRead, "user", "tok", 0), "soon", "user", ErrInvalid},
		{"garbage", "v1_AAAA", "", "user", ErrInvalid},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := Verify("/p", OpRead, tt.user, "tok", tt.sig, tt.exp, now)
			if !errors.Is(err, tt.wantErr) || (tt.wantErr == nil && err != nil) {
				t.Fatalf("Verify = %v, want %v", err, tt.wantErr)
			}
			if err != nil && !errors.Is(err, errdefs.ErrUnauthenticated) {
				t.Fatalf("error %v is not unauthenticated", err)
			}
		})
	}
}

func FuzzVerify(f *testing.F) {
	f.Add("/home/user/a", "read", "user", "tok", Sign("/home/user/a", "read", "user", "tok", 0), "")
	f.Add("a", "write", "", "t", "v1_", "12")
	f.Add("", "", "", "", "", "-1")
	f.Fuzz(func(t *testing.T, path, op, user, token, sig, exp string) {
		err := Verify(path, op, user, token, sig, exp, time.Unix(0, 0))
		if err == nil && sig != Sign(path, op, user, token, parseOr0(exp)) {
			t.Fatalf("accepted a signature that Sign does not produce")
		}
		if err != nil && !errors.Is(err, ErrMissing) && !errors.Is(err, ErrInvalid) && !errors.Is(err, ErrExpired) {
			t.Fatalf("unexpected error %v", err)
		}
	})
}

func parseOr0(s string) int64 {
	n, _ := strconv.ParseInt(s, 10, 64)
	return n
}
