package snapshot

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/moatsh/moat/internal/runtime/vm/image"
)

// MetaFile is the name of a Meta in sandbox and snapshot directories.
const MetaFile = "meta.json"

// Meta is what it takes to start QEMU again on a sandbox's or a
// snapshot's files: the migrated device state only loads into the same
// machine (accelerator, vCPUs, memory size, kernel and initramfs). Every
// sandbox directory carries one, so that a later server process can resume
// it; every snapshot taken by Runtime.Snapshot carries one too.
type Meta struct {
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

// MetaOf describes a machine restored from snap.
func MetaOf(snap *Snapshot) *Meta {
	return &Meta{Accel: snap.Accel, VCPUs: snap.VCPUs, MemMiB: snap.MemMiB, Kernel: snap.Boot.Kernel,
		Initramfs: snap.Boot.Initramfs, BootVersion: snap.Boot.Version, BootKey: snap.Boot.Key,
		Template: snap.Template, Created: time.Now().UTC()}
}

// Snapshot is the inverse of MetaOf for a snapshot kept in dir.
func (m *Meta) Snapshot(dir string) *Snapshot {
	return &Snapshot{Dir: dir, Accel: m.Accel, VCPUs: m.VCPUs, MemMiB: m.MemMiB, Template: m.Template,
		Boot: &image.BootFiles{Kernel: m.Kernel, Initramfs: m.Initramfs, Version: m.BootVersion, Key: m.BootKey}}
}

// WriteMeta writes m as dir/meta.json durably (temporary file, fsync, rename).
func WriteMeta(dir string, m *Meta) error {
	b, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return fmt.Errorf("meta: %w", err)
	}
	tmp := filepath.Join(dir, MetaFile+".tmp")
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
		err = os.Rename(tmp, filepath.Join(dir, MetaFile))
	}
	if err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("meta: %w", err)
	}
	return nil
}

// ReadMeta reads dir/meta.json; a missing file is os.ErrNotExist.
func ReadMeta(dir string) (*Meta, error) {
	b, err := os.ReadFile(filepath.Join(dir, MetaFile))
	if err != nil {
		return nil, err
	}
	var m Meta
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("%s: %w", filepath.Join(dir, MetaFile), err)
	}
	if m.VCPUs <= 0 || m.MemMiB <= 0 || m.Kernel == "" || m.Initramfs == "" || m.Accel == "" {
		return nil, fmt.Errorf("%s: incomplete", filepath.Join(dir, MetaFile))
	}
	return &m, nil
}
