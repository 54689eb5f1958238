package vm

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"
)

// metaFile is the name of a vmMeta in sandbox and snapshot directories.
const metaFile = "meta.json"

// vmMeta is what it takes to start QEMU again on a sandbox's or a
// snapshot's files: the migrated device state only loads into the same
// machine (accelerator, vCPUs, memory size, kernel and initramfs). Every
// sandbox directory carries one, so that a later server process can resume
// it; every snapshot taken by Runtime.Snapshot carries one too.
type vmMeta struct {
	Accel       string `json:"accel"`
	VCPUs       int    `json:"vcpus"`
	MemMiB      int    `json:"memMiB"`
	Kernel      string `json:"kernel"`
	Initramfs   string `json:"initramfs"`
	BootVersion string `json:"bootVersion"`
	BootKey     string `json:"bootKey"`
	Template    string `json:"template,omitempty"` // template build key (templates/<key>)
	// Sandbox: the snapshot directory it was restored from.
	// Snapshot: the sandbox it was taken of.
	Source string `json:"source,omitempty"`
	// AllowInternet is the sandbox's egress setting (sandboxes only).
	AllowInternet bool      `json:"allowInternet,omitempty"`
	Created       time.Time `json:"created"`
}

// metaOf describes a machine restored from snap.
func metaOf(snap *snapshot) *vmMeta {
	return &vmMeta{Accel: snap.Accel, VCPUs: snap.VCPUs, MemMiB: snap.MemMiB, Kernel: snap.Boot.Kernel,
		Initramfs: snap.Boot.Initramfs, BootVersion: snap.Boot.Version, BootKey: snap.Boot.Key,
		Template: snap.Template, Created: time.Now().UTC()}
}

// snapshotOf is the inverse of metaOf for a snapshot kept in dir.
func (m *vmMeta) snapshotOf(dir string) *snapshot {
	return &snapshot{Dir: dir, Accel: m.Accel, VCPUs: m.VCPUs, MemMiB: m.MemMiB, Template: m.Template,
		Boot: &bootFiles{Kernel: m.Kernel, Initramfs: m.Initramfs, Version: m.BootVersion, Key: m.BootKey}}
}

// writeMeta writes m as dir/meta.json durably (temporary file, fsync, rename).
func writeMeta(dir string, m *vmMeta) error {
	b, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return fmt.Errorf("meta: %w", err)
	}
	tmp := filepath.Join(dir, metaFile+".tmp")
	f, err := os.OpenFile(tmp, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
	if err != nil {
		return fmt.Errorf("meta: %w", err)
	}
	_, err = f.Write(append(b, '\n'))
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, filepath.Join(dir, metaFile))
	}
	if err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("meta: %w", err)
	}
	return nil
}

// readMeta reads dir/meta.json; a missing file is os.ErrNotExist.
func readMeta(dir string) (*vmMeta, error) {
	b, err := os.ReadFile(filepath.Join(dir, metaFile))
	if err != nil {
		return nil, err
	}
	var m vmMeta
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("%s: %w", filepath.Join(dir, metaFile), err)
	}
	if m.VCPUs <= 0 || m.MemMiB <= 0 || m.Kernel == "" || m.Initramfs == "" || m.Accel == "" {
		return nil, fmt.Errorf("%s: incomplete", filepath.Join(dir, metaFile))
	}
	return &m, nil
}

// syncFiles fdatasyncs each file (their data and size reach the disk).
func syncFiles(paths ...string) error {
	var errs []error
	for _, p := range paths {
		f, err := os.OpenFile(p, os.O_RDWR, 0)
		if err != nil {
			errs = append(errs, fmt.Errorf("sync: %w", err))
			continue
		}
		if err := ignoringEINTR(func() error { return unix.Fdatasync(int(f.Fd())) }); err != nil {
			errs = append(errs, fmt.Errorf("sync %s: %w", p, err))
		}
		f.Close()
	}
	return errors.Join(errs...)
}

// syncDir makes renames and removals in dir durable.
func syncDir(dir string) error {
	f, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("sync dir: %w", err)
	}
	defer f.Close()
	if err := f.Sync(); err != nil {
		return fmt.Errorf("sync dir %s: %w", dir, err)
	}
	return nil
}

func ignoringEINTR(f func() error) error {
	for {
		if err := f(); !errors.Is(err, unix.EINTR) {
			return err
		}
	}
}

// unsyncedBytes is how much of paths is waiting to be written back (dirty
// or under writeback in the page cache, by cachestat(2)): what syncing
// them writes. Unknown counts as 0 (kernels before 6.5).
func unsyncedBytes(paths ...string) int64 {
	var n int64
	for _, p := range paths {
		f, err := os.Open(p)
		if err != nil {
			continue
		}
		var st unix.Cachestat_t
		if unix.Cachestat(uint(f.Fd()), &unix.CachestatRange{}, &st, 0) == nil {
			n += int64(st.Dirty+st.Writeback) * int64(os.Getpagesize())
		}
		f.Close()
	}
	return n
}
