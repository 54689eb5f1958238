package orchestrator

import (
	"github.com/moatsh/moat/internal/orchestrator/runtimeset"
)

// MetadataRuntime is the create metadata key that picks a sandbox's
// runtime ("container", "gvisor", "vm"): E2B's create body has no runtime
// field, and metadata is what every SDK passes through unchanged. The
// server echoes the runtime in the sandbox's metadata under the same key.
const MetadataRuntime = "moat.runtime"

// EgressSetter is a runtime with a host-side network policy (see
// runtimeset.EgressSetter).
type EgressSetter = runtimeset.EgressSetter

// TemplatePruner is a runtime with per-template files to prune (see
// runtimeset.TemplatePruner).
type TemplatePruner = runtimeset.TemplatePruner

// chooseRuntime decides the backend of a new sandbox: the create's
// metadata (MetadataRuntime), else the template's runtime, else the
// server's default. A name that is not enabled is ErrInvalidArgument.
func (o *Orchestrator) chooseRuntime(tplRuntime string, metadata map[string]string) (string, error) {
	name := metadata[MetadataRuntime]
	if name == "" {
		name = tplRuntime
	}
	rt, err := o.rts.Named(name)
	if err != nil {
		return "", err
	}
	return rt.Name(), nil
}

// Runtimes lists the enabled backends, the default first.
func (o *Orchestrator) Runtimes() []string { return o.rts.Names() }
