package app

import (
	"context"

	"github.com/moatsh/moat/internal/runtime"
	"github.com/moatsh/moat/internal/runtime/container"
	"github.com/moatsh/moat/internal/runtime/gvisor"
	"github.com/moatsh/moat/internal/runtime/vm"
)

// The runtime backends `moat serve` can run. The wiring owns them: no
// other package outside internal/runtime imports a backend; the
// backends' settings reach them typed from here, each validated by its
// backend (Settings.Validate), and a backend that needs another (the vm
// backend's template build sandboxes) gets a constructor, not the other's
// package.

// The backends' settings types, for the commands that read them from
// flags.
type (
	ContainerSettings = container.Settings
	GVisorSettings    = gvisor.Settings
	VMSettings        = vm.Settings
)

// Backends are every backend's settings and the host scope they share.
type Backends struct {
	Container ContainerSettings
	GVisor    GVisorSettings
	VM        VMSettings
	Host      runtime.Host
}

// newBackend constructs backend name with its settings in b; a name the
// wiring does not know is looked up in runtime's registry (tests register
// fakes).
func newBackend(ctx context.Context, name string, cfg runtime.Config, b Backends) (runtime.Runtime, error) {
	switch name {
	case container.Name:
		return container.New(ctx, cfg, container.WithSettings(b.Container))
	case gvisor.Name:
		return gvisor.New(ctx, cfg, b.GVisor)
	case vm.Name:
		cfg.BuildRuntime = NewContainerRuntime(b.Container)
		return vm.New(ctx, cfg, vm.WithSettings(b.VM))
	}
	return runtime.New(ctx, name, cfg)
}

// NewContainerRuntime makes the container backend with s: another
// backend's template build sandboxes, and the benchmarks that run build
// sandboxes alone (moat bench --template-build).
func NewContainerRuntime(s ContainerSettings) func(context.Context, runtime.Config) (runtime.Runtime, error) {
	return func(ctx context.Context, cfg runtime.Config) (runtime.Runtime, error) {
		return container.New(ctx, cfg, container.WithSettings(s))
	}
}
