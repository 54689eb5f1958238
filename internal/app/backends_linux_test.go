package app

import (
	"context"
	"errors"
	"testing"

	"github.com/moatsh/moat/internal/errdefs"
	"github.com/moatsh/moat/internal/runtime"
)

// TestBackendSettingsValidated: each backend refuses its own bad setting,
// before it touches the host, with an error naming it.
func TestBackendSettingsValidated(t *testing.T) {
	cfg := runtime.Config{DataDir: t.TempDir()}
	for _, tc := range []struct {
		name string
		b    Backends
	}{
		{"container", Backends{Container: ContainerSettings{OCIRuntime: "docker"}}},
		{"gvisor", Backends{GVisor: GVisorSettings{Network: "bridge"}}},
		{"vm", Backends{VM: VMSettings{Accel: "hvf"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := newBackend(context.Background(), tc.name, cfg, tc.b)
			if !errors.Is(err, errdefs.ErrInvalidArgument) {
				t.Fatalf("newBackend: %v, want an invalid-argument error", err)
			}
		})
	}
	for _, s := range []error{ContainerSettings{OCIRuntime: "crun"}.Validate(), GVisorSettings{Network: "host"}.Validate(), VMSettings{Accel: "tcg"}.Validate()} {
		if s != nil {
			t.Errorf("a good setting refused: %v", s)
		}
	}
}
