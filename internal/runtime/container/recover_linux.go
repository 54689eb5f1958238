package container

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/moatsh/moat/internal/errdefs"
	"github.com/moatsh/moat/internal/runtime"
	"github.com/moatsh/moat/internal/runtime/container/oci"
	"github.com/moatsh/moat/internal/runtime/fsmark"
)

// Recover implements runtime.Runtime. It adopts containers in live that are
// running or paused, and removes every other sandbox it can find by name:
// containers in its OCI state root, directories (and their overlay mounts)
// under <DataDir>/sandboxes, and netns/veths/nft members via netpolicy.
func (r *Runtime) Recover(ctx context.Context, live []string) ([]*runtime.Handle, error) {
	want := map[string]bool{}
	for _, id := range live {
		want[id] = true
	}
	var errs []error
	states, err := r.oci.List(ctx)
	if err != nil {
		return nil, fmt.Errorf("recover: %w", err)
	}
	kept := map[string]int{} // id → pid
	paused := map[string]bool{}
	orphans := map[string]bool{}
	for _, st := range states {
		id, ok := strings.CutPrefix(st.ID, "moat-")
		if !ok || validID(id) != nil {
			continue
		}
		if want[id] && (st.Status == "running" || st.Status == "paused") {
			kept[id] = st.PID
			paused[id] = st.Status == "paused"
			continue
		}
		orphans[id] = true
	}
	for _, o := range r.others {
		errs = append(errs, r.removeForeign(ctx, o, orphans))
	}
	entries, err := os.ReadDir(filepath.Join(r.dataDir, r.o.flavor.subdir))
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		errs = append(errs, fmt.Errorf("recover: %w", err))
	}
	diskPaused := map[string]bool{} // paused to their files: no container to adopt
	for _, e := range entries {
		id := e.Name()
		if validID(id) != nil {
			continue
		}
		if want[id] && fsmark.Present(r.dir(id)) {
			// Whatever a crash left of its container goes; the files stay.
			diskPaused[id] = true
			delete(kept, id)
			delete(orphans, id)
			errs = append(errs, r.deleteContainer(ctx, id))
			continue
		}
		if _, ok := kept[id]; !ok {
			orphans[id] = true
		}
	}
	for id := range orphans {
		r.log.InfoContext(ctx, "removing orphaned sandbox", "sandbox", id)
		errs = append(errs, r.Kill(ctx, id))
	}
	keptIDs := make([]string, 0, len(kept))
	for id := range kept {
		keptIDs = append(keptIDs, id)
	}
	// live, not keptIDs: the network manager may be shared with other
	// backends, whose live sandboxes are in live too; this backend's dead
	// ones were torn down by Kill above.
	if err := r.net.Recover(ctx, live); err != nil {
		errs = append(errs, fmt.Errorf("recover network: %w", err))
	}
	var handles []*runtime.Handle
	adopt := func(id string, pid int, paused, onDisk bool) {
		h, err := r.adopt(ctx, id, pid, paused, onDisk)
		if err != nil {
			errs = append(errs, err, r.Kill(ctx, id))
			return
		}
		handles = append(handles, h)
	}
	for _, id := range keptIDs {
		adopt(id, kept[id], paused[id], false)
	}
	for id := range diskPaused {
		adopt(id, 0, true, true)
	}
	r.log.InfoContext(ctx, "recovered", "adopted", len(handles), "removed", len(orphans))
	return handles, errors.Join(errs...)
}

// removeForeign deletes Moat containers that the other OCI runtime holds
// (the server ran with it before) and marks their IDs as orphans.
func (r *Runtime) removeForeign(ctx context.Context, o *oci.CLI, orphans map[string]bool) error {
	states, err := o.List(ctx)
	if err != nil {
		return fmt.Errorf("recover: %w", err)
	}
	var errs []error
	for _, st := range states {
		id, ok := strings.CutPrefix(st.ID, "moat-")
		if !ok || validID(id) != nil {
			continue
		}
		r.log.InfoContext(ctx, "removing container of the other OCI runtime", "sandbox", id, "oci", o.Name)
		if _, err := o.Run(ctx, "delete", "-f", st.ID); err != nil && !errors.Is(err, errdefs.ErrNotFound) {
			errs = append(errs, err)
		}
		orphans[id] = true
	}
	return errors.Join(errs...)
}

// adopt makes id, found running, frozen (paused) or paused to its files
// (onDisk, no container), this runtime's again: its handle on the address
// its network kept and, unless onDisk, its init (pid, the OCI runtime's
// fresh reading of it) opened, and Kill's by-name undos stacked. An error
// means id cannot be adopted.
func (r *Runtime) adopt(ctx context.Context, id string, pid int, paused, onDisk bool) (*runtime.Handle, error) {
	n, ok := r.net.Lookup(id)
	if !ok {
		return nil, fmt.Errorf("recover sandbox %s: no network, removing it", id)
	}
	h := &runtime.Handle{ID: id, Runtime: r.Name(), Addr: n.SandboxAddr, PID: pid, Paused: paused}
	var p *runtime.Process
	if !onDisk {
		var err error
		if p, err = runtime.OpenProcess(pid); err != nil {
			return nil, fmt.Errorf("recover sandbox %s: init gone, removing it: %w", id, err)
		}
	}
	b := r.boxes.Get(id)
	b.mu.Lock()
	b.handle, b.proc, b.created, b.fsPaused = h, p, true, onDisk
	r.pushAll(ctx, id, &b.undo)
	b.mu.Unlock()
	return h, nil
}
