package app

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"

	"github.com/moatsh/moat/internal/netpolicy"
	"github.com/moatsh/moat/internal/runtime"
)

// runtimeNames splits Config.Runtime ("container", or "container,gvisor,vm":
// several side by side, the first the default) into names.
func runtimeNames(s string) ([]string, error) {
	var out []string
	seen := map[string]bool{}
	for _, n := range strings.Split(s, ",") {
		n = strings.TrimSpace(n)
		if n == "" {
			continue
		}
		if seen[n] {
			return nil, fmt.Errorf("runtime %s given twice", n)
		}
		seen[n] = true
		out = append(out, n)
	}
	if len(out) == 0 {
		return nil, errors.New("no runtime given")
	}
	return out, nil
}

// openRuntimes constructs the backends named in spec with cfg and their
// settings in b, sharing one network manager (cfg.Network). close releases
// them, then the manager.
func openRuntimes(ctx context.Context, spec string, cfg runtime.Config, b Backends) (rts []runtime.Runtime, close func(), err error) {
	log := cfg.Logger
	names, err := runtimeNames(spec)
	if err != nil {
		return nil, nil, fmt.Errorf("runtime: %w", err)
	}
	if cfg.Network, err = netpolicy.New(log, netpolicy.WithTestScope(cfg.Host.Scope)); err != nil {
		return nil, nil, fmt.Errorf("network: %w", err)
	}
	close = func() {
		for i := len(rts) - 1; i >= 0; i-- {
			if c, ok := rts[i].(io.Closer); ok {
				if err := c.Close(); err != nil {
					log.Warn("close runtime", "runtime", rts[i].Name(), "err", err)
				}
			}
		}
		if err := cfg.Network.Close(); err != nil {
			log.Warn("close network manager", "err", err)
		}
	}
	for _, n := range names {
		rt, err := newBackend(ctx, n, cfg, b) // backends_linux.go
		if err != nil {
			close()
			return nil, nil, fmt.Errorf("runtime %s: %w", n, err)
		}
		rts = append(rts, rt)
	}
	return rts, close, nil
}

// buildRuntime picks the runtime template build sandboxes run on: the
// container runtime when enabled, else the first whose sandboxes can be
// build sandboxes (gvisor: the same overlay upper dir), else what a
// runtime provides (runtime.BuildRuntimer: the microVM backend's
// container runtime). nil means RUN and COPY steps are refused.
func buildRuntime(ctx context.Context, rts []runtime.Runtime, log *slog.Logger) runtime.Runtime {
	for _, want := range []string{"container", "gvisor"} {
		for _, rt := range rts {
			if rt.Name() == want {
				return rt
			}
		}
	}
	for _, rt := range rts {
		if b, ok := rt.(runtime.BuildRuntimer); ok {
			brt, err := b.BuildRuntime(ctx)
			if err != nil {
				log.Warn("RUN and COPY steps of template builds are unavailable", "err", err)
				return nil
			}
			return brt
		}
	}
	return rts[0]
}
