package app

import (
	"testing"

	"github.com/moatsh/moat/internal/runtime"
)

// A test scope gets a host lock of its own; a scope out of range is refused.
func TestValidateScope(t *testing.T) {
	for _, tc := range []struct {
		scope    int
		wantLock string
		wantErr  bool
	}{
		{0, DefaultHostLock, false},
		{1, "/run/moat/serve-s1.lock", false},
		{9, "/run/moat/serve-s9.lock", false},
		{10, "", true},
		{-1, "", true},
	} {
		c := Config{DataDir: t.TempDir(), Backends: Backends{Host: runtime.Host{Scope: tc.scope}}}
		err := c.Validate()
		if (err != nil) != tc.wantErr {
			t.Errorf("scope %d: err %v, want error %v", tc.scope, err, tc.wantErr)
			continue
		}
		if err == nil && c.HostLock != tc.wantLock {
			t.Errorf("scope %d: host lock %s, want %s", tc.scope, c.HostLock, tc.wantLock)
		}
	}
}
