package orchestrator

import (
	"context"
	"time"

	"github.com/moatsh/moat/internal/orchestrator/usage"
	"github.com/moatsh/moat/internal/store"
)

// Metric is one resource reading of a running sandbox (see package usage).
type Metric = usage.Metric

// Metrics returns the current resource reading of one of team's running
// sandboxes (empty for a paused one; ErrNotFound for another team's). CPU
// percentage is measured against the previous call, or over a short window
// on the first call.
func (o *Orchestrator) Metrics(ctx context.Context, team, id string) ([]Metric, error) {
	e, sb, addr, ok := o.live.Owned(team, id)
	if !ok {
		return nil, errNotFound(id)
	}
	if sb.State != store.StateRunning {
		return []Metric{}, nil
	}
	prevCPU, prevAt := o.live.LastCPU(e)
	m, cpu, at, err := o.usage.Read(ctx, sb, addr, prevCPU, prevAt)
	if err != nil {
		return nil, err
	}
	o.live.SetLastCPU(e, cpu, at)
	return []Metric{m}, nil
}

// LogFiles are the files of team's sandbox id's own log (runtime.LogSource),
// oldest first, and when it started; ErrNotFound for a sandbox the team
// does not have here.
func (o *Orchestrator) LogFiles(ctx context.Context, team, id string) ([]string, time.Time, error) {
	sb, err := o.Get(ctx, team, id)
	if err != nil {
		return nil, time.Time{}, err
	}
	return o.rts.LogFiles(id), sb.StartedAt, nil
}
