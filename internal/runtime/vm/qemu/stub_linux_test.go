package qemu

import (
	"os"
	"path/filepath"
	"testing"
)

func TestRestoreStubs(t *testing.T) {
	dir := t.TempDir()
	bz := make([]byte, 64<<10)
	bz[0x1f1] = 3 // setup sectors: the stub keeps (3+1)*512 bytes and a page
	copy(bz[0x202:], "HdrS")
	for i := 0x210; i < len(bz); i++ {
		bz[i] = byte(i)
	}
	for name, b := range map[string][]byte{"vmlinuz": bz, "initramfs.cpio": make([]byte, 10000),
		"elf": append([]byte("\x7fELF"), make([]byte, 9000)...), "short": bz[:3000]} {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	initrd := filepath.Join(dir, "initramfs.cpio")
	for range 2 { // a second call finds the same stubs
		k, i, err := RestoreStubs(filepath.Join(dir, "vmlinuz"), initrd)
		if err != nil {
			t.Fatal(err)
		}
		if k != filepath.Join(dir, "vmlinuz.restore-stub") || i != initrd+".restore-stub" {
			t.Fatalf("stubs %s, %s", k, i)
		}
		got, err := os.ReadFile(k)
		if err != nil || len(got) != 4*512+stubPayload || string(got) != string(bz[:len(got)]) {
			t.Fatalf("kernel stub: %d bytes, %v; want the first %d bytes of the kernel", len(got), err, 4*512+stubPayload)
		}
		if fi, err := os.Stat(i); err != nil || fi.Size() != 4096 {
			t.Fatalf("initramfs stub: %v, %v", fi, err)
		}
	}
	for _, name := range []string{"elf", "short"} { // no bzImage, or too short: the originals
		k := filepath.Join(dir, name)
		if gk, gi, err := RestoreStubs(k, initrd); err != nil || gk != k || gi != initrd {
			t.Errorf("RestoreStubs(%s) = %s, %s, %v; want the originals", name, gk, gi, err)
		}
	}
	if _, _, err := RestoreStubs(filepath.Join(dir, "missing"), initrd); err == nil {
		t.Error("a missing kernel: no error")
	}
}
