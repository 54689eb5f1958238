package container

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/moatsh/moat/internal/errdefs"
	"github.com/moatsh/moat/internal/runtime"
	"github.com/moatsh/moat/internal/runtime/fsmark"
)

// Filesystem-only pause (E2B's pause with memory: false): the container's
// processes are killed and the container deleted, so its memory, CPU and
// PIDs go back to the host; its directory, disk, overlay, log and network
// stay. A marker file in the directory (package fsmark), written and synced
// before anything is stopped, says so: Recover adopts a marked sandbox as paused whatever
// state a crash left its container in. Resume runs the same bundle again:
// envd starts fresh on the kept files (the orchestrator initialises it
// with the sandbox's token and environment) and the marker goes once envd
// listens.

// PauseFilesystem implements runtime.FilesystemPauser.
func (r *Runtime) PauseFilesystem(ctx context.Context, id string) error {
	if err := validID(id); err != nil {
		return err
	}
	b, ok := r.boxes.Lookup(id)
	if !ok {
		return fmt.Errorf("pause sandbox %s: %w", id, errdefs.ErrNotFound)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.created || b.handle == nil {
		return fmt.Errorf("pause sandbox %s: %w", id, errdefs.ErrNotFound)
	}
	if b.fsPaused {
		return nil
	}
	if err := fsmark.Write(r.dir(id)); err != nil {
		return fmt.Errorf("pause sandbox %s: %w", id, err)
	}
	if err := r.deleteContainer(context.WithoutCancel(ctx), id); err != nil {
		// The container may be half gone: it stays marked, and Resume
		// (or Recover) starts from the files.
		r.log.WarnContext(ctx, "filesystem pause: delete container", "sandbox", id, "err", err)
	}
	if b.proc != nil { // the pause returns once the init has ended
		wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		_ = b.proc.Wait(wctx)
		cancel()
	}
	b.closeProc()
	b.fsPaused = true
	h := *b.handle
	h.PID, h.Paused = 0, true
	b.handle = &h
	r.log.InfoContext(ctx, "sandbox paused to its filesystem", "sandbox", id)
	return nil
}

// resumeFilesystem runs a filesystem-paused sandbox's bundle again and
// waits for envd. On error the container is deleted again and the sandbox
// stays paused (nil handle). b.mu is held.
func (r *Runtime) resumeFilesystem(ctx context.Context, id string, b *sandbox) (*runtime.Handle, error) {
	fail := func(err error) (*runtime.Handle, error) {
		b.closeProc()
		return nil, errors.Join(fmt.Errorf("resume sandbox %s: %w", id, err), r.deleteContainer(context.WithoutCancel(ctx), id))
	}
	_ = r.deleteContainer(ctx, id)                   // what a crash in an earlier resume left
	if err := r.net.Readdress(ctx, id); err != nil { // runsc took the addresses off
		return nil, fmt.Errorf("resume sandbox %s: %w", id, err)
	}
	var logFrom int64 // envd's log holds the earlier runs' lines
	if fi, err := os.Stat(r.logPath(id)); err == nil {
		logFrom = fi.Size()
	}
	if err := r.runBundle(ctx, id, b, r.oci.Start); err != nil {
		return fail(err)
	}
	h := *b.handle
	h.PID, h.Paused = b.proc.PID(), false
	if err := r.waitReady(ctx, &h, b.proc, logFrom); err != nil {
		return fail(err)
	}
	if err := fsmark.Remove(r.dir(id)); err != nil {
		return fail(err)
	}
	b.fsPaused, b.handle = false, &h
	r.log.InfoContext(ctx, "sandbox resumed from its filesystem", "sandbox", id, "pid", h.PID)
	return &h, nil
}
