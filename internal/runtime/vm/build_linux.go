package vm

import (
	"context"
	"fmt"
	"path/filepath"

	"github.com/moatsh/moat/internal/runtime"
)

var _ runtime.BuildRuntimer = (*Runtime)(nil)

// BuildRuntime implements runtime.BuildRuntimer: template builds on a
// microVM server run their RUN and COPY steps in container sandboxes
// (crun/runc, the container backend's user namespace, seccomp profile,
// cgroup limits and host-side network policy), sharing this runtime's
// network manager and data directory, so addresses, nftables rules and
// host ID ranges never collide. The built root filesystem then becomes a
// microVM template like any other. Build sandboxes left by a crash are
// not recovered by it (its Recover would tear down this runtime's
// networks); the microVM runtime's own Recover removes their networks.
func (r *Runtime) BuildRuntime(ctx context.Context) (runtime.Runtime, error) {
	cfg := runtime.Config{DataDir: filepath.Dir(r.dir), Logger: r.log.With("for", "template builds"), Network: r.net, Host: r.host}
	build := r.build
	if build == nil { // alone (tests, benchmarks): the registered container backend with its defaults
		build = func(ctx context.Context, cfg runtime.Config) (runtime.Runtime, error) {
			return runtime.New(ctx, "container", cfg)
		}
	}
	rt, err := build(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("vm runtime: build sandboxes: %w", err)
	}
	return rt, nil
}
