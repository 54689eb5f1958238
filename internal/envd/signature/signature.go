// Package signature implements E2B's v1 signed file URLs. SDKs build
// downloadUrl/uploadUrl links whose "signature" query parameter proves, without
// the X-Access-Token header, that the link was made by someone holding the
// sandbox's envd access token; envd's /files handlers verify it here.
package signature

import (
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"strconv"
	"time"

	"github.com/moatsh/moat/internal/errdefs"
)

// Operations a signature can grant.
const (
	OpRead  = "read"
	OpWrite = "write"
)

// prefix marks the version of the scheme.
const prefix = "v1_"

// Error is a verification failure. Its message is the exact text envd
// answers with; every Error is of kind errdefs.ErrUnauthenticated.
type Error struct{ msg string }

func (e *Error) Error() string { return e.msg }

// Unwrap makes every verification failure unauthenticated.
func (e *Error) Unwrap() error { return errdefs.ErrUnauthenticated }

// The verification failures, distinct so callers can tell them apart.
var (
	ErrMissing = &Error{"missing signature query parameter"}
	ErrInvalid = &Error{"invalid signature"}
	ErrExpired = &Error{"signature is already expired"}
)

// Sign returns the signature of operation on path for username, keyed with
// the envd access token. expiration is a Unix time in seconds; 0 means the
// signature never expires.
func Sign(path, operation, username, token string, expiration int64) string {
	raw := path + ":" + operation + ":" + username + ":" + token
	if expiration != 0 {
		raw += ":" + strconv.FormatInt(expiration, 10)
	}
	sum := sha256.Sum256([]byte(raw))
	return prefix + base64.RawStdEncoding.EncodeToString(sum[:])
}

// Verify checks sig, the raw "signature" query value, and expiration, the
// raw "signature_expiration" query value ("" = none), against the other
// request values as sent (path unresolved, username "" when absent). It
// compares in constant time and only then checks expiry against now.
func Verify(path, operation, username, token, sig, expiration string, now time.Time) error {
	if sig == "" {
		return ErrMissing
	}
	var exp int64
	if expiration != "" {
		n, err := strconv.ParseInt(expiration, 10, 64)
		if err != nil {
			return ErrInvalid
		}
		exp = n
	}
	want := Sign(path, operation, username, token, exp)
	if subtle.ConstantTimeCompare([]byte(want), []byte(sig)) != 1 {
		return ErrInvalid
	}
	if expiration != "" && exp < now.Unix() {
		return ErrExpired
	}
	return nil
}
