package vmbench

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"net/netip"
	"strconv"
	"time"

	"github.com/moatsh/moat/internal/netpolicy"
	"github.com/moatsh/moat/internal/runtime"
	"github.com/moatsh/moat/internal/runtime/vm"
	"github.com/moatsh/moat/internal/runtime/vm/guestenvd"
)

// JailBench says what CompareJail measures.
type JailBench struct {
	DataDir    string // the vm runtime's data dir (its template cache is reused)
	TemplateID string
	RootfsDir  string // the template's root filesystem
	N          int    // sandboxes per side
	Logger     *slog.Logger
	VM         vm.Settings // the accelerator and guest init of `moat serve`
}

// CompareJail times create → first command (`true` through envd) of
// microVM sandboxes, alternating a Runtime that jails QEMU with one
// WithoutJail over the same data dir and template, n of each after one
// untimed warm-up each (it may boot and snapshot the template). It uses a
// network scope of its own, so a running server's objects are never
// touched. It returns the jailed and the unjailed samples.
func CompareJail(ctx context.Context, b JailBench) (jailed, unjailed []time.Duration, err error) {
	if b.Logger == nil {
		b.Logger = slog.New(slog.DiscardHandler)
	}
	m, err := netpolicy.New(b.Logger, netpolicy.WithScope("moatbj", "mj", netip.MustParsePrefix("10.234.0.0/16")))
	if err != nil {
		return nil, nil, fmt.Errorf("jail bench: %w", err)
	}
	defer m.Close()
	cfg := runtime.Config{DataDir: b.DataDir, Logger: b.Logger}
	jr, err := vm.New(ctx, cfg, vm.WithSettings(b.VM), vm.WithNetwork(m), vm.WithPrelaunch(0))
	if err != nil {
		return nil, nil, fmt.Errorf("jail bench: %w", err)
	}
	pr, err := vm.New(ctx, cfg, vm.WithSettings(b.VM), vm.WithNetwork(m), vm.WithoutJail(), vm.WithPrelaunch(0))
	if err != nil {
		return nil, nil, fmt.Errorf("jail bench: %w", err)
	}
	for i := -1; i < b.N; i++ {
		for _, side := range []struct {
			rt  *vm.Runtime
			out *[]time.Duration
		}{{jr, &jailed}, {pr, &unjailed}} {
			d, err := b.createFirstCommand(ctx, side.rt)
			if err != nil {
				return jailed, unjailed, fmt.Errorf("jail bench: %w", err)
			}
			if i >= 0 {
				*side.out = append(*side.out, d)
			}
		}
	}
	return jailed, unjailed, nil
}

// createFirstCommand creates one sandbox, runs `true` in it and kills it;
// it returns the time to the command's end.
func (b JailBench) createFirstCommand(ctx context.Context, r *vm.Runtime) (time.Duration, error) {
	id := make([]byte, 8)
	_, _ = rand.Read(id)
	spec := runtime.Spec{ID: "bj" + hex.EncodeToString(id), TemplateID: b.TemplateID, RootfsDir: b.RootfsDir,
		VCPUs: 2, MemoryMiB: 512}
	start := time.Now()
	h, err := r.Create(ctx, spec)
	if err != nil {
		return 0, err
	}
	defer func() { _ = r.Kill(context.WithoutCancel(ctx), spec.ID) }()
	if err := runTrue(ctx, h); err != nil {
		return 0, fmt.Errorf("sandbox %s: first command: %w", spec.ID, err)
	}
	return time.Since(start), nil
}

// runTrue runs `true` as user through envd's process API.
func runTrue(ctx context.Context, h *runtime.Handle) error {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	addr := h.Addr.String() + ":" + strconv.Itoa(guestenvd.Port)
	return guestenvd.Run(ctx, addr, "user", []string{"true"})
}
