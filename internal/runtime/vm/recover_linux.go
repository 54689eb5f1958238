package vm

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/moatsh/moat/internal/cgroups"
	"github.com/moatsh/moat/internal/runtime"
	"github.com/moatsh/moat/internal/runtime/fsmark"
	"github.com/moatsh/moat/internal/runtime/vm/launch"
	"github.com/moatsh/moat/internal/runtime/vm/qemu"
	"github.com/moatsh/moat/internal/runtime/vm/snapshot"
)

// Recover implements runtime.Runtime: it adopts the QEMU processes of live
// sandboxes, registers live sandboxes paused to disk (also those whose
// pause or resume a crash cut short, see pause_linux.go) and removes
// everything of any other sandbox, unfinished template snapshots and
// snapshots, and stray cgroups.
func (r *Runtime) Recover(ctx context.Context, live []string) ([]*runtime.Handle, error) {
	// A pause's background teardown (releaseQuit) still running would
	// delete a veth while the network's Recover reads it.
	r.bg.Wait()
	errs := []error{r.net.Recover(ctx, live), r.spares.RemoveOthers()}
	isLive := map[string]bool{}
	for _, id := range live {
		isLive[id] = true
	}
	var out []*runtime.Handle
	entries, err := os.ReadDir(filepath.Join(r.dir, "sandboxes"))
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		errs = append(errs, err)
	}
	seen := map[string]bool{}
	for _, e := range entries {
		id := e.Name()
		if validID(id) != nil {
			continue
		}
		seen[id] = true
		if isLive[id] {
			h, err := r.recoverLive(ctx, id)
			errs = append(errs, err)
			if h != nil {
				out = append(out, h)
				continue
			}
		}
		r.log.InfoContext(ctx, "removing orphaned sandbox", "sandbox", id)
		errs = append(errs, r.Kill(ctx, id))
	}
	errs = append(errs, cgroups.RemoveStray(r.o.cgroupParent, func(name string) bool { return validID(name) != nil || isLive[name] || seen[name] }),
		snapshot.RemoveUnfinished(r.dir))
	return out, errors.Join(errs...)
}

// recoverLive decides what live sandbox id is after a restart: a saved
// state file or a filesystem-pause marker means paused (a QEMU still
// running on it quits), else a QEMU
// that runs, or that a crash left stopped mid-pause or mid-snapshot, is
// continued and adopted. nil means nothing usable is left.
func (r *Runtime) recoverLive(ctx context.Context, id string) (*runtime.Handle, error) {
	dir := r.sandboxDir(id)
	_, serr := os.Stat(r.statePath(id))
	hasState := serr == nil
	_ = os.Remove(filepath.Join(dir, "state.tmp"))
	p := qemu.Adopt(dir)
	switch {
	case hasState || fsmark.Present(dir):
		if _, err := snapshot.ReadMeta(dir); err != nil {
			return nil, fmt.Errorf("recover sandbox %s: paused but %w", id, err)
		}
		var errs []error
		if p != nil { // the pause was complete, or a resume had not yet used the state
			c, _ := qemu.DialQMPIn(ctx, dir, time.Second)
			errs = append(errs, p.Stop(ctx, c))
			if c != nil {
				c.Close()
			}
		}
		errs = append(errs, r.net.Teardown(ctx, id), cgroups.Remove(r.cgroupPath(id)), qemu.UnmountLog(dir))
		return r.adoptPaused(id, !hasState), errors.Join(errs...)
	case p != nil:
		return r.adoptRunning(ctx, id, p)
	}
	return nil, nil
}

// adoptPaused registers sandbox id as paused to disk (to its files only
// when filesOnly).
func (r *Runtime) adoptPaused(id string, filesOnly bool) *runtime.Handle {
	b := r.boxes.Get(id)
	b.mu.Lock()
	defer b.mu.Unlock()
	b.proc, b.qmp = nil, nil
	b.handle = &runtime.Handle{ID: id, Runtime: Name, Paused: true}
	b.created, b.paused, b.fsPaused = true, true, filesOnly
	r.pushAll(context.Background(), id, b)
	return b.handle
}

// adoptRunning registers a live sandbox whose QEMU p and network still
// exist. A guest that a crash left stopped by a pause or snapshot that had
// not committed continues, with its link up again.
func (r *Runtime) adoptRunning(ctx context.Context, id string, p *qemu.Proc) (*runtime.Handle, error) {
	n, ok := r.net.Lookup(id)
	if !ok {
		return nil, nil
	}
	c, _ := qemu.DialQMPIn(ctx, r.sandboxDir(id), 2*time.Second)
	if c != nil {
		st, err := qemu.Status(ctx, c)
		switch {
		case err != nil:
		case st == "paused" || st == "postmigrate":
			err = errors.Join(c.Execute(ctx, "cont", nil, nil), qemu.SetLink(ctx, c, true))
			if err == nil {
				r.log.InfoContext(ctx, "continued a sandbox stopped by an unfinished pause or snapshot", "sandbox", id)
			}
		case st != "running":
			err = fmt.Errorf("vm status %q", st)
		}
		if err != nil {
			c.Close()
			return nil, fmt.Errorf("recover sandbox %s: %w", id, err)
		}
	}
	var err error
	if p.Con, err = qemu.Reconnect(ctx, r.sandboxDir(id), p.Alive); err != nil {
		r.log.WarnContext(ctx, "adopted sandbox has no console: pause and snapshot will fail", "sandbox", id, "err", err)
	}
	b := r.boxes.Get(id)
	b.mu.Lock()
	defer b.mu.Unlock()
	b.proc, b.qmp = p, c
	b.handle = &runtime.Handle{ID: id, Runtime: Name, Addr: n.SandboxAddr, PID: p.Pid}
	b.created = true
	ids, err := launch.DirIDs(r.ids, r.sandboxDir(id))
	if err == nil {
		err = r.startVolumes(ctx, id, n, ids, nil, b, nil, true) // volumes_linux.go
	}
	if err != nil {
		r.log.WarnContext(ctx, "adopted sandbox: its volume server", "sandbox", id, "err", err)
	}
	r.pushAll(context.Background(), id, b)
	r.flush.Add(filepath.Join(r.sandboxDir(id), "mem"))
	return b.handle, nil
}

// Close ends r's background work (spare and slot refills), kills its
// slots, quits kept QEMUs and removes its spares; its sandboxes keep running (a later
// Recover adopts them).
func (r *Runtime) Close() error {
	err := r.slots.Close(context.Background())
	r.kept.Close()
	r.bg.Wait()
	return errors.Join(err, r.spares.Close())
}
