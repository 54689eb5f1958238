package orchestrator

import (
	"context"
	"fmt"
	"time"

	"github.com/moatsh/moat/internal/runtime"
)

// TemplatePruner is implemented by runtimes that keep files per template
// build outside the template's own directory (the vm backend's disk
// images and snapshots). PruneTemplates removes those of templates that
// are gone or were rebuilt: current lists the templates that exist, busy
// the IDs of templates a create is using, and nothing modified less than
// minAge ago goes. The runtime itself keeps whatever a sandbox (running
// or paused) or a snapshot still depends on. It returns the bytes freed.
type TemplatePruner interface {
	PruneTemplates(ctx context.Context, current []runtime.Spec, busy []string, minAge time.Duration) (int64, error)
}

// TemplatesInUse returns the IDs of the templates that live sandboxes
// (being created, running, paused, or in between) were made from.
func (o *Orchestrator) TemplatesInUse() map[string]bool {
	o.mu.RLock()
	defer o.mu.RUnlock()
	out := map[string]bool{}
	for _, e := range o.live {
		if !e.gone && e.sb.TemplateID != "" {
			out[e.sb.TemplateID] = true
		}
	}
	for id := range o.creating {
		out[id] = true
	}
	return out
}

// holdTemplate marks a create from template id as under way until the
// returned func is called.
func (o *Orchestrator) holdTemplate(id string) (release func()) {
	o.mu.Lock()
	o.creating[id]++
	o.mu.Unlock()
	return func() {
		o.mu.Lock()
		defer o.mu.Unlock()
		if o.creating[id]--; o.creating[id] <= 0 {
			delete(o.creating, id)
		}
	}
}

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
