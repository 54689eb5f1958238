package image

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
)

// ImageName is a template's disk image in its template directory. It is
// sized to the template's files plus imageFree (sandboxes grow it to
// their DiskMiB, see disk_linux.go), with 4 KiB blocks and an inode per
// 16 KiB whatever its size, so that grown disks get ext4's usual layout.
// Data dirs of versions that sized sandbox disks from the image keep
// their rootfs.ext4 (1 GiB free) for the snapshots built over it; new
// snapshots use this image.
const ImageName = "rootfs-v2.ext4"

// EnsureImage builds <tdir>/<ImageName> from rootfs once.
func EnsureImage(ctx context.Context, tdir, rootfs string, freeMiB int) (string, error) {
	img := filepath.Join(tdir, ImageName)
	if _, err := os.Stat(img); err == nil {
		return img, nil
	}
	if err := os.MkdirAll(tdir, 0o755); err != nil {
		return "", fmt.Errorf("template image: %w", err)
	}
	used, files, err := dirSize(rootfs)
	if err != nil {
		return "", fmt.Errorf("template image: %w", err)
	}
	// used counts a block more per file than the files take; add the
	// inode tables (1/64), a journal and the free space asked for.
	usedMiB := used >> 20
	sizeMiB := usedMiB + usedMiB/64 + 64 + int64(freeMiB)
	tmp := img + ".tmp"
	var out []byte
	for try := 0; try < 2; try++ {
		_ = os.Remove(tmp)
		args := []string{"-q", "-F", "-L", "root", "-b", "4096", "-i", "16384", "-I", "256", "-E", "root_owner=0:0"}
		if need := files * 5 / 4; need > sizeMiB<<20/16384 {
			args = append(args, "-N", strconv.FormatInt(need, 10))
		}
		args = append(args, "-d", rootfs, tmp, fmt.Sprintf("%dM", sizeMiB))
		out, err = exec.CommandContext(ctx, "mkfs.ext4", args...).CombinedOutput()
		if err == nil || ctx.Err() != nil {
			break
		}
		sizeMiB += sizeMiB / 4 // the estimate was short: once more with room
	}
	if err != nil {
		_ = os.Remove(tmp)
		return "", fmt.Errorf("mkfs.ext4 -d %s: %w: %s", rootfs, err, out)
	}
	if err := os.Rename(tmp, img); err != nil {
		return "", fmt.Errorf("template image: %w", err)
	}
	return img, nil
}

// dirSize is the bytes of the files under root plus a block each, and
// their number.
func dirSize(root string) (size, files int64, err error) {
	err = filepath.WalkDir(root, func(_ string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if fi, err := d.Info(); err == nil {
			size += fi.Size() + 4096
			files++
		}
		return nil
	})
	return size, files, err
}

// Qcow2Overlay creates a copy-on-write overlay of backing.
func Qcow2Overlay(ctx context.Context, backing, backingFmt, dst string) error {
	out, err := exec.CommandContext(ctx, "qemu-img", "create", "-q", "-f", "qcow2", "-F", backingFmt, "-b", backing, dst).CombinedOutput()
	if err != nil {
		return fmt.Errorf("qemu-img create %s: %w: %s", dst, err, out)
	}
	return nil
}

// BackingChain lists the backing files under the qcow2 image disk (not
// disk itself), nearest first, as QEMU will open them.
func BackingChain(disk string) ([]string, error) {
	var chain []string
	for cur := disk; len(chain) < 8; {
		next, err := Qcow2Backing(cur)
		if err != nil {
			return nil, err
		}
		if next == "" {
			return chain, nil
		}
		if !filepath.IsAbs(next) {
			next = filepath.Join(filepath.Dir(cur), next)
		}
		chain = append(chain, next)
		cur = next
	}
	return nil, fmt.Errorf("jail: %s: backing chain too long", disk)
}

// Qcow2Backing reads the backing file name from a qcow2 header; "" for a
// file that is not qcow2 (a raw image) or has no backing file.
func Qcow2Backing(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", fmt.Errorf("jail: disk: %w", err)
	}
	defer f.Close()
	var h [20]byte
	if _, err := io.ReadFull(f, h[:]); err != nil || string(h[:4]) != "QFI\xfb" {
		return "", nil
	}
	off, size := binary.BigEndian.Uint64(h[8:16]), binary.BigEndian.Uint32(h[16:20])
	if off == 0 || size == 0 {
		return "", nil
	}
	if size > 1023 {
		return "", fmt.Errorf("jail: %s: backing file name of %d bytes", path, size)
	}
	name := make([]byte, size)
	if _, err := f.ReadAt(name, int64(off)); err != nil {
		return "", fmt.Errorf("jail: %s: backing file name: %w", path, err)
	}
	return string(name), nil
}
