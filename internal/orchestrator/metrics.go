package orchestrator

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"time"

	"github.com/moatsh/moat/internal/store"
)

// Metrics returns the current resource reading of one of team's running
// sandboxes (empty for a paused one; ErrNotFound for another team's). CPU
// percentage is measured against the previous call, or over a short window
// on the first call.
func (o *Orchestrator) Metrics(ctx context.Context, team, id string) ([]Metric, error) {
	o.mu.RLock()
	e, ok := o.live[id]
	ok = ok && e.ownedBy(team)
	var sb store.Sandbox
	var addr netip.Addr
	if ok {
		sb, addr = e.sb, e.addr
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
	if m.DiskTotal == 0 { // the backend cannot see inside (a VM's disk): ask envd
		if used, total, err := o.envdDisk(ctx, addr, sb); err == nil {
			m.DiskUsed, m.DiskTotal = used, total
		} else {
			o.log.Debug("disk metrics from envd", "sandboxID", id, "err", err)
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
	return []Metric{m}, nil
}

// envdDisk reads the used and total bytes of the sandbox's root filesystem
// from envd's GET /metrics.
func (o *Orchestrator) envdDisk(ctx context.Context, addr netip.Addr, sb store.Sandbox) (used, total uint64, err error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, o.envdURL(addr)+"/metrics", nil)
	if err != nil {
		return 0, 0, err
	}
	if sb.EnvdAccessToken != "" {
		req.Header.Set("X-Access-Token", sb.EnvdAccessToken)
	}
	resp, err := o.http.Do(req)
	if err != nil {
		return 0, 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return 0, 0, fmt.Errorf("envd /metrics: status %d", resp.StatusCode)
	}
	var m struct {
		DiskUsed  uint64 `json:"disk_used"`
		DiskTotal uint64 `json:"disk_total"`
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, 64<<10)).Decode(&m); err != nil {
		return 0, 0, fmt.Errorf("envd /metrics: %w", err)
	}
	if m.DiskTotal == 0 {
		return 0, 0, fmt.Errorf("envd /metrics: no disk figures")
	}
	return m.DiskUsed, m.DiskTotal, nil
}
