package orchestrator

import (
	"context"
	"fmt"
	"time"

	"github.com/moatsh/moat/internal/runtime"
)

// TemplatesInUse returns the IDs of the templates that live sandboxes
// (being created, running, paused, or in between) were made from.
func (o *Orchestrator) TemplatesInUse() map[string]bool { return o.live.TemplatesInUse() }

// PruneTemplateFiles lets the runtime remove its per-template files that
// no template, sandbox or snapshot needs any more (see TemplatePruner);
// a runtime without such files frees nothing.
func (o *Orchestrator) PruneTemplateFiles(ctx context.Context, minAge time.Duration) (int64, error) {
	p, ok := o.rt.(TemplatePruner)
	if !ok {
		return 0, nil
	}
	ts, err := o.db.ListTemplates(ctx)
	if err != nil {
		return 0, fmt.Errorf("prune template files: %w", err)
	}
	current := make([]runtime.Spec, 0, len(ts))
	for _, t := range ts {
		current = append(current, runtime.Spec{TemplateID: t.ID, RootfsDir: t.RootfsDir})
	}
	var busy []string
	for id := range o.TemplatesInUse() {
		busy = append(busy, id)
	}
	return p.PruneTemplates(ctx, current, busy, minAge)
}
