package orchestrator

import (
	"net/http"
	"testing"
)

// TestEnvdHTTPClientPoolsNothing: the default envd client opens a
// connection per call (envdHTTPClient says why a pooled one, keyed by an
// address the next sandbox inherits, is a hazard).
func TestEnvdHTTPClientPoolsNothing(t *testing.T) {
	tr, ok := envdHTTPClient().Transport.(*http.Transport)
	if !ok || !tr.DisableKeepAlives || tr.DialContext == nil {
		t.Fatalf("envd client transport %T: want an *http.Transport that pools nothing and dials through dialrace", envdHTTPClient().Transport)
	}
}
