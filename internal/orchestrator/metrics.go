package orchestrator

import (
	"context"
	"time"

	"github.com/moatsh/moat/internal/orchestrator/usage"
	"github.com/moatsh/moat/internal/store"
)

// Metric is one resource reading of a running sandbox (see package usage).
type Metric = usage.Metric

// Metrics returns team's sandbox id's resource readings from start to end
// (a zero time leaves that side open), oldest first: those the collector
// took every usage.CollectEvery (the last usage.HistoryLen; see Run), and,
// when it runs and end is not in the past, one taken now. ErrNotFound for
// another team's sandbox. CPU percentage is measured against the previous
// reading, or over a short window when there is none within a minute.
func (o *Orchestrator) Metrics(ctx context.Context, team, id string, start, end time.Time) ([]Metric, error) {
	e, sb, addr, ok := o.live.Owned(team, id)
	if !ok {
		return nil, errNotFound(id)
	}
	hist := o.live.History(e)
	out := hist.Between(start, end)
	now := o.clock.Now()
	if sb.State != store.StateRunning || (!end.IsZero() && end.Before(now.Add(-o.cfg.MetricsEvery))) {
		return out, nil
	}
	prevCPU, prevAt := o.live.LastCPU(e)
	m, cpu, at, err := o.usage.Read(ctx, sb, addr, prevCPU, prevAt, nil) // the disk as it is now, from envd if need be
	if err != nil {
		return nil, err
	}
	o.live.SetLastCPU(e, cpu, at)
	if (start.IsZero() || !m.Time.Before(start)) && (len(out) == 0 || m.Time.After(out[len(out)-1].Time)) {
		out = append(out, m)
	}
	return out, nil
}

// collect reads every running sandbox's usage into its history each
// Config.MetricsEvery until ctx ends, one sandbox after another.
func (o *Orchestrator) collect(ctx context.Context) {
	t := time.NewTicker(o.cfg.MetricsEvery)
	defer t.Stop()
	for tick := 0; ; tick++ {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		for _, e := range o.live.All() {
			o.collectOne(ctx, e, tick)
		}
	}
}

// diskEvery is how many collections reuse a microVM's last disk figures
// before envd is asked again (a minute at the default interval).
const diskEvery = 12

// collectOne adds one reading to e's history when it runs. Errors (a
// sandbox pausing or going meanwhile) are left for the next tick.
func (o *Orchestrator) collectOne(ctx context.Context, e *entry, tick int) {
	sb, addr, _, ok := o.live.Route(o.live.Sandbox(e).ID)
	if !ok || sb.State != store.StateRunning {
		return
	}
	hist := o.live.History(e)
	var last *Metric
	if m, ok := hist.Last(); ok && (tick+int(sb.ID[len(sb.ID)-1]))%diskEvery != 0 { // envd asked a minute apart, staggered
		last = &m
	}
	ctx, cancel := context.WithTimeout(ctx, o.cfg.MetricsEvery)
	defer cancel()
	prevCPU, prevAt := o.live.LastCPU(e)
	m, cpu, at, ok, err := o.usage.Collect(ctx, sb, addr, prevCPU, prevAt, last)
	if err != nil {
		o.log.Debug("metrics collection", "sandboxID", sb.ID, "err", err)
		return
	}
	o.live.SetLastCPU(e, cpu, at)
	if ok {
		hist.Add(m)
	}
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
