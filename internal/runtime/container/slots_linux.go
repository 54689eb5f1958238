package container

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/moatsh/moat/internal/errdefs"
	"github.com/moatsh/moat/internal/netpolicy"
	"github.com/moatsh/moat/internal/runtime"
	"github.com/moatsh/moat/internal/runtime/slots"
	"github.com/moatsh/moat/internal/sandboxid"
)

// Slots (package slots holds their IDs): after a create of a template (not
// a pool member's, nor one with volumes) a sandbox of the same build and
// size is made in the background up to the OCI runtime's `create`: its
// directory, disk, overlay, network with no egress, bundle, cgroup and the
// container's init, which waits in its namespaces for `start` and has run
// nothing of the sandbox's. The next create (Prelaunched, its policy set,
// Create with the slot's ID) only runs `start` and waits for envd. Slots go
// with Close, Kill of their ID, PruneTemplates once their template is gone
// or rebuilt, and after a crash with Recover (the store does not know
// them). The gvisor flavor has none.

// DefaultPrelaunch is how many slots each template build and size keeps,
// slotKeys how many of those keep slots at once.
const DefaultPrelaunch, slotKeys = 1, 4

// slotDelay is how long after the create that asks for it a slot's making
// starts: the new sandbox's /init and first command go first.
var slotDelay = 50 * time.Millisecond

// WithPrelaunch sets how many slots each template build and size keeps
// (0 turns slots off; the gvisor flavor never has any).
func WithPrelaunch(n int) Option { return func(o *options) { o.prelaunch = n } }

// slot is a sandbox made ahead: what Create needs of it.
type slot struct {
	key string // slots.Key of the spec it was made for
	net *netpolicy.Net
}

// Prelaunched implements runtime.Prelauncher.
func (r *Runtime) Prelaunched(spec runtime.Spec) (id string, ok bool) {
	if slots.Eligible(spec) {
		id, ok = r.slots.Take(slots.SpecKey(spec))
	}
	return id, ok
}

// startSlot starts the container of b's slot (reserved by Prelaunched) for
// spec and returns its network; a nil network means b has none, or one made
// for another key (a rebuilt template), removed here: the caller launches
// anew under the same ID. It refills spec's slots. b.mu is held.
func (r *Runtime) startSlot(ctx context.Context, spec runtime.Spec, b *sandbox, tr *trace) (*netpolicy.Net, bool, error) {
	key := slots.SpecKey(spec)
	if slots.Eligible(spec) {
		defer r.slots.Refill(key, func(ctx context.Context) (string, error) { return r.makeSlot(ctx, spec) })
	}
	s := b.slot
	if s == nil {
		return nil, false, nil
	}
	b.slot = nil
	r.slots.Forget(spec.ID)
	if s.key != key {
		err := b.undo.Run()
		b.proc = nil
		return nil, false, err
	}
	if err := r.oci.StartCreated(ctx, r.containerName(spec.ID)); err != nil {
		return nil, true, fmt.Errorf("sandbox %s: %w", spec.ID, err)
	}
	tr.step("oci_start")
	return s.net, true, nil
}

// makeSlot makes a slot for spec's key under a new ID.
func (r *Runtime) makeSlot(ctx context.Context, spec runtime.Spec) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, r.o.readyTimeout)
	defer cancel()
	spec.ID, spec.AllowInternet = sandboxid.New(), false
	start := time.Now()
	b := r.boxes.Get(spec.ID)
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.created || b.slot != nil || b.proc != nil {
		return "", fmt.Errorf("slot %s: ID in use: %w", spec.ID, errdefs.ErrAlreadyExists)
	}
	n, err := r.launch(ctx, spec, b, newTrace(), true)
	if err != nil {
		err = errors.Join(fmt.Errorf("slot %s: %w", spec.ID, err), b.undo.Run())
		b.proc = nil
		r.boxes.Forget(spec.ID, b)
		return "", err
	}
	b.slot = &slot{key: slots.SpecKey(spec), net: n}
	r.log.Debug("prelaunch slot ready", "sandbox", spec.ID, "template", spec.TemplateID,
		"took", time.Since(start).Round(time.Microsecond))
	return spec.ID, nil
}

// PruneTemplates implements the orchestrator's TemplatePruner: the idle
// slots of templates that are gone or were rebuilt go (their overlays
// hold the template's files). This backend keeps no other files per
// template, so it frees nothing it could count.
func (r *Runtime) PruneTemplates(ctx context.Context, current []runtime.Spec, _ []string, _ time.Duration) (int64, error) {
	return 0, r.slots.DropStale(ctx, current)
}
