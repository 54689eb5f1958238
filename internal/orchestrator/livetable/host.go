package livetable

import (
	"github.com/moatsh/moat/internal/admission"
	"github.com/moatsh/moat/internal/errdefs"
	"github.com/moatsh/moat/internal/store"
)

// SetForeign records the live sandboxes of runtimes this server does not
// run (see Recover).
func (t *Table) SetForeign(foreign map[string]store.Sandbox) {
	t.mu.Lock()
	t.foreign = foreign
	t.mu.Unlock()
}

// notLiveLocked is the error for team's sandbox id that is not live here:
// ErrUnavailable when it runs on a runtime this server does not run,
// else ErrNotFound. Caller holds mu.
func (t *Table) notLiveLocked(team, id string) error {
	if sb, ok := t.foreign[id]; ok && team != "" && sb.Team == team {
		return errdefs.Publicf(errdefs.ErrUnavailable, "sandbox %s runs on the %s runtime, which is not enabled on this server", id, sb.Runtime)
	}
	return ErrNotFound(id)
}

// Reserved is what the live sandboxes reserve on the host: the memory of
// running ones (a paused microVM holds none) and the disk of all, those
// of other runtimes included.
func (t *Table) Reserved() admission.Need {
	var n admission.Need
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, e := range t.live {
		if e.gone {
			continue
		}
		if e.sb.State != store.StatePaused {
			n.MemoryMiB += e.sb.MemoryMB
		}
		n.DiskMiB += e.sb.DiskSizeMB
	}
	for _, sb := range t.foreign {
		if sb.State != store.StatePaused {
			n.MemoryMiB += sb.MemoryMB
		}
		n.DiskMiB += sb.DiskSizeMB
	}
	return n
}

// TemplatesInUse returns the IDs of the templates that live sandboxes
// (being created, running, paused, or in between) were made from.
func (t *Table) TemplatesInUse() map[string]bool {
	t.mu.RLock()
	defer t.mu.RUnlock()
	out := map[string]bool{}
	for _, e := range t.live {
		if !e.gone && e.sb.TemplateID != "" {
			out[e.sb.TemplateID] = true
		}
	}
	for id := range t.creating {
		out[id] = true
	}
	for _, sb := range t.foreign { // still running, on another runtime
		if sb.TemplateID != "" {
			out[sb.TemplateID] = true
		}
	}
	return out
}

// HoldTemplate marks a create from template id as under way until the
// returned func is called.
func (t *Table) HoldTemplate(id string) (release func()) {
	t.mu.Lock()
	t.creating[id]++
	t.mu.Unlock()
	return func() {
		t.mu.Lock()
		defer t.mu.Unlock()
		if t.creating[id]--; t.creating[id] <= 0 {
			delete(t.creating, id)
		}
	}
}
