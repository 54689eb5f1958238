package orchestrator

import (
	"context"
	"time"

	"github.com/moatsh/moat/internal/events"
	"github.com/moatsh/moat/internal/store"
)

// emit makes a lifecycle event of sb (package events) and hands it to
// Config.Events. Called under sb's op lock after the change is committed,
// so one sandbox's events come in the order of its changes.
func (o *Orchestrator) emit(ctx context.Context, typ string, sb store.Sandbox, data map[string]any) {
	if o.cfg.Events == nil {
		return
	}
	o.cfg.Events(ctx, events.New(typ, events.Sandbox{ID: sb.ID, Team: sb.Team, TemplateID: sb.TemplateID,
		BuildID: o.buildOf(ctx, sb.TemplateID), StartedAt: sb.StartedAt}, o.clock.Now(), data))
}

// buildOf is the build ID of template id ("" when unknown).
func (o *Orchestrator) buildOf(ctx context.Context, id string) string {
	t, err := o.db.GetTemplate(ctx, id)
	if err != nil {
		return ""
	}
	return t.BuildID
}

// ended is eventData of an event that ends a run (killed, paused): the
// run's execution.
func (o *Orchestrator) ended(sb store.Sandbox) map[string]any {
	return map[string]any{"execution": events.Execution(sb.StartedAt, o.clock.Now(), sb.CPUCount, sb.MemoryMB)}
}

// emitKilled emits the killed event of sb, killed for reason.
func (o *Orchestrator) emitKilled(ctx context.Context, sb store.Sandbox, reason string) {
	data := map[string]any{}
	if sb.State == store.StateRunning { // a paused sandbox's run ended at its pause
		data = o.ended(sb)
	}
	data["kill_reason"] = reason
	o.emit(ctx, events.Killed, sb, withMetadata(data, sb))
}

// emitTimeout emits the updated event of a new end time (E2B's set_timeout).
func (o *Orchestrator) emitTimeout(ctx context.Context, sb store.Sandbox) {
	o.emit(ctx, events.Updated, sb, withMetadata(map[string]any{"set_timeout": sb.EndAt.UTC().Format(time.RFC3339)}, sb))
}

// withMetadata adds sb's metadata to data as sandbox_metadata, as E2B's
// events carry it.
func withMetadata(data map[string]any, sb store.Sandbox) map[string]any {
	if len(sb.Metadata) == 0 {
		return data
	}
	if data == nil {
		data = map[string]any{}
	}
	data["sandbox_metadata"] = sb.Metadata
	return data
}
