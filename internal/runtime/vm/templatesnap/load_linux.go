package templatesnap

import (
	"context"
	"errors"
	"fmt"
	"os"

	"github.com/moatsh/moat/internal/errdefs"
	"github.com/moatsh/moat/internal/runtime/vm/snapshot"
)

// LoadSnapshot returns the snapshot snapID in dir (one a sandbox's
// Snapshot took) for a restore, if it was taken with the boot files and
// accelerator t uses. Errors: ErrNotFound, ErrFailedPrecondition (taken
// with another guest kernel, initramfs or accelerator).
func (t *Set) LoadSnapshot(ctx context.Context, snapID, dir string) (*snapshot.Snapshot, error) {
	meta, err := snapshot.ReadMeta(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("snapshot %s: %w", snapID, errdefs.ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("snapshot %s: %w", snapID, err)
	}
	bf, accel, err := t.MachineBase(ctx)
	if err != nil {
		return nil, err
	}
	if meta.BootKey != bf.Key || meta.Accel != accel {
		return nil, fmt.Errorf("snapshot %s was taken with guest kernel %s (boot files %s) and %s; this runtime uses %s (boot files %s) and %s: %w",
			snapID, meta.BootVersion, meta.BootKey, meta.Accel, bf.Version, bf.Key, accel, errdefs.ErrFailedPrecondition)
	}
	s := meta.Snapshot(dir)
	s.Boot, s.Fork = bf, true
	return s, nil
}
