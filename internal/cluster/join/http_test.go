package join

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/moatsh/moat/internal/errdefs"
)

// TestHTTP: a node joins through the endpoint with Ask and its files make
// a working mutual TLS config; bad requests get the documented statuses.
func TestHTTP(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	srv := httptest.NewServer(e.is)
	defer srv.Close()
	tok, err := NewToken(ctx, e.db, time.Hour, e.now)
	if err != nil {
		t.Fatal(err)
	}
	key, cert, ca, err := Ask(ctx, srv.Client(), srv.URL, tok, "node-b")
	if err != nil {
		t.Fatal(err)
	}
	node, err := TLSConfig(cert, key, ca)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := handshake(t, node, e.peer(t, "api-1"), "node-b"); err != nil || got != "api-1" {
		t.Fatalf("handshake with the joined node: %q, %v", got, err)
	}
	if _, _, _, err := Ask(ctx, srv.Client(), srv.URL, tok, "node-c"); !errors.Is(err, errdefs.ErrPermissionDenied) {
		t.Fatalf("a second join with the token: %v", err)
	}
	tests := []struct {
		name, method, body string
		want               int
	}{
		{"GET", http.MethodGet, "", http.StatusMethodNotAllowed},
		{"not JSON", http.MethodPost, "token=x", http.StatusBadRequest},
		{"no token", http.MethodPost, `{"csr":"x"}`, http.StatusBadRequest},
		{"bad csr", http.MethodPost, `{"token":"` + tok + `","csr":"x"}`, http.StatusBadRequest},
		{"too big", http.MethodPost, `{"token":"` + strings.Repeat("a", 20<<10) + `"}`, http.StatusRequestEntityTooLarge},
		{"unknown token", http.MethodPost, `{"token":"moatjoin_0000000000000000.` + strings.Repeat("ab", 32) + `","csr":"` +
			strings.ReplaceAll(string(mustCSR(t)), "\n", `\n`) + `"}`, http.StatusForbidden},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req, _ := http.NewRequest(tt.method, srv.URL+Path, strings.NewReader(tt.body))
			resp, err := srv.Client().Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != tt.want || resp.Header.Get("Content-Type") != "application/json" {
				t.Fatalf("status %d (%s), want %d JSON", resp.StatusCode, resp.Header.Get("Content-Type"), tt.want)
			}
		})
	}
}

func mustCSR(t *testing.T) []byte {
	_, csr, err := Request("node-z")
	if err != nil {
		t.Fatal(err)
	}
	return csr
}
