package volumeapi

import (
	"context"
	"errors"
	"path"
	"strings"
	"sync"

	"github.com/moatsh/moat/api/rest"
	"github.com/moatsh/moat/internal/errdefs"
	"github.com/moatsh/moat/internal/orchestrator"
	"github.com/moatsh/moat/internal/store"
)

// MaxMounts bounds a create's volumeMounts.
const MaxMounts = 16

// holds are the volume mounts held for live sandboxes, released when the
// sandbox leaves (Release, the orchestrator's OnRemove hook).
type holds struct {
	mu sync.Mutex
	m  map[string]func() // sandbox ID -> release of all its volumes
}

// Mounts resolves a create's volumeMounts (by name, team's volumes) and
// holds their host mounts; release gives them back (call it when the
// create fails, else hand it to Hold).
// On a nil API (volumes off) any mount is 400.
func (a *API) Mounts(ctx context.Context, team string, ms []rest.SandboxVolumeMount) (
	_ []orchestrator.VolumeMount, release func(), err error) {
	if len(ms) == 0 {
		return nil, func() {}, nil
	}
	if a == nil {
		return nil, nil, errdefs.Publicf(errdefs.ErrInvalidArgument, "volumeMounts is not supported by this server")
	}
	if len(ms) > MaxMounts {
		return nil, nil, errdefs.Publicf(errdefs.ErrInvalidArgument, "too many volumeMounts: %d, at most %d", len(ms), MaxMounts)
	}
	var out []orchestrator.VolumeMount
	var rels []func()
	releaseAll := func() {
		for _, r := range rels {
			r()
		}
	}
	// Every error return gives back what was taken. (The error returns
	// set the named release to nil: the deferred call must not use it.)
	defer func() {
		if err != nil {
			releaseAll()
		}
	}()
	seen := map[string]bool{}
	for _, m := range ms {
		if err := checkMountPath(m.Path); err != nil {
			return nil, nil, err
		}
		if seen[m.Path] {
			return nil, nil, errdefs.Publicf(errdefs.ErrInvalidArgument, "volumeMounts: path %q is used twice", m.Path)
		}
		seen[m.Path] = true
		v, err := a.d.Store.GetVolume(ctx, team, m.Name)
		if errdefs.IsNotFound(err) || (err == nil && v.Name != m.Name) {
			return nil, nil, errdefs.Publicf(errdefs.ErrNotFound, "volume %q not found", m.Name)
		}
		if err != nil {
			return nil, nil, err
		}
		root, rel, err := a.d.Volumes.Acquire(v.ID)
		if err != nil {
			return nil, nil, err
		}
		rels = append(rels, rel)
		out = append(out, orchestrator.VolumeMount{Source: root,
			VolumeMount: store.VolumeMount{VolumeID: v.ID, Name: v.Name, Path: m.Path}})
	}
	return out, releaseAll, nil
}

// checkMountPath accepts an absolute, clean path other than "/" and
// outside the kernel filesystems.
func checkMountPath(p string) error {
	bad := func(why string) error {
		return errdefs.Publicf(errdefs.ErrInvalidArgument, "volumeMounts: invalid path %q: %s", p, why)
	}
	switch {
	case len(p) > 1024 || strings.IndexByte(p, 0) >= 0:
		return bad("too long or has a NUL byte")
	case !path.IsAbs(p) || path.Clean(p) != p:
		return bad("want an absolute path without '.', '..' or trailing '/'")
	case p == "/":
		return bad("cannot mount over the root")
	}
	for _, sys := range []string{"/proc", "/sys", "/dev"} {
		if p == sys || strings.HasPrefix(p, sys+"/") {
			return bad("cannot mount over " + sys)
		}
	}
	return nil
}

// Hold keeps release until sandbox id leaves (Release); it reports
// whether it did (not on a nil API, where Mounts holds nothing).
func (a *API) Hold(id string, release func()) bool {
	if a == nil {
		return false
	}
	a.holds.mu.Lock()
	defer a.holds.mu.Unlock()
	if a.holds.m == nil {
		a.holds.m = map[string]func(){}
	}
	if prev := a.holds.m[id]; prev != nil {
		prev()
	}
	a.holds.m[id] = release
	return true
}

// Release gives back sandbox id's volumes (once it is gone); a sandbox
// without any is fine.
func (a *API) Release(id string) {
	a.holds.mu.Lock()
	rel := a.holds.m[id]
	delete(a.holds.m, id)
	a.holds.mu.Unlock()
	if rel != nil {
		rel()
	}
}

// Recover holds the volumes of sandboxes that survived a server restart
// (their mounts are still in their namespaces).
func (a *API) Recover(sbs []store.Sandbox) error {
	if a == nil {
		return nil
	}
	var errs []error
	for _, sb := range sbs {
		var rels []func()
		for _, m := range sb.VolumeMounts {
			_, rel, err := a.d.Volumes.Acquire(m.VolumeID)
			if err != nil {
				errs = append(errs, err)
				continue
			}
			rels = append(rels, rel)
		}
		if len(rels) > 0 {
			a.Hold(sb.ID, func() {
				for _, r := range rels {
					r()
				}
			})
		}
	}
	return errors.Join(errs...)
}

// Wire is E2B's view of a sandbox's mounts.
func Wire(ms []store.VolumeMount) []rest.SandboxVolumeMount {
	var out []rest.SandboxVolumeMount
	for _, m := range ms {
		out = append(out, rest.SandboxVolumeMount{Name: m.Name, Path: m.Path})
	}
	return out
}
