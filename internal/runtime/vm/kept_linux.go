package vm

import (
	"context"
	"fmt"
	"path/filepath"
	"time"

	"github.com/moatsh/moat/internal/runtime"
	"github.com/moatsh/moat/internal/runtime/vm/freeze"
	"github.com/moatsh/moat/internal/runtime/vm/guestenvd"
)

// Kept QEMUs (package kept decides for how long): a Pause of a sandbox
// without volumes saves it as always (its state is durable, so a crash or
// a restart finds it paused), then keeps its QEMU, stopped, with its
// network and cgroup, instead of quitting it. A Resume of it only consumes
// the state and continues the guest: QEMU still maps the guest's pages and
// its translation cache still holds the guest's code, which under TCG is
// most of a cold resume (docs/pause.md). At most keepMax QEMUs are kept, for
// at most keepFor each; Close lets them all go, and Recover quits those a
// crash left. A released one is paused like any other.

// DefaultKeepPaused is how many paused sandboxes keep their QEMU;
// defaultKeepFor is for how long.
const DefaultKeepPaused, defaultKeepFor = 4, 5 * time.Minute

// WithKeepPaused sets how many paused sandboxes keep their stopped QEMU
// (0: none) and for how long.
func WithKeepPaused(n int, d time.Duration) Option {
	return func(o *options) { o.keepMax, o.keepFor = n, d }
}

// keep keeps paused sandbox id's stopped QEMU if it may (it has no volume
// server: that quits at a pause). b.mu is held.
func (r *Runtime) keep(id string, b *sandbox) bool {
	if b.vols != nil || !r.kept.Add(id) {
		return false
	}
	b.kept = true
	r.flush.Remove(filepath.Join(r.sandboxDir(id), "mem"))
	return true
}

// releaseKept quits the kept QEMU of paused sandbox id and removes its
// network and cgroup: what a Pause does when it does not keep it.
func (r *Runtime) releaseKept(ctx context.Context, id string) {
	b, ok := r.boxes.Lookup(id)
	if !ok {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	r.releaseKeptLocked(ctx, id, b)
}

func (r *Runtime) releaseKeptLocked(ctx context.Context, id string, b *sandbox) {
	if !b.kept {
		return
	}
	r.kept.Take(id)
	b.kept = false
	var pt freeze.Times
	if err := r.release(ctx, id, b, &pt); err != nil {
		r.log.WarnContext(ctx, "kept QEMU of a paused sandbox: release incomplete", "sandbox", id, "err", err)
	}
	r.finishTeardown(ctx, id, b)
	r.log.DebugContext(ctx, "kept QEMU of a paused sandbox released", "sandbox", id)
}

// resumeKept continues paused sandbox id in its kept QEMU. (nil, nil)
// means it has none that works (released now): the caller resumes it
// cold. As for Resume, a handle with an error means the guest runs,
// unhealthy. b.mu is held.
func (r *Runtime) resumeKept(ctx context.Context, id string, b *sandbox) (*runtime.Handle, error) {
	n, ok := r.net.Lookup(id)
	if !ok || b.proc == nil || b.qmp == nil || !b.proc.Alive() {
		r.releaseKeptLocked(ctx, id, b)
		return nil, nil
	}
	start := time.Now()
	if consumed, err := freeze.Consume(r.sandboxDir(id)); !consumed {
		r.releaseKeptLocked(ctx, id, b)
		return nil, fmt.Errorf("resume sandbox %s: %w", id, err)
	} else if err != nil {
		r.log.WarnContext(ctx, "resume: state removal not durable", "sandbox", id, "err", err)
	}
	r.kept.Take(id)
	h := &runtime.Handle{ID: id, Runtime: Name, Addr: n.SandboxAddr, PID: b.proc.Pid}
	b.kept, b.paused, b.handle = false, false, h
	r.flush.Add(filepath.Join(r.sandboxDir(id), "mem"))
	err := freeze.Thaw(ctx, b.qmp, b.proc.Con, r.o.readyTimeout, true)
	if err == nil {
		err = guestenvd.WaitRestored(ctx, envdAddr(h), r.o.readyTimeout)
	}
	if err != nil {
		return h, fmt.Errorf("resume sandbox %s (running, but not healthy): %w", id, err)
	}
	r.log.InfoContext(ctx, "sandbox resumed", "sandbox", id, "addr", h.Addr, "pid", h.PID, "kept", true,
		"took", time.Since(start).Round(time.Millisecond))
	return h, nil
}
