package gvisor

import (
	"context"

	"github.com/moatsh/moat/internal/runtime"
	"github.com/moatsh/moat/internal/runtime/container"
)

func init() {
	runtime.Register(Name, func(ctx context.Context, cfg runtime.Config) (runtime.Runtime, error) {
		return New(ctx, cfg)
	})
}

// New returns the gvisor backend: the container backend driving runsc
// (cfg.Backends: Runsc, GVisorPlatform, GVisorNetwork, GVisorFlags).
func New(ctx context.Context, cfg runtime.Config, opts ...container.Option) (*container.Runtime, error) {
	b := cfg.Backends
	c := container.GVisorConfig{Platform: b.GVisorPlatform, Network: b.GVisorNetwork, Flags: b.GVisorFlags, Binary: b.Runsc}
	return container.New(ctx, cfg, append([]container.Option{container.WithGVisor(c)}, opts...)...)
}
