package orchestrator

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/moatsh/moat/internal/errdefs"
	"github.com/moatsh/moat/internal/netpolicy"
	"github.com/moatsh/moat/internal/runtime"
)

// MetadataRuntime is the create metadata key that picks a sandbox's
// runtime ("container", "gvisor", "vm"): E2B's create body has no runtime
// field, and metadata is what every SDK passes through unchanged. The
// server echoes the runtime in the sandbox's metadata under the same key.
const MetadataRuntime = "moat.runtime"

// runtimeSet is the runtime.Runtime the orchestrator holds: it routes each
// call to the backend its sandbox runs on (Spec.Runtime at create, the
// handle's Runtime at recovery). The first backend is the default. Calls
// for an ID it does not know go to every backend that could have it (Kill)
// or answer as for an unknown sandbox. Safe for concurrent use.
type runtimeSet struct {
	order  []runtime.Runtime // as configured; order[0] is the default
	byName map[string]runtime.Runtime

	mu sync.Mutex
	of map[string]runtime.Runtime // sandbox ID → its backend; guarded by mu
}

var (
	_ runtime.Runtime     = (*runtimeSet)(nil)
	_ runtime.Snapshotter = (*runtimeSet)(nil)
	_ EgressSetter        = (*runtimeSet)(nil)
	_ TemplatePruner      = (*runtimeSet)(nil)
)

func newRuntimeSet(rts []runtime.Runtime) (*runtimeSet, error) {
	s := &runtimeSet{byName: map[string]runtime.Runtime{}, of: map[string]runtime.Runtime{}}
	for _, rt := range rts {
		if rt == nil {
			continue
		}
		if _, dup := s.byName[rt.Name()]; dup {
			return nil, fmt.Errorf("orchestrator: runtime %s given twice: %w", rt.Name(), errdefs.ErrInvalidArgument)
		}
		s.byName[rt.Name()] = rt
		s.order = append(s.order, rt)
	}
	if len(s.order) == 0 {
		return nil, fmt.Errorf("orchestrator: no runtime: %w", errdefs.ErrInvalidArgument)
	}
	return s, nil
}

// Names lists the backends, the default first.
func (s *runtimeSet) Names() []string {
	out := make([]string, 0, len(s.order))
	for _, rt := range s.order {
		out = append(out, rt.Name())
	}
	return out
}

// named returns the backend called name ("" = the default); an unknown
// name is ErrInvalidArgument naming the choices.
func (s *runtimeSet) named(name string) (runtime.Runtime, error) {
	if name == "" {
		return s.order[0], nil
	}
	if rt, ok := s.byName[name]; ok {
		return rt, nil
	}
	return nil, fmt.Errorf("runtime %q is not enabled on this server (choose one of %s): %w",
		name, strings.Join(s.Names(), ", "), errdefs.ErrInvalidArgument)
}

// lookup returns id's backend, if known.
func (s *runtimeSet) lookup(id string) (runtime.Runtime, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	rt, ok := s.of[id]
	return rt, ok
}

func (s *runtimeSet) bind(id string, rt runtime.Runtime) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.of[id] = rt
}

// Name implements runtime.Runtime: the default backend's name.
func (s *runtimeSet) Name() string { return s.order[0].Name() }

// Features implements runtime.Runtime: the default backend's.
func (s *runtimeSet) Features() runtime.Features { return s.order[0].Features() }

// Create implements runtime.Runtime on the backend spec.Runtime names.
func (s *runtimeSet) Create(ctx context.Context, spec runtime.Spec) (*runtime.Handle, error) {
	rt, err := s.named(spec.Runtime)
	if err != nil {
		return nil, err
	}
	s.bind(spec.ID, rt) // a failed create is killed by ID
	return rt.Create(ctx, spec)
}

// Kill implements runtime.Runtime; an ID of no known backend is killed on
// every backend (each removes what it has by that name; none is no error).
func (s *runtimeSet) Kill(ctx context.Context, id string) error {
	rts := s.order
	if rt, ok := s.lookup(id); ok {
		rts = []runtime.Runtime{rt}
	}
	var errs []error
	for _, rt := range rts {
		errs = append(errs, rt.Kill(ctx, id))
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	s.mu.Lock()
	delete(s.of, id)
	s.mu.Unlock()
	return nil
}

// Pause implements runtime.Runtime.
func (s *runtimeSet) Pause(ctx context.Context, id string) error {
	rt, ok := s.lookup(id)
	if !ok {
		return fmt.Errorf("pause sandbox %s: %w", id, errdefs.ErrNotFound)
	}
	return rt.Pause(ctx, id)
}

// Resume implements runtime.Runtime.
func (s *runtimeSet) Resume(ctx context.Context, id string) (*runtime.Handle, error) {
	rt, ok := s.lookup(id)
	if !ok {
		return nil, fmt.Errorf("resume sandbox %s: %w", id, errdefs.ErrNotFound)
	}
	return rt.Resume(ctx, id)
}

// Stats implements runtime.Runtime.
func (s *runtimeSet) Stats(ctx context.Context, id string) (runtime.Stats, error) {
	rt, ok := s.lookup(id)
	if !ok {
		return runtime.Stats{}, fmt.Errorf("stats of sandbox %s: %w", id, errdefs.ErrNotFound)
	}
	return rt.Stats(ctx, id)
}

// Alive implements runtime.Runtime.
func (s *runtimeSet) Alive(ctx context.Context, id string) bool {
	rt, ok := s.lookup(id)
	return ok && rt.Alive(ctx, id)
}

// Recover implements runtime.Runtime: every backend gets all of live (the
// store's live sandboxes of any backend) and adopts its own; the network
// manager they share keeps the networks of every ID in live. A backend's
// failure does not stop the others'.
func (s *runtimeSet) Recover(ctx context.Context, live []string) ([]*runtime.Handle, error) {
	var out []*runtime.Handle
	var errs []error
	for _, rt := range s.order {
		hs, err := rt.Recover(ctx, live)
		if err != nil {
			errs = append(errs, fmt.Errorf("runtime %s: %w", rt.Name(), err))
		}
		for _, h := range hs {
			s.bind(h.ID, rt)
			if h.Runtime == "" {
				h.Runtime = rt.Name()
			}
		}
		out = append(out, hs...)
	}
	return out, errors.Join(errs...)
}

// Snapshot implements runtime.Snapshotter on the sandbox's backend.
func (s *runtimeSet) Snapshot(ctx context.Context, id, snapID string) error {
	rt, ok := s.lookup(id)
	if !ok {
		return fmt.Errorf("snapshot sandbox %s: %w", id, errdefs.ErrNotFound)
	}
	sn, ok := rt.(runtime.Snapshotter)
	if !ok {
		return fmt.Errorf("the %s runtime cannot snapshot sandboxes (use the vm runtime): %w", rt.Name(), errdefs.ErrNotImplemented)
	}
	return sn.Snapshot(ctx, id, snapID)
}

// DeleteSnapshot implements runtime.Snapshotter on every backend that has
// snapshots (unknown IDs succeed).
func (s *runtimeSet) DeleteSnapshot(ctx context.Context, snapID string) error {
	var errs []error
	for _, rt := range s.order {
		if sn, ok := rt.(runtime.Snapshotter); ok {
			errs = append(errs, sn.DeleteSnapshot(ctx, snapID))
		}
	}
	return errors.Join(errs...)
}

// snapshotter reports whether the backend called name takes snapshots.
func (s *runtimeSet) snapshotter(name string) bool {
	rt, err := s.named(name)
	if err != nil {
		return false
	}
	_, ok := rt.(runtime.Snapshotter)
	return ok
}

// SetEgress implements EgressSetter on the sandbox's backend.
func (s *runtimeSet) SetEgress(ctx context.Context, id string, e netpolicy.Egress) error {
	rt, ok := s.lookup(id)
	if !ok {
		return fmt.Errorf("network policy of sandbox %s: %w", id, errdefs.ErrNotFound)
	}
	es, ok := rt.(EgressSetter)
	if !ok {
		return fmt.Errorf("the %s runtime cannot enforce network policy: %w", rt.Name(), errdefs.ErrNotImplemented)
	}
	return es.SetEgress(ctx, id, e)
}

// PruneTemplates implements TemplatePruner on every backend that keeps
// per-template files.
func (s *runtimeSet) PruneTemplates(ctx context.Context, current []runtime.Spec, busy []string, minAge time.Duration) (int64, error) {
	var freed int64
	var errs []error
	for _, rt := range s.order {
		if p, ok := rt.(TemplatePruner); ok {
			n, err := p.PruneTemplates(ctx, current, busy, minAge)
			freed += n
			errs = append(errs, err)
		}
	}
	return freed, errors.Join(errs...)
}

// chooseRuntime decides the backend of a new sandbox: the create's
// metadata (MetadataRuntime), else the template's runtime, else the
// server's default. A name that is not enabled is ErrInvalidArgument.
func (o *Orchestrator) chooseRuntime(tplRuntime string, metadata map[string]string) (string, error) {
	name := metadata[MetadataRuntime]
	if name == "" {
		name = tplRuntime
	}
	rt, err := o.rts.named(name)
	if err != nil {
		return "", err
	}
	return rt.Name(), nil
}

// Runtimes lists the enabled backends, the default first.
func (o *Orchestrator) Runtimes() []string { return o.rts.Names() }

// egressSetter returns the EgressSetter of the backend called name, if it has one.
func (o *Orchestrator) egressSetter(name string) (runtime.Runtime, EgressSetter, bool) {
	rt, err := o.rts.named(name)
	if err != nil {
		rt = o.rts.order[0]
	}
	es, ok := rt.(EgressSetter)
	return rt, es, ok
}
