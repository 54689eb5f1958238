package image

import (
	"encoding/binary"
	"fmt"
	"io"
	"os"

	"github.com/moatsh/moat/internal/errdefs"
	"github.com/moatsh/moat/internal/runtime"
)

// A sandbox's disk is as large as Spec.DiskMiB asks. Restores start from a
// snapshot whose guest has the snapshot's disk mounted, so the disk cannot
// simply be made larger before QEMU starts: the guest kernel knows the old
// capacity. Instead the restore grows it online: QMP block_resize enlarges
// the qcow2 overlay (its virtual size) and makes virtio-blk tell the guest
// (a config-change interrupt), the guest kernel announces the new capacity
// with a RESIZE uevent and moat-vminit grows the mounted ext4 to it
// (EXT4_IOC_RESIZE_FS, see guestinit.GrownMarker). The size lives in the
// overlay's header, so pause/resume, snapshots and forks keep it. A
// template's snapshot is taken with its disk grown the same way to the
// Spec.DiskMiB of the creates it serves (the size is part of its key), so
// an ordinary create grows nothing: the online grow is for restores of a
// sandbox snapshot asking for more.
//
// A disk cannot shrink (ext4 does not shrink online, and the template's
// image is shared): a Spec.DiskMiB below the snapshot's disk size is
// refused with ErrInvalidArgument rather than silently ignored, so that
// what the API reports as the sandbox's disk size is always true.

// DiskTarget is the size in bytes spec asks of a disk that is now have
// bytes: 0 when it stays as it is (DiskMiB unset or equal). Errors:
// ErrInvalidArgument when spec asks for less.
func DiskTarget(spec runtime.Spec, have int64) (int64, error) {
	if spec.DiskMiB <= 0 {
		return 0, nil
	}
	want := int64(spec.DiskMiB) << 20
	switch {
	case want == have:
		return 0, nil
	case want < have:
		return 0, errdefs.Publicf(errdefs.ErrInvalidArgument,
			"diskSizeMB %d is below the %d MiB of this template's disk (the vm runtime cannot shrink it; ask for at least %d)",
			spec.DiskMiB, have>>20, (have+1<<20-1)>>20)
	}
	return want, nil
}

// Qcow2Size reads the virtual size of the qcow2 image path from its header.
func Qcow2Size(path string) (int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, fmt.Errorf("disk: %w", err)
	}
	defer f.Close()
	var h [32]byte
	if _, err := io.ReadFull(f, h[:]); err != nil || string(h[:4]) != "QFI\xfb" {
		return 0, fmt.Errorf("disk: %s is not a qcow2 image", path)
	}
	return int64(binary.BigEndian.Uint64(h[24:32])), nil
}
