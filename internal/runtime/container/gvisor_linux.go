package container

import (
	"os"
	"path/filepath"

	"github.com/opencontainers/runtime-spec/specs-go"

	"github.com/moatsh/moat/internal/runtime/container/oci"
)

// GVisorConfig selects how runsc runs sandboxes (see package gvisor and
// oci.RunscConfig).
type GVisorConfig = oci.RunscConfig

// WithGVisor makes the backend run sandboxes with runsc under the name
// "gvisor", in <DataDir>/gvisor/sandboxes and the OCI root /run/moat/runsc.
func WithGVisor(c GVisorConfig) Option {
	if c.Network == "" {
		c.Network = "sandbox"
	}
	return func(o *options) {
		o.flavor = flavor{name: "gvisor", subdir: filepath.Join("gvisor", "sandboxes"), gvisor: &c}
	}
}

// runscSpec adapts a container bundle config to runsc.
//   - No seccomp filter: runsc (this version) does not apply OCI seccomp
//     to the application; every system call of the sandbox is served by
//     gVisor's kernel (the Sentry), which itself runs under runsc's own
//     host seccomp filter.
//   - /sys is gVisor's own sysfs, not a bind of a host sysfs.
func runscSpec(s *specs.Spec) {
	s.Linux.Seccomp = nil
	var mounts []specs.Mount
	for _, m := range s.Mounts {
		switch m.Destination {
		case "/sys":
			m = specs.Mount{Destination: "/sys", Type: "sysfs", Source: "sysfs", Options: []string{"nosuid", "noexec", "nodev", "ro"}}
		case "/sys/fs/cgroup":
			continue
		}
		mounts = append(mounts, m)
	}
	s.Mounts = mounts
}

// tmpOnDisk binds the sandbox's own /tmp (in its overlay, on its disk)
// over itself. Without a mount at /tmp, runsc mounts a tmpfs there, whose
// files live in the Sentry's memory: they would count against the
// sandbox's memory rather than its disk, and a filesystem-only pause
// would lose them, while on the container and microVM backends /tmp is
// the sandbox's disk. Nothing when the template has no /tmp directory.
func tmpOnDisk(dir string) []specs.Mount {
	src := filepath.Join(dir, "rootfs", "tmp")
	if fi, err := os.Lstat(src); err != nil || !fi.IsDir() {
		return nil
	}
	return []specs.Mount{{Destination: "/tmp", Type: "bind", Source: src, Options: []string{"rbind", "rw", "nosuid", "nodev"}}}
}
