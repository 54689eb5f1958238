// Package envd_test runs envd's integration tests against a real envd
// process started by envdtest, with raw requests that reproduce what E2B
// SDKs send.
package envd_test

import (
	"net/http"
	"testing"

	"github.com/moatsh/moat/internal/envd/envdtest"
)

func TestHealth(t *testing.T) {
	e := envdtest.Start(t)
	resp, err := http.Get(e.URL + "/health")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent || resp.Header.Get("Cache-Control") != "no-store" {
		t.Fatalf("GET /health = %s %v", resp.Status, resp.Header)
	}
}
