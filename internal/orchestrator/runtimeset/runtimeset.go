// Package runtimeset runs several runtime backends side by side behind
// one runtime.Runtime (moat serve --runtime container,gvisor,vm): it
// routes each call to the backend its sandbox runs on. It exists apart
// from the orchestrator so that the routing, and the optional
// capabilities a backend may have (EgressSetter, TemplatePruner), are one
// small unit with no knowledge of the sandbox lifecycle.
package runtimeset

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

// EgressSetter is implemented by runtimes whose sandboxes have a host-side
// network policy (netpolicy.Manager.SetEgress): it replaces a sandbox's
// egress policy at once when its network exists, else it is applied when
// the network is set up (create, resume), before the sandbox's first packet.
type EgressSetter interface {
	SetEgress(ctx context.Context, id string, e netpolicy.Egress) error
}

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

// Set is the runtime.Runtime the orchestrator holds: it routes each
// call to the backend its sandbox runs on (Spec.Runtime at create, the
// handle's Runtime at recovery). The first backend is the default. Calls
// for an ID it does not know go to every backend that could have it (Kill)
// or answer as for an unknown sandbox. Safe for concurrent use.
type Set struct {
	order  []runtime.Runtime // as configured; order[0] is the default
	byName map[string]runtime.Runtime

	mu sync.Mutex
	of map[string]runtime.Runtime // sandbox ID → its backend; guarded by mu
	// ahead are the IDs Prelaunched handed out, until their Create or
	// Kill: the channel gets the result of their policy's application in
	// the background (nil until ApplyEgress; egress.go). Guarded by mu.
	ahead map[string]chan error
}

var (
	_ runtime.Runtime     = (*Set)(nil)
	_ runtime.Snapshotter = (*Set)(nil)
	_ EgressSetter        = (*Set)(nil)
	_ TemplatePruner      = (*Set)(nil)
)

// New returns the set of rts (nil entries are skipped); the first is the
// default. A name given twice or no runtime at all is ErrInvalidArgument.
func New(rts []runtime.Runtime) (*Set, error) {
	s := &Set{byName: map[string]runtime.Runtime{}, of: map[string]runtime.Runtime{}, ahead: map[string]chan error{}}
	for _, rt := range rts {
		if rt == nil {
			continue
		}
		if _, dup := s.byName[rt.Name()]; dup {
			return nil, errdefs.Publicf(errdefs.ErrInvalidArgument, "orchestrator: runtime %s given twice", rt.Name())
		}
		s.byName[rt.Name()] = rt
		s.order = append(s.order, rt)
	}
	if len(s.order) == 0 {
		return nil, errdefs.Publicf(errdefs.ErrInvalidArgument, "orchestrator: no runtime")
	}
	return s, nil
}

// Default is the first backend.
func (s *Set) Default() runtime.Runtime { return s.order[0] }

// Names lists the backends, the default first.
func (s *Set) Names() []string {
	out := make([]string, 0, len(s.order))
	for _, rt := range s.order {
		out = append(out, rt.Name())
	}
	return out
}

// Named returns the backend called name ("" = the default); an unknown
// name is ErrInvalidArgument naming the choices.
func (s *Set) Named(name string) (runtime.Runtime, error) {
	if name == "" {
		return s.order[0], nil
	}
	if rt, ok := s.byName[name]; ok {
		return rt, nil
	}
	return nil, errdefs.Publicf(errdefs.ErrInvalidArgument, "runtime %q is not enabled on this server (choose one of %s)", name, strings.Join(s.Names(), ", "))
}

// lookup returns id's backend, if known.
func (s *Set) lookup(id string) (runtime.Runtime, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	rt, ok := s.of[id]
	return rt, ok
}

func (s *Set) bind(id string, rt runtime.Runtime) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.of[id] = rt
}

// Name implements runtime.Runtime: the default backend's name.
func (s *Set) Name() string { return s.order[0].Name() }

// Features implements runtime.Runtime: the default backend's.
func (s *Set) Features() runtime.Features { return s.order[0].Features() }

// Create implements runtime.Runtime on the backend spec.Runtime names.
// For a sandbox made ahead it also waits for its policy (ApplyEgress) and
// fails if that failed.
func (s *Set) Create(ctx context.Context, spec runtime.Spec) (*runtime.Handle, error) {
	rt, err := s.Named(spec.Runtime)
	if err != nil {
		return nil, errors.Join(err, s.awaitEgress(spec.ID))
	}
	s.bind(spec.ID, rt) // a failed create is killed by ID
	h, err := rt.Create(ctx, spec)
	if eerr := s.awaitEgress(spec.ID); eerr != nil {
		return h, errors.Join(err, eerr)
	}
	return h, err
}

// Prelaunched implements runtime.Prelauncher on the backend spec.Runtime
// names, when it is one: the reserved ID is bound to that backend (a
// failed create is killed by ID).
func (s *Set) Prelaunched(spec runtime.Spec) (string, bool) {
	rt, err := s.Named(spec.Runtime)
	if err != nil {
		return "", false
	}
	p, ok := rt.(runtime.Prelauncher)
	if !ok {
		return "", false
	}
	id, ok := p.Prelaunched(spec)
	if ok {
		s.bind(id, rt)
		s.mu.Lock()
		s.ahead[id] = nil
		s.mu.Unlock()
	}
	return id, ok
}

// Kill implements runtime.Runtime; an ID of no known backend is killed on
// every backend (each removes what it has by that name; none is no error).
func (s *Set) Kill(ctx context.Context, id string) error {
	_ = s.awaitEgress(id) // its nft elements must not come after the teardown
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
func (s *Set) Pause(ctx context.Context, id string) error {
	rt, ok := s.lookup(id)
	if !ok {
		return errdefs.Publicf(errdefs.ErrNotFound, "sandbox %s not found", id)
	}
	return rt.Pause(ctx, id)
}

// CanPauseFilesystem is nil when sandbox id's backend can pause it to its
// files (runtime.FilesystemPauser), else the refusal: ErrNotFound for an
// unknown sandbox, ErrNotImplemented naming the runtime.
func (s *Set) CanPauseFilesystem(id string) error {
	_, err := s.filesystemPauser(id)
	return err
}

// PauseFilesystem implements runtime.FilesystemPauser on the sandbox's
// backend; CanPauseFilesystem's refusal when it cannot.
func (s *Set) PauseFilesystem(ctx context.Context, id string) error {
	p, err := s.filesystemPauser(id)
	if err != nil {
		return err
	}
	return p.PauseFilesystem(ctx, id)
}

func (s *Set) filesystemPauser(id string) (runtime.FilesystemPauser, error) {
	rt, ok := s.lookup(id)
	if !ok {
		return nil, errdefs.Publicf(errdefs.ErrNotFound, "sandbox %s not found", id)
	}
	p, ok := rt.(runtime.FilesystemPauser)
	if !ok {
		return nil, errdefs.Publicf(errdefs.ErrNotImplemented, "the %s runtime cannot pause a sandbox without its memory (memory: false); pause it with its memory", rt.Name())
	}
	return p, nil
}

// Resume implements runtime.Runtime.
func (s *Set) Resume(ctx context.Context, id string) (*runtime.Handle, error) {
	rt, ok := s.lookup(id)
	if !ok {
		return nil, errdefs.Publicf(errdefs.ErrNotFound, "sandbox %s not found", id)
	}
	return rt.Resume(ctx, id)
}

// Foreground implements runtime.Foregrounder for the backends that do;
// for the others it does nothing.
func (s *Set) Foreground(ctx context.Context, id string) error {
	rt, ok := s.lookup(id)
	if !ok {
		return errdefs.Publicf(errdefs.ErrNotFound, "sandbox %s not found", id)
	}
	if f, ok := rt.(runtime.Foregrounder); ok {
		return f.Foreground(ctx, id)
	}
	return nil
}

// Stats implements runtime.Runtime.
func (s *Set) Stats(ctx context.Context, id string) (runtime.Stats, error) {
	rt, ok := s.lookup(id)
	if !ok {
		return runtime.Stats{}, errdefs.Publicf(errdefs.ErrNotFound, "sandbox %s not found", id)
	}
	return rt.Stats(ctx, id)
}

// Wait implements runtime.Runtime.
func (s *Set) Wait(ctx context.Context, id string) (runtime.ExitStatus, error) {
	rt, ok := s.lookup(id)
	if !ok {
		return runtime.ExitStatus{}, fmt.Errorf("wait for sandbox %s: %w", id, errdefs.ErrNotFound)
	}
	return rt.Wait(ctx, id)
}

// Recover implements runtime.Runtime: every backend gets all of live (the
// store's live sandboxes of any backend) and adopts its own; the network
// manager they share keeps the networks of every ID in live. A backend's
// failure does not stop the others'.
func (s *Set) Recover(ctx context.Context, live []string) ([]*runtime.Handle, error) {
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
func (s *Set) Snapshot(ctx context.Context, id, snapID string) error {
	rt, ok := s.lookup(id)
	if !ok {
		return errdefs.Publicf(errdefs.ErrNotFound, "sandbox %s not found", id)
	}
	sn, ok := rt.(runtime.Snapshotter)
	if !ok {
		return errdefs.Publicf(errdefs.ErrNotImplemented, "the %s runtime cannot snapshot sandboxes (use the vm runtime)", rt.Name())
	}
	return sn.Snapshot(ctx, id, snapID)
}

// DeleteSnapshot implements runtime.Snapshotter on every backend that has
// snapshots (unknown IDs succeed).
func (s *Set) DeleteSnapshot(ctx context.Context, snapID string) error {
	var errs []error
	for _, rt := range s.order {
		if sn, ok := rt.(runtime.Snapshotter); ok {
			errs = append(errs, sn.DeleteSnapshot(ctx, snapID))
		}
	}
	return errors.Join(errs...)
}

// Snapshots reports whether the backend called name takes snapshots.
func (s *Set) Snapshots(name string) bool {
	rt, err := s.Named(name)
	if err != nil {
		return false
	}
	_, ok := rt.(runtime.Snapshotter)
	return ok
}

// SetEgress implements EgressSetter on the sandbox's backend.
func (s *Set) SetEgress(ctx context.Context, id string, e netpolicy.Egress) error {
	rt, ok := s.lookup(id)
	if !ok {
		return errdefs.Publicf(errdefs.ErrNotFound, "sandbox %s not found", id)
	}
	es, ok := rt.(EgressSetter)
	if !ok {
		return errdefs.Publicf(errdefs.ErrNotImplemented, "the %s runtime cannot enforce network policy", rt.Name())
	}
	return es.SetEgress(ctx, id, e)
}

// PruneTemplates implements TemplatePruner on every backend that keeps
// per-template files.
func (s *Set) PruneTemplates(ctx context.Context, current []runtime.Spec, busy []string, minAge time.Duration) (int64, error) {
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

// LogFiles implements runtime.LogSource on the sandbox's backend: none for
// an unknown sandbox or a backend that keeps no log.
func (s *Set) LogFiles(id string) []string {
	rt, ok := s.lookup(id)
	if !ok {
		return nil
	}
	if l, ok := rt.(runtime.LogSource); ok {
		return l.LogFiles(id)
	}
	return nil
}
