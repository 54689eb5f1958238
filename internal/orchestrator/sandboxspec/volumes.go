package sandboxspec

import (
	"github.com/moatsh/moat/internal/errdefs"
	"github.com/moatsh/moat/internal/runtime"
	"github.com/moatsh/moat/internal/store"
)

// VolumeMount is a volume a create mounts: its record and the host
// directory (the volume's host mount) to bind at Path.
type VolumeMount struct {
	store.VolumeMount
	Source string
}

// AddVolumes puts vs in spec and their records in sb, refusing a create
// from a snapshot (a snapshot does not record volumes) and what check
// (the runtime's: can it mount volumes?) refuses.
func AddVolumes(spec *runtime.Spec, sb *store.Sandbox, vs []VolumeMount, check func(runtime string) error) error {
	if len(vs) == 0 {
		return nil
	}
	if spec.Snapshot != "" {
		return errdefs.Publicf(errdefs.ErrInvalidArgument, "volumeMounts cannot be used with a create from a snapshot")
	}
	if err := check(spec.Runtime); err != nil {
		return err
	}
	for _, v := range vs {
		spec.Volumes = append(spec.Volumes, runtime.VolumeMount{Source: v.Source, Target: v.Path})
		sb.VolumeMounts = append(sb.VolumeMounts, v.VolumeMount)
	}
	return nil
}

// CheckSnapshotVolumes refuses a snapshot (and so a fork) of a sandbox
// that mounts volumes: the guest's memory would carry mounts of volumes
// the snapshot holds no claim on (a volume may be deleted while the
// snapshot exists), so sandboxes started from it could not be given
// them, and a copy of an open file's cached pages would outlive its
// writer. Refused with 400 rather than half-done.
func CheckSnapshotVolumes(sb store.Sandbox) error {
	if len(sb.VolumeMounts) == 0 {
		return nil
	}
	return errdefs.Publicf(errdefs.ErrInvalidArgument,
		"sandbox %s mounts volumes: snapshots and forks of a sandbox with volumeMounts are not supported", sb.ID)
}
