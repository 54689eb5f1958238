package container

import (
	"context"
	"log/slog"

	"github.com/opencontainers/runtime-spec/specs-go"

	"github.com/moatsh/moat/internal/idmap"
	"github.com/moatsh/moat/internal/runtime"
	"github.com/moatsh/moat/internal/runtime/container/oci"
)

// flavor is what differs between the OCI runtimes this backend drives:
// crun/runc (the "container" backend) or runsc (the "gvisor" backend,
// gvisor_linux.go and package oci). Everything else (overlay, disk quota, network, cgroups,
// ID ranges, recovery) is the same code.
type flavor struct {
	name   string        // registered runtime name, also Handle.Runtime
	subdir string        // sandbox dirs: <DataDir>/<subdir>/<id>
	gvisor *GVisorConfig // set for runsc
}

var containerFlavor = flavor{name: Name, subdir: "sandboxes"}

// allocator allocates from f's directory, counting the others' ranges as taken.
func (f flavor) allocator(dataDir string, b runtime.Host) *idmap.Allocator {
	return runtime.IDAllocator(dataDir, f.subdir, b)
}

// pick chooses the OCI binary.
func (f flavor) pick(ctx context.Context, log *slog.Logger, override, root string) (*oci.CLI, error) {
	if f.gvisor != nil {
		return oci.PickRunsc(ctx, log, *f.gvisor, root)
	}
	return oci.Pick(ctx, log, override, root)
}

// others are the OCI runtimes whose leftover Moat containers Recover removes.
func (f flavor) others(chosen *oci.CLI) []*oci.CLI {
	if f.gvisor != nil {
		return nil
	}
	return oci.Others(chosen)
}

// spec adapts the bundle config to the OCI binary.
func (f flavor) spec(s *specs.Spec) *specs.Spec {
	if f.gvisor != nil {
		runscSpec(s)
	}
	return s
}
