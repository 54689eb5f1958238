package container

import (
	"fmt"

	"github.com/opencontainers/runtime-spec/specs-go"

	"github.com/moatsh/moat/internal/hostfs"
	"github.com/moatsh/moat/internal/idmap"
	"github.com/moatsh/moat/internal/runtime"
)

// MountsVolumes implements runtime.VolumeMounter: crun binds volumes with
// its idmap option; for gVisor, whose gofer takes no such option, Moat
// mounts an idmapped copy itself and binds that.
func (r *Runtime) MountsVolumes() bool { return true }

// volumeMounts are the OCI mounts of a sandbox's volumes, read-write,
// nosuid, nodev, so that a file the sandbox's uid N writes is owned by N
// on the volume's filesystem whichever host range the sandbox has:
// sandboxes with different ranges share the files, and the volume
// content API sees the same owners.
//
//   - crun: a bind mount of the volume's host mount with crun's "idmap"
//     option (the sandbox's user namespace mapping); the mount lives only
//     in the sandbox's mount namespace, nothing on the host to clean up.
//   - gVisor: an idmapped copy of the host mount with the sandbox's range
//     at <dir>/volumes/<i> (hostfs.MountVolume; UnmountAll removes it),
//     bound plainly: runsc's gofer runs as that range, so it sees and
//     makes files of uid N as N.
func (r *Runtime) volumeMounts(dir string, vs []runtime.VolumeMount, ids idmap.Range) ([]specs.Mount, error) {
	out := make([]specs.Mount, 0, len(vs))
	for i, v := range vs {
		src, opts := v.Source, []string{"rbind", "rw", "nosuid", "nodev", "idmap"}
		if r.o.flavor.gvisor != nil {
			var err error
			if src, err = hostfs.MountVolume(dir, i, v.Source, ids); err != nil {
				return nil, fmt.Errorf("volume %s: %w", v.Target, err)
			}
			opts = opts[:4]
		}
		out = append(out, specs.Mount{Destination: v.Target, Type: "bind", Source: src, Options: opts})
	}
	return out, nil
}
