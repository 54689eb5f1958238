package orchestrator

import (
	"context"
	"fmt"
	"time"

	"github.com/moatsh/moat/internal/store"
)

// Metrics returns the current resource reading of a running sandbox (empty
// for a paused one). CPU percentage is measured against the previous call,
// or over a short window on the first call.
func (o *Orchestrator) Metrics(ctx context.Context, id string) ([]Metric, error) {
	o.mu.RLock()
	e, ok := o.live[id]
	var sb store.Sandbox
	if ok {
		sb = e.sb
	}
	o.mu.RUnlock()
	if !ok {
		return nil, errNotFound(id)
	}
	if sb.State != store.StateRunning {
		return []Metric{}, nil
	}
	st, err := o.rt.Stats(ctx, id)
	if err != nil {
		return nil, fmt.Errorf("metrics of sandbox %s: %w", id, err)
	}
	o.mu.RLock()
	prevCPU, prevAt := e.lastCPU, e.lastAt
	o.mu.RUnlock()
	if prevAt.IsZero() || time.Since(prevAt) > time.Minute {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
		prevCPU, prevAt = st.CPUUsageNs, st.Time
		if st, err = o.rt.Stats(ctx, id); err != nil {
			return nil, fmt.Errorf("metrics of sandbox %s: %w", id, err)
		}
	}
	o.mu.Lock()
	e.lastCPU, e.lastAt = st.CPUUsageNs, st.Time
	o.mu.Unlock()
	m := Metric{Time: st.Time.UTC(), CPUCount: sb.CPUCount, MemUsed: st.MemoryBytes,
		MemTotal: st.MemoryLimit, DiskUsed: st.DiskUsed, DiskTotal: st.DiskTotal}
	if m.DiskTotal == 0 {
		m.DiskTotal = uint64(sb.DiskSizeMB) << 20
	}
	if m.MemTotal == 0 {
		m.MemTotal = uint64(sb.MemoryMB) << 20
	}
	if wall := st.Time.Sub(prevAt); wall > 0 && st.CPUUsageNs >= prevCPU && sb.CPUCount > 0 {
		pct := float64(st.CPUUsageNs-prevCPU) / float64(wall.Nanoseconds()) / float64(sb.CPUCount) * 100
		m.CPUUsedPct = min(pct, 100)
	}
	return []Metric{m}, nil
}
