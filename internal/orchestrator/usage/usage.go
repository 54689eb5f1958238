// Package usage reads a running sandbox's resource usage for the metrics
// API: memory and disk from the runtime (disk from envd when the runtime
// cannot see inside, as for a VM's disk), and the CPU percentage between
// two readings. It exists apart from the lifecycle because it only reads:
// the caller keeps the previous reading.
package usage

import (
	"context"
	"fmt"
	"log/slog"
	"net/netip"
	"time"

	"github.com/moatsh/moat/internal/runtime"
	"github.com/moatsh/moat/internal/store"
)

// Metric is one resource reading of a running sandbox.
type Metric struct {
	Time       time.Time
	CPUCount   int
	CPUUsedPct float64
	MemUsed    uint64
	MemTotal   uint64
	MemCache   uint64
	DiskUsed   uint64
	DiskTotal  uint64
}

// Reader takes readings. Its fields are set once.
type Reader struct {
	// Stats is the runtime's reading (runtime.Runtime.Stats).
	Stats func(ctx context.Context, id string) (runtime.Stats, error)
	// Disk asks envd at addr for the root filesystem's used and total
	// bytes (envdcall.Client.Disk).
	Disk func(ctx context.Context, addr netip.Addr, token string) (used, total uint64, err error)
	Log  *slog.Logger
}

// Read takes a reading of sb, which runs at addr. CPU percentage is
// measured against the previous reading (prevCPU ns at prevAt), or over a
// short window when there is none within a minute. cpu and at are this
// reading's, for the next. Disk figures the runtime cannot see come from
// last when it is not nil, else from envd.
func (r Reader) Read(ctx context.Context, sb store.Sandbox, addr netip.Addr, prevCPU uint64, prevAt time.Time,
	last *Metric) (_ Metric, cpu uint64, at time.Time, _ error) {
	st, err := r.Stats(ctx, sb.ID)
	if err != nil {
		return Metric{}, 0, time.Time{}, fmt.Errorf("metrics of sandbox %s: %w", sb.ID, err)
	}
	if prevAt.IsZero() || time.Since(prevAt) > time.Minute {
		select {
		case <-ctx.Done():
			return Metric{}, 0, time.Time{}, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
		prevCPU, prevAt = st.CPUUsageNs, st.Time
		if st, err = r.Stats(ctx, sb.ID); err != nil {
			return Metric{}, 0, time.Time{}, fmt.Errorf("metrics of sandbox %s: %w", sb.ID, err)
		}
	}
	return r.metric(ctx, sb, addr, st, prevCPU, prevAt, last), st.CPUUsageNs, st.Time, nil
}

// Collect is Read for the orchestrator's collector, which reads every
// running sandbox each CollectEvery: it never waits for a second reading
// (without a previous one within a minute it only returns cpu and at:
// ok is false). Its caller passes a last reading most of the time: envd
// answers in the guest, whose CPU a microVM under TCG should not spend
// every few seconds on this.
func (r Reader) Collect(ctx context.Context, sb store.Sandbox, addr netip.Addr, prevCPU uint64, prevAt time.Time,
	last *Metric) (_ Metric, cpu uint64, at time.Time, ok bool, _ error) {
	st, err := r.Stats(ctx, sb.ID)
	if err != nil {
		return Metric{}, 0, time.Time{}, false, fmt.Errorf("metrics of sandbox %s: %w", sb.ID, err)
	}
	if prevAt.IsZero() || st.Time.Sub(prevAt) > time.Minute || !st.Time.After(prevAt) {
		return Metric{}, st.CPUUsageNs, st.Time, false, nil
	}
	return r.metric(ctx, sb, addr, st, prevCPU, prevAt, last), st.CPUUsageNs, st.Time, true, nil
}

// metric makes the reading of st against the previous CPU reading; the
// disk figures come from the runtime, else from last, else from envd.
func (r Reader) metric(ctx context.Context, sb store.Sandbox, addr netip.Addr, st runtime.Stats, prevCPU uint64, prevAt time.Time, last *Metric) Metric {
	m := Metric{Time: st.Time.UTC(), CPUCount: sb.CPUCount, MemUsed: st.MemoryBytes,
		MemTotal: st.MemoryLimit, DiskUsed: st.DiskUsed, DiskTotal: st.DiskTotal}
	switch {
	case m.DiskTotal != 0:
	case last != nil && last.DiskTotal != 0:
		m.DiskUsed, m.DiskTotal = last.DiskUsed, last.DiskTotal
	default: // the backend cannot see inside (a VM's disk): ask envd
		if used, total, err := r.Disk(ctx, addr, sb.EnvdAccessToken); err == nil {
			m.DiskUsed, m.DiskTotal = used, total
		} else {
			r.Log.Debug("disk metrics from envd", "sandboxID", sb.ID, "err", err)
			m.DiskTotal = uint64(sb.DiskSizeMB) << 20
		}
	}
	if m.MemTotal == 0 {
		m.MemTotal = uint64(sb.MemoryMB) << 20
	}
	if wall := st.Time.Sub(prevAt); wall > 0 && st.CPUUsageNs >= prevCPU && sb.CPUCount > 0 {
		pct := float64(st.CPUUsageNs-prevCPU) / float64(wall.Nanoseconds()) / float64(sb.CPUCount) * 100
		m.CPUUsedPct = min(pct, 100)
	}
	return m
}
