package runtime

import (
	"log/slog"
	"path/filepath"

	"github.com/moatsh/moat/internal/idmap"
	"github.com/moatsh/moat/internal/netpolicy"
)

// What the backends of one server share on the host, so that none of them
// needs to know another's layout: the network manager and the space of
// host ID ranges.

// SandboxDirs are every backend's sandbox directories under a data dir.
// Host ID ranges (package idmap) are allocated from one space across all
// of them, so backends in one process never share a range.
var SandboxDirs = []string{"sandboxes", filepath.Join("gvisor", "sandboxes"), filepath.Join("vm", "sandboxes")}

// IDAllocator allocates a backend's host ID ranges, recorded under
// dataDir/own (one of SandboxDirs), counting every other backend's ranges
// as taken, from the scope's first slot.
func IDAllocator(dataDir, own string, b Host) *idmap.Allocator {
	var also []string
	for _, d := range SandboxDirs {
		if d != own {
			also = append(also, filepath.Join(dataDir, d))
		}
	}
	return idmap.NewAllocator(filepath.Join(dataDir, own), also...).FromSlot(b.ScopeFirstSlot())
}

// Network returns cfg.Network, the server's network manager, or makes one
// in cfg's scope for a backend that runs alone (tests, benchmarks).
func Network(cfg Config, log *slog.Logger) (*netpolicy.Manager, error) {
	if cfg.Network != nil {
		return cfg.Network, nil
	}
	return netpolicy.New(log, netpolicy.WithTestScope(cfg.Host.Scope))
}
