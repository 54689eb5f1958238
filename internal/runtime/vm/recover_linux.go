package vm

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/moatsh/moat/internal/cgroups"
	"github.com/moatsh/moat/internal/runtime"
)

// adoptProc returns the QEMU of sandbox directory dir from its pidfile when
// that process still runs with dir on its command line (no PID reuse).
func adoptProc(dir string) *proc {
	b, err := os.ReadFile(filepath.Join(dir, "pid"))
	if err != nil {
		return nil
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid <= 0 {
		return nil
	}
	cmdline, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
	if err != nil || !strings.Contains(string(cmdline), dir+"/") {
		return nil
	}
	p := &proc{pid: pid}
	if !p.alive() {
		return nil
	}
	return p
}

// Recover implements runtime.Runtime: it adopts the QEMU processes of live
// sandboxes and removes everything of any other sandbox, unfinished
// template snapshots and stray cgroups.
func (r *Runtime) Recover(ctx context.Context, live []string) ([]*runtime.Handle, error) {
	errs := []error{r.net.Recover(ctx, live)}
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
		if h := r.adopt(id, isLive[id]); h != nil {
			out = append(out, h)
			continue
		}
		r.log.InfoContext(ctx, "removing orphaned sandbox", "sandbox", id)
		errs = append(errs, r.Kill(ctx, id))
	}
	errs = append(errs, r.removeStrayCgroups(isLive, seen), r.removeUnfinishedSnapshots())
	return out, errors.Join(errs...)
}

// adopt registers a live sandbox whose QEMU and network still exist.
func (r *Runtime) adopt(id string, live bool) *runtime.Handle {
	if !live {
		return nil
	}
	p := adoptProc(r.sandboxDir(id))
	n, ok := r.net.Lookup(id)
	if p == nil || !ok {
		return nil
	}
	b := r.boxes.Get(id)
	b.mu.Lock()
	defer b.mu.Unlock()
	b.proc = p
	b.handle = &runtime.Handle{ID: id, Runtime: Name, Addr: n.SandboxAddr, PID: p.pid}
	b.created = true
	r.pushAll(context.Background(), id, b)
	return b.handle
}

func (r *Runtime) removeStrayCgroups(live, seen map[string]bool) error {
	var errs []error
	for _, d := range cgroups.Dirs(r.o.cgroupParent) {
		entries, _ := os.ReadDir(d)
		for _, e := range entries {
			if !e.IsDir() || validID(e.Name()) != nil || live[e.Name()] || seen[e.Name()] {
				continue
			}
			// The parent may be shared with other backends: only empty ones go.
			if procs, err := os.ReadFile(filepath.Join(d, e.Name(), "cgroup.procs")); err == nil && len(procs) == 0 {
				errs = append(errs, cgroups.Remove(r.cgroupPath(e.Name())))
			}
		}
	}
	return errors.Join(errs...)
}

// removeUnfinishedSnapshots kills template boots cut short by a restart.
func (r *Runtime) removeUnfinishedSnapshots() error {
	dirs, _ := filepath.Glob(filepath.Join(r.dir, "templates", "*", "snap-*"))
	var errs []error
	for _, d := range dirs {
		if _, err := os.Stat(filepath.Join(d, readyFile)); err == nil {
			continue
		}
		if p := adoptProc(d); p != nil {
			errs = append(errs, p.stop(context.Background(), nil))
		}
		if err := os.RemoveAll(d); err != nil {
			errs = append(errs, fmt.Errorf("remove %s: %w", d, err))
		}
	}
	return errors.Join(errs...)
}
