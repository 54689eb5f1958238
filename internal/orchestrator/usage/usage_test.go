package usage

import (
	"context"
	"errors"
	"log/slog"
	"net/netip"
	"testing"
	"time"

	"github.com/moatsh/moat/internal/errdefs"
	"github.com/moatsh/moat/internal/runtime"
	"github.com/moatsh/moat/internal/store"
)

func TestRead(t *testing.T) {
	now := time.Now()
	sb := store.Sandbox{ID: "s1", CPUCount: 2, MemoryMB: 512, DiskSizeMB: 1024, EnvdAccessToken: "tok"}
	addr := netip.MustParseAddr("10.11.0.2")
	envdDisk := func(ctx context.Context, a netip.Addr, token string) (uint64, uint64, error) {
		if a != addr || token != "tok" {
			return 0, 0, errors.New("wrong sandbox")
		}
		return 3 << 20, 8 << 20, nil
	}
	noDisk := func(context.Context, netip.Addr, string) (uint64, uint64, error) {
		return 0, 0, errdefs.ErrUnavailable
	}
	for _, tc := range []struct {
		name    string
		stats   []runtime.Stats // returned in turn
		disk    func(context.Context, netip.Addr, string) (uint64, uint64, error)
		prevCPU uint64
		prevAt  time.Time
		want    Metric
		wantCPU uint64
	}{{
		name: "against the previous reading",
		stats: []runtime.Stats{{Time: now.Add(time.Second), CPUUsageNs: 1.5e9, MemoryBytes: 100, MemoryLimit: 200,
			DiskUsed: 5, DiskTotal: 10}},
		prevCPU: 0.5e9, prevAt: now, // 1 s of CPU in 1 s over 2 CPUs
		want:    Metric{CPUCount: 2, CPUUsedPct: 50, MemUsed: 100, MemTotal: 200, DiskUsed: 5, DiskTotal: 10},
		wantCPU: 1.5e9,
	}, {
		name: "no previous reading: two readings apart",
		stats: []runtime.Stats{{Time: now, CPUUsageNs: 1e9, DiskTotal: 1},
			{Time: now.Add(100 * time.Millisecond), CPUUsageNs: 1.1e9, DiskTotal: 1}},
		want:    Metric{CPUCount: 2, CPUUsedPct: 50, MemTotal: 512 << 20, DiskTotal: 1},
		wantCPU: 1.1e9,
	}, {
		name: "previous reading too old",
		stats: []runtime.Stats{{Time: now, CPUUsageNs: 1e9, DiskTotal: 1},
			{Time: now.Add(100 * time.Millisecond), CPUUsageNs: 1e9, DiskTotal: 1}},
		prevCPU: 0, prevAt: now.Add(-2 * time.Minute),
		want:    Metric{CPUCount: 2, MemTotal: 512 << 20, DiskTotal: 1},
		wantCPU: 1e9,
	}, {
		name:    "capped at 100",
		stats:   []runtime.Stats{{Time: now.Add(time.Second), CPUUsageNs: 10e9, DiskTotal: 1}},
		prevCPU: 0, prevAt: now,
		want:    Metric{CPUCount: 2, CPUUsedPct: 100, MemTotal: 512 << 20, DiskTotal: 1},
		wantCPU: 10e9,
	}, {
		name:    "counter went back (restarted sandbox)",
		stats:   []runtime.Stats{{Time: now.Add(time.Second), CPUUsageNs: 1e9, DiskTotal: 1}},
		prevCPU: 5e9, prevAt: now,
		want:    Metric{CPUCount: 2, MemTotal: 512 << 20, DiskTotal: 1},
		wantCPU: 1e9,
	}, {
		name:    "disk from envd when the runtime cannot see it",
		stats:   []runtime.Stats{{Time: now.Add(time.Second), CPUUsageNs: 1, MemoryBytes: 7, MemoryLimit: 9}},
		disk:    envdDisk,
		prevCPU: 1, prevAt: now,
		want:    Metric{CPUCount: 2, MemUsed: 7, MemTotal: 9, DiskUsed: 3 << 20, DiskTotal: 8 << 20},
		wantCPU: 1,
	}, {
		name:    "disk size from the sandbox when envd cannot tell",
		stats:   []runtime.Stats{{Time: now.Add(time.Second), CPUUsageNs: 1}},
		disk:    noDisk,
		prevCPU: 1, prevAt: now,
		want:    Metric{CPUCount: 2, MemTotal: 512 << 20, DiskTotal: 1024 << 20},
		wantCPU: 1,
	}} {
		t.Run(tc.name, func(t *testing.T) {
			calls := 0
			r := Reader{Log: slog.New(slog.DiscardHandler), Disk: tc.disk,
				Stats: func(ctx context.Context, id string) (runtime.Stats, error) {
					if id != sb.ID || calls == len(tc.stats) {
						t.Fatalf("stats call %d for %s", calls+1, id)
					}
					calls++
					return tc.stats[calls-1], nil
				}}
			if r.Disk == nil {
				r.Disk = func(context.Context, netip.Addr, string) (uint64, uint64, error) {
					t.Fatal("envd asked although the runtime reported the disk")
					return 0, 0, nil
				}
			}
			m, cpu, at, err := r.Read(context.Background(), sb, addr, tc.prevCPU, tc.prevAt, nil)
			if err != nil {
				t.Fatal(err)
			}
			last := tc.stats[len(tc.stats)-1]
			tc.want.Time = last.Time.UTC()
			if m != tc.want || cpu != tc.wantCPU || !at.Equal(last.Time) || calls != len(tc.stats) {
				t.Fatalf("got %+v cpu %d at %v after %d stats calls\nwant %+v cpu %d at %v after %d",
					m, cpu, at, calls, tc.want, tc.wantCPU, last.Time, len(tc.stats))
			}
		})
	}
}

func TestReadErrors(t *testing.T) {
	sb := store.Sandbox{ID: "s1", CPUCount: 1}
	gone := func(context.Context, string) (runtime.Stats, error) { return runtime.Stats{}, errdefs.ErrNotFound }
	ok := func(context.Context, string) (runtime.Stats, error) { return runtime.Stats{Time: time.Now()}, nil }
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	for _, tc := range []struct {
		name   string
		ctx    context.Context
		stats  func(context.Context, string) (runtime.Stats, error)
		prevAt time.Time
		want   error
	}{
		{"runtime error keeps its kind", context.Background(), gone, time.Now(), errdefs.ErrNotFound},
		{"cancelled while waiting for the second reading", cancelled, ok, time.Time{}, context.Canceled},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := Reader{Stats: tc.stats, Log: slog.New(slog.DiscardHandler)}
			if _, _, _, err := r.Read(tc.ctx, sb, netip.Addr{}, 0, tc.prevAt, nil); !errors.Is(err, tc.want) {
				t.Fatalf("err %v, want %v", err, tc.want)
			}
		})
	}
}

func TestCollect(t *testing.T) {
	now := time.Now()
	sb := store.Sandbox{ID: "s1", CPUCount: 2, MemoryMB: 512, DiskSizeMB: 1024, EnvdAccessToken: "tok"}
	addr := netip.MustParseAddr("10.11.0.2")
	asked := 0
	r := Reader{Log: slog.New(slog.DiscardHandler),
		Disk: func(context.Context, netip.Addr, string) (uint64, uint64, error) {
			asked++
			return 3 << 20, 8 << 20, nil
		}}
	stats := func(st runtime.Stats) {
		r.Stats = func(context.Context, string) (runtime.Stats, error) { return st, nil }
	}
	ctx := context.Background()

	// No previous reading: only the CPU time, no wait and no metric.
	stats(runtime.Stats{Time: now, CPUUsageNs: 1e9})
	if _, cpu, at, ok, err := r.Collect(ctx, sb, addr, 0, time.Time{}, nil); err != nil || ok || cpu != 1e9 || !at.Equal(now) {
		t.Fatalf("first collect: cpu %v at %v ok %v err %v", cpu, at, ok, err)
	}
	// A microVM (no disk from the runtime): envd is asked without a last reading...
	stats(runtime.Stats{Time: now.Add(CollectEvery), CPUUsageNs: 6e9, MemoryBytes: 100, MemoryLimit: 200})
	m, _, _, ok, err := r.Collect(ctx, sb, addr, 1e9, now, nil)
	if err != nil || !ok || m.CPUUsedPct != 50 || m.DiskUsed != 3<<20 || m.DiskTotal != 8<<20 || asked != 1 {
		t.Fatalf("collect: %+v ok %v err %v (envd asked %d times)", m, ok, err, asked)
	}
	// ...and not with one: its disk figures are kept.
	last := Metric{DiskUsed: 1, DiskTotal: 2}
	if m, _, _, _, _ := r.Collect(ctx, sb, addr, 1e9, now, &last); m.DiskUsed != 1 || m.DiskTotal != 2 || asked != 1 {
		t.Fatalf("collect with a last reading: %+v (envd asked %d times)", m, asked)
	}
	// A previous reading over a minute old, or not before this one, is no base.
	for _, prev := range []time.Time{now.Add(-2 * time.Minute), now.Add(CollectEvery)} {
		if _, _, _, ok, _ := r.Collect(ctx, sb, addr, 1e9, prev, &last); ok {
			t.Fatalf("collect against a reading at %v made a metric", prev)
		}
	}
	r.Stats = func(context.Context, string) (runtime.Stats, error) { return runtime.Stats{}, errdefs.ErrNotFound }
	if _, _, _, _, err := r.Collect(ctx, sb, addr, 0, time.Time{}, nil); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("collect of a gone sandbox: %v", err)
	}
}
