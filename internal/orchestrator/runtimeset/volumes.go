package runtimeset

import (
	"github.com/moatsh/moat/internal/errdefs"
	"github.com/moatsh/moat/internal/runtime"
)

// CheckVolumes refuses volume mounts on backend name ("" = the default)
// unless it is a runtime.VolumeMounter that mounts them.
func (s *Set) CheckVolumes(name string) error {
	rt, err := s.Named(name)
	if err != nil {
		return err
	}
	if m, ok := rt.(runtime.VolumeMounter); !ok || !m.MountsVolumes() {
		return errdefs.Publicf(errdefs.ErrInvalidArgument,
			"volumeMounts are not supported on the %s runtime yet (use the container runtime)", rt.Name())
	}
	return nil
}
