package gvisor

import (
	"context"
	"fmt"

	"github.com/moatsh/moat/internal/errdefs"
	"github.com/moatsh/moat/internal/runtime"
	"github.com/moatsh/moat/internal/runtime/container"
)

func init() {
	runtime.Register(Name, func(ctx context.Context, cfg runtime.Config) (runtime.Runtime, error) {
		return New(ctx, cfg, Settings{})
	})
}

// Settings are the gvisor backend's own settings (moat serve's flags;
// zero values are the defaults).
type Settings struct {
	Runsc    string   // the runsc binary ("" = runsc on PATH)
	Platform string   // runsc --platform ("" = runsc's default, systrap)
	Network  string   // runsc --network: "sandbox" (gVisor's netstack, the default) or "host"
	Flags    []string // more runsc flags (e.g. debug logs)
}

// Validate refuses a setting the backend cannot use.
func (s Settings) Validate() error {
	switch s.Network {
	case "", "sandbox", "host":
		return nil
	}
	return fmt.Errorf("gvisor runtime: network %q: want sandbox or host: %w", s.Network, errdefs.ErrInvalidArgument)
}

// New returns the gvisor backend: the container backend driving runsc
// as s says.
func New(ctx context.Context, cfg runtime.Config, s Settings, opts ...container.Option) (*container.Runtime, error) {
	if err := s.Validate(); err != nil {
		return nil, err
	}
	c := container.GVisorConfig{Platform: s.Platform, Network: s.Network, Flags: s.Flags, Binary: s.Runsc}
	return container.New(ctx, cfg, append([]container.Option{container.WithGVisor(c)}, opts...)...)
}
