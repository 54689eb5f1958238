package vm

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/moatsh/moat/internal/cgroups"
	"github.com/moatsh/moat/internal/runtime"
	"github.com/moatsh/moat/internal/runtime/slots"
	"github.com/moatsh/moat/internal/runtime/vm/launch"
	"github.com/moatsh/moat/internal/runtime/vm/snapshot"
	"github.com/moatsh/moat/internal/sandboxid"
)

// Slots (package slots holds their IDs): after a create of a template (not
// a pool member's, from a snapshot or with volumes) a sandbox of the same
// build and size is made in the background up to its QEMU waiting for the
// snapshot (-incoming defer), its network up with no egress (nothing runs
// before `cont`). The next create (Prelaunched, its policy set, Create with
// the slot's ID) only feeds the snapshot: ~50 ms less under TCG. Slots go
// with Close, Kill of their ID, PruneTemplates once their template is gone,
// and after a crash with Recover (the store does not know them).

// DefaultPrelaunch is how many slots each template build and size keeps,
// slotKeys how many of those keep slots at once; slotDelay lets the new
// sandbox's /init go first (measured: /init 52 against 86 ms).
const DefaultPrelaunch, slotKeys, slotDelay = 1, 4, 150 * time.Millisecond

// WithPrelaunch sets how many slots each template build and size keeps
// (DefaultPrelaunch; 0 turns slots off).
func WithPrelaunch(n int) Option { return func(o *options) { o.prelaunch = n } }

// Prelaunched implements runtime.Prelauncher.
func (r *Runtime) Prelaunched(spec runtime.Spec) (id string, ok bool) {
	if slots.Eligible(spec) {
		id, ok = r.slots.Take(slots.SpecKey(withDefaults(spec)))
	}
	return id, ok
}

// takeSlot returns b's slot (reserved by Prelaunched) ready for spec, or
// nil: it has none, or one made for another snapshot than snap, released
// here (the caller launches anew under the same ID). b.mu is held.
func (r *Runtime) takeSlot(spec runtime.Spec, snap *snapshot.Snapshot, b *sandbox) (*launched, error) {
	l := b.slot
	if l == nil {
		return nil, nil
	}
	b.slot = nil
	r.slots.Forget(spec.ID)
	if l.SnapDir != snap.Dir {
		err := b.undo.Run()
		b.proc, b.qmp = nil, nil
		return nil, err
	}
	now := time.Now()
	l.tm = launch.Times{Copied: now, NetUp: now, Slot: true}
	if l.Meta.AllowInternet != spec.AllowInternet {
		l.Meta.AllowInternet = spec.AllowInternet
		if err := snapshot.WriteMeta(r.sandboxDir(spec.ID), l.Meta); err != nil {
			return nil, err
		}
	}
	// Slots wait at the background CPU weight; an eligible spec is not.
	return l, cgroups.SetBackground(r.cgroupPath(spec.ID), false)
}

// refillSlots makes, in the background, the slots spec's key lacks (spec
// was just created from snap).
func (r *Runtime) refillSlots(spec runtime.Spec, snap *snapshot.Snapshot) {
	if slots.Eligible(spec) {
		r.slots.Refill(slots.Key(snap.Template, spec), func(ctx context.Context) (string, error) { return r.makeSlot(ctx, spec, snap) })
	}
}

// makeSlot launches a slot for spec's key from snap under a new ID, at
// the background CPU weight.
func (r *Runtime) makeSlot(ctx context.Context, spec runtime.Spec, snap *snapshot.Snapshot) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, r.o.readyTimeout)
	defer cancel()
	spec.ID, spec.AllowInternet, spec.Background = sandboxid.New(), false, true
	start := time.Now()
	b := r.boxes.Get(spec.ID)
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.created || b.slot != nil || b.proc != nil {
		return "", fmt.Errorf("slot %s: ID in use", spec.ID)
	}
	l, err := r.launch(ctx, spec, snap, b)
	if err != nil {
		err = errors.Join(fmt.Errorf("slot %s: %w", spec.ID, err), b.undo.Run())
		b.proc, b.qmp = nil, nil
		r.boxes.Forget(spec.ID, b)
		return "", err
	}
	b.slot = l
	r.log.Debug("prelaunch slot ready", "sandbox", spec.ID, "template", spec.TemplateID,
		"took", time.Since(start).Round(time.Millisecond))
	return spec.ID, nil
}
