package gvisor

import (
	"context"
	"os"
	"strings"

	"github.com/moatsh/moat/internal/runtime"
	"github.com/moatsh/moat/internal/runtime/container"
)

func init() {
	runtime.Register(Name, func(ctx context.Context, cfg runtime.Config) (runtime.Runtime, error) {
		return New(ctx, cfg)
	})
}

// New returns the gvisor backend: the container backend driving runsc.
// MOAT_GVISOR_PLATFORM overrides the platform (default ptrace),
// MOAT_GVISOR_NETWORK the network mode (default sandbox) and
// MOAT_GVISOR_FLAGS adds runsc flags (space-separated, e.g. debug logs)
// and MOAT_RUNSC is the runsc binary (default: runsc on PATH).
func New(ctx context.Context, cfg runtime.Config, opts ...container.Option) (*container.Runtime, error) {
	c := container.GVisorConfig{Platform: os.Getenv("MOAT_GVISOR_PLATFORM"), Network: os.Getenv("MOAT_GVISOR_NETWORK"),
		Flags: strings.Fields(os.Getenv("MOAT_GVISOR_FLAGS")), Binary: os.Getenv("MOAT_RUNSC")}
	return container.New(ctx, cfg, append([]container.Option{container.WithGVisor(c)}, opts...)...)
}
