package snapshot

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/moatsh/moat/internal/errdefs"
	"github.com/moatsh/moat/internal/runtime/vm/image"
	"github.com/moatsh/moat/internal/runtime/vm/memfile"
	"github.com/moatsh/moat/internal/runtime/vm/prune"
	"github.com/moatsh/moat/internal/runtime/vm/qemu"
)

// ReadyFile marks a complete template snapshot directory.
const ReadyFile = prune.ReadyFile

// Snapshot is a template booted once and frozen right after envd answered,
// or a sandbox saved by Runtime.Snapshot (Fork).
type Snapshot struct {
	Dir      string // disk.qcow2, mem, state
	Boot     *image.BootFiles
	Accel    string
	VCPUs    int
	MemMiB   int
	Template string // template build key
	// Fork: disk.qcow2 is a sandbox's own overlay (over its template's
	// disk), which restores copy instead of layering another overlay on it.
	Fork bool
}

// Disk is the guest's disk at the snapshot.
func (s *Snapshot) Disk() string { return filepath.Join(s.Dir, "disk.qcow2") }

// Mem is the guest's RAM at the snapshot.
func (s *Snapshot) Mem() string { return filepath.Join(s.Dir, "mem") }

// State is the guest's device state at the snapshot.
func (s *Snapshot) State() string { return filepath.Join(s.Dir, "state") }

// Machine is the QEMU layout shared by a snapshot and its restores: a
// machine called name whose sockets and pidfile are in dir (the caller
// sets its disk, and its memory file unless that is s's own).
func (s *Snapshot) Machine(name, dir string, tscKHz int) *qemu.Machine {
	return &qemu.Machine{Name: name, Accel: s.Accel, TSCkHz: tscKHz, VCPUs: s.VCPUs, MemMiB: s.MemMiB,
		Kernel: s.Boot.Kernel, Initramfs: s.Boot.Initramfs, MemPath: s.Mem(),
		QMP: filepath.Join(dir, "qmp.sock"), Console: filepath.Join(dir, "console.sock"), PidFile: filepath.Join(dir, "pid")}
}

// Commit makes the snapshot in tmp (mem, disk.qcow2, state) durable with
// meta and renames it to final. Errors: ErrAlreadyExists (final exists).
func Commit(tmp, final string, meta *Meta) error {
	if err := WriteMeta(tmp, meta); err != nil {
		return err
	}
	if err := memfile.SyncFiles(filepath.Join(tmp, "mem"), filepath.Join(tmp, "disk.qcow2"), filepath.Join(tmp, "state")); err != nil {
		return err
	}
	if err := memfile.SyncDir(tmp); err != nil {
		return err
	}
	if err := os.Rename(tmp, final); err != nil {
		if errors.Is(err, os.ErrExist) {
			return fmt.Errorf("%s: %w", final, errdefs.ErrAlreadyExists)
		}
		return err
	}
	return memfile.SyncDir(filepath.Dir(final))
}

// RemoveUnfinished removes, under the vm runtime's directory vmDir, the
// snapshots a restart cut short: Runtime.Snapshot's <id>.tmp directories
// and template snapshots without their ready file (whose boot's QEMU is
// stopped first).
func RemoveUnfinished(vmDir string) error {
	var errs []error
	tmps, _ := filepath.Glob(filepath.Join(vmDir, "snapshots", "*.tmp"))
	for _, d := range tmps {
		if err := os.RemoveAll(d); err != nil {
			errs = append(errs, fmt.Errorf("remove %s: %w", d, err))
		}
	}
	dirs, _ := filepath.Glob(filepath.Join(vmDir, "templates", "*", "snap-*"))
	for _, d := range dirs {
		if _, err := os.Stat(filepath.Join(d, ReadyFile)); err == nil {
			continue
		}
		if p := qemu.Adopt(d); p != nil {
			errs = append(errs, p.Stop(context.Background(), nil))
		}
		errs = append(errs, qemu.UnmountLog(d))
		if err := os.RemoveAll(d); err != nil {
			errs = append(errs, fmt.Errorf("remove %s: %w", d, err))
		}
	}
	return errors.Join(errs...)
}
