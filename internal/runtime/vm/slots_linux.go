package vm

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/moatsh/moat/internal/cgroups"
	"github.com/moatsh/moat/internal/runtime"
	"github.com/moatsh/moat/internal/runtime/vm/snapshot"
)

// Slots: sandboxes made ahead of the request up to their QEMU waiting
// for the snapshot (-incoming defer). A create from a template snapshot
// then skips the directory, network, jail and QEMU start (~50 ms under
// TCG, most of it QEMU's own start) and only feeds the snapshot. After
// each create of a template (not a pool member's, not one from a snapshot
// or with volumes) the runtime makes slots for the same template build
// and size in the background, up to WithPrelaunch's count. A slot's
// network is up with no egress (nothing runs in it before `cont`); the
// orchestrator reserves one through Prelaunched, sets the request's
// policy under the slot's ID and creates it. Slots are killed by Close,
// by Kill of their ID, and by PruneTemplates once their template is gone;
// after a crash Recover removes them as it removes every sandbox the
// store does not know.

// DefaultPrelaunch is how many slots each template build and size keeps.
const DefaultPrelaunch = 1

// WithPrelaunch sets how many slots each template build and size keeps
// (DefaultPrelaunch; 0 turns slots off).
func WithPrelaunch(n int) Option { return func(o *options) { o.prelaunch = n } }

// slotKeys is how many template builds and sizes keep slots at once: the
// least recently created lose theirs (a variable for tests). An idle slot
// holds a QEMU (~40 MiB resident here) and a spare's memory copy.
var slotKeys = 4

// slotSet is the runtime's idle slots.
type slotSet struct {
	mu     sync.Mutex
	want   int                  // per key
	free   map[string][]string  // slotKey → IDs of idle slots
	making map[string]int       // slotKey → slots being made
	used   map[string]time.Time // slotKey → its last create
	closed bool
	wg     sync.WaitGroup // slots being made or evicted
}

// evictLocked takes the idle slots of the least recently used keys other
// than keep off the set until fewer than slotKeys keys have slots, and
// returns their IDs (for the caller to kill); mu is held.
func (s *slotSet) evictLocked(keep string) []string {
	var out []string
	for {
		n, lru := 0, ""
		for k := range s.used {
			if k == keep || len(s.free[k])+s.making[k] == 0 {
				continue
			}
			n++
			if len(s.free[k]) > 0 && (lru == "" || s.used[k].Before(s.used[lru])) {
				lru = k
			}
		}
		if n < slotKeys || lru == "" {
			return out
		}
		out = append(out, s.free[lru]...)
		delete(s.free, lru)
	}
}

// slotKey is what a slot must share with a create to serve it: the
// template build and the size (spec has its defaults).
func slotKey(spec runtime.Spec) string {
	return snapshot.TemplateKey(spec) + "/" + strconv.Itoa(spec.VCPUs) + "/" + strconv.Itoa(spec.MemoryMiB) + "/" + strconv.Itoa(spec.DiskMiB)
}

// slotEligible says whether a create of spec may use (and refill) slots.
func slotEligible(spec runtime.Spec) bool {
	return spec.Snapshot == "" && len(spec.Volumes) == 0 && !spec.Background
}

// Prelaunched implements runtime.Prelauncher.
func (r *Runtime) Prelaunched(spec runtime.Spec) (string, bool) {
	if !slotEligible(spec) {
		return "", false
	}
	key := slotKey(withDefaults(spec))
	s := &r.slots
	s.mu.Lock()
	defer s.mu.Unlock()
	ids := s.free[key]
	if len(ids) == 0 {
		return "", false
	}
	id := ids[0]
	s.free[key] = ids[1:]
	return id, true
}

// SlotCount is how many idle slots serve spec (for tests and the bench).
func (r *Runtime) SlotCount(spec runtime.Spec) int {
	s := &r.slots
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.free[slotKey(withDefaults(spec))])
}

// forgetSlot drops id from the idle slots, wherever it is.
func (s *slotSet) forget(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for k, ids := range s.free {
		for i, v := range ids {
			if v == id {
				s.free[k] = append(ids[:i:i], ids[i+1:]...)
				return
			}
		}
	}
}

// takeSlot returns sandbox spec.ID's slot (b's, reserved by Prelaunched)
// ready for spec, or nil when it has none. A slot made for another
// snapshot than snap is released first and nil returned (the caller
// launches anew under the same ID). b.mu is held.
func (r *Runtime) takeSlot(spec runtime.Spec, snap *snapshot.Snapshot, b *sandbox) (*launched, error) {
	l := b.slot
	if l == nil {
		return nil, nil
	}
	b.slot = nil
	r.slots.forget(spec.ID)
	if l.snapDir != snap.Dir {
		err := b.undo.Run()
		b.proc, b.qmp = nil, nil
		return nil, err
	}
	now := time.Now()
	l.tm = restoreTimes{copied: now, netUp: now, slot: true}
	if l.meta.AllowInternet != spec.AllowInternet {
		l.meta.AllowInternet = spec.AllowInternet
		if err := snapshot.WriteMeta(r.sandboxDir(spec.ID), l.meta); err != nil {
			return nil, err
		}
	}
	if !spec.Background {
		if err := cgroups.SetBackground(r.cgroupPath(spec.ID), false); err != nil {
			return nil, err
		}
	}
	return l, nil
}

// refillSlots makes, in the background, the slots spec's key lacks
// (spec was just created from snap).
func (r *Runtime) refillSlots(spec runtime.Spec, snap *snapshot.Snapshot) {
	if !slotEligible(spec) {
		return
	}
	key := slotKey(spec)
	s := &r.slots
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed || s.want <= 0 {
		return
	}
	s.used[key] = time.Now()
	if evicted := s.evictLocked(key); len(evicted) > 0 {
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			for _, id := range evicted {
				_ = r.Kill(context.Background(), id)
			}
		}()
	}
	for len(s.free[key])+s.making[key] < s.want {
		s.making[key]++
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			id, err := r.makeSlot(spec, snap)
			s.mu.Lock()
			s.making[key]--
			closed := s.closed
			if err == nil && !closed {
				s.free[key] = append(s.free[key], id)
			}
			s.mu.Unlock()
			switch {
			case err != nil:
				r.log.Warn("prelaunch slot", "template", spec.TemplateID, "err", err)
			case closed:
				_ = r.Kill(context.Background(), id)
			}
		}()
	}
}

// makeSlot launches a slot for spec's key from snap under a new ID.
func (r *Runtime) makeSlot(spec runtime.Spec, snap *snapshot.Snapshot) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), r.o.readyTimeout)
	defer cancel()
	spec.ID, spec.AllowInternet, spec.Background = runtime.NewSandboxID(), false, true
	start := time.Now()
	b := r.boxes.Get(spec.ID)
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.created || b.slot != nil || b.proc != nil {
		return "", fmt.Errorf("slot %s: ID in use", spec.ID)
	}
	l, err := r.launch(ctx, spec, snap, b)
	if err != nil {
		err = errors.Join(err, b.undo.Run())
		b.proc, b.qmp = nil, nil
		r.boxes.Forget(spec.ID, b)
		return "", fmt.Errorf("slot %s: %w", spec.ID, err)
	}
	l.slot = true
	b.slot = l
	r.log.Debug("prelaunch slot ready", "sandbox", spec.ID, "template", spec.TemplateID,
		"took", time.Since(start).Round(time.Millisecond))
	return spec.ID, nil
}

// closeSlots stops making slots and kills the idle ones.
func (r *Runtime) closeSlots(ctx context.Context) error {
	s := &r.slots
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	s.wg.Wait()
	return r.killSlots(ctx, func(string) bool { return true })
}

// killSlots kills the idle slots whose key matches.
func (r *Runtime) killSlots(ctx context.Context, match func(key string) bool) error {
	s := &r.slots
	var ids []string
	s.mu.Lock()
	for k, v := range s.free {
		if match(k) {
			ids = append(ids, v...)
			delete(s.free, k)
		}
	}
	for k := range s.used {
		if match(k) {
			delete(s.used, k)
		}
	}
	s.mu.Unlock()
	var errs []error
	for _, id := range ids {
		errs = append(errs, r.Kill(ctx, id))
	}
	return errors.Join(errs...)
}

// dropStaleSlots kills the idle slots of templates not in current (their
// overlays would keep the template's files from a prune).
func (r *Runtime) dropStaleSlots(ctx context.Context, current []runtime.Spec) error {
	keep := map[string]bool{}
	for _, s := range current {
		keep[snapshot.TemplateKey(s)] = true
	}
	return r.killSlots(ctx, func(key string) bool {
		i := strings.Index(key, "/")
		return i < 0 || !keep[key[:i]]
	})
}
