package qemu

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"sync"
)

// A restore (-incoming) never runs the guest kernel and initramfs QEMU is
// given: the guest's memory already holds the booted kernel. QEMU still
// reads a bzImage into its own memory at start, for the fw_cfg interface
// a boot would load it through (14 MiB of anonymous memory per microVM
// with Debian's cloud kernel, measured in stop 23: 29 → 15 MiB of QEMU's
// anonymous memory right after start), and keeps it for its lifetime. So
// restores get stubs: the kernel's setup header with a page of payload
// (QEMU checks the header, not the payload) and a page-sized initramfs.
// The migrated device state does not contain fw_cfg's files, and a guest
// reboot ends QEMU (-no-reboot), so a stub is never booted.

// stubPayload is how much of the kernel beyond its setup sectors a stub keeps.
const stubPayload = 4096

// stubs remembers RestoreStubs' answers by kernel and initramfs path: the
// files are written once, not read again by every create and resume.
var stubs sync.Map // [2]string → [2]string

// RestoreStubs returns stub copies of kernel and initramfs for restores,
// written beside them on first use (the same bytes every time, so
// concurrent writers agree). A kernel that is no bzImage gets no stub:
// the originals are returned.
func RestoreStubs(kernel, initramfs string) (string, string, error) {
	key := [2]string{kernel, initramfs}
	if v, ok := stubs.Load(key); ok {
		p := v.([2]string)
		return p[0], p[1], nil
	}
	k, i, err := makeStubs(kernel, initramfs)
	if err == nil {
		stubs.Store(key, [2]string{k, i})
	}
	return k, i, err
}

// makeStubs is RestoreStubs without the memory.
func makeStubs(kernel, initramfs string) (string, string, error) {
	f, err := os.Open(kernel)
	if err != nil {
		return "", "", fmt.Errorf("kernel stub: %w", err)
	}
	defer f.Close()
	hdr := make([]byte, 0x210)
	if _, err := f.ReadAt(hdr, 0); err != nil {
		return kernel, initramfs, nil
	}
	if !bytes.Equal(hdr[0x202:0x206], []byte("HdrS")) {
		return kernel, initramfs, nil
	}
	setupSects := int(hdr[0x1f1])
	if setupSects == 0 {
		setupSects = 4
	}
	head := make([]byte, (setupSects+1)*512+stubPayload)
	if _, err := f.ReadAt(head, 0); err != nil {
		return kernel, initramfs, nil // too short to stub (io.EOF): keep the original
	}
	sk, si := kernel+".restore-stub", filepath.Join(filepath.Dir(initramfs), filepath.Base(initramfs)+".restore-stub")
	if err := writeOnce(sk, head); err != nil {
		return "", "", fmt.Errorf("kernel stub: %w", err)
	}
	if err := writeOnce(si, make([]byte, 4096)); err != nil {
		return "", "", fmt.Errorf("initramfs stub: %w", err)
	}
	return sk, si, nil
}

// writeOnce writes b to path through a temporary file and a rename unless
// path already holds exactly b.
func writeOnce(path string, b []byte) error {
	if old, err := os.ReadFile(path); err == nil && bytes.Equal(old, b) {
		return nil
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".stub-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(b); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Chmod(0o644); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}
