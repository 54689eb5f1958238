package guestinit

import (
	"bytes"
	"fmt"
	"os"
	"strings"
	"unsafe"

	"golang.org/x/sys/unix"
)

// ext4IocResizeFS is EXT4_IOC_RESIZE_FS, _IOW('f', 16, __u64): grow a
// mounted ext4 file system to the given number of blocks.
const ext4IocResizeFS = 0x40086610

// Console markers of an online root file system resize.
const (
	// GrownMarker: the root file system was grown to its disk's new size
	// (followed by ": <bytes> bytes").
	GrownMarker = "moat-vminit: root fs grown"
	// GrowFailedMarker: growing it failed (followed by the error).
	GrowFailedMarker = "moat-vminit: root fs grow failed"
)

// watchResizes grows the root file system whenever its disk grows. The
// host enlarges a restored guest's disk with QMP block_resize; the
// virtio-blk driver picks up the new capacity and the kernel announces it
// with a "change" uevent carrying RESIZE=1, which this goroutine receives
// (it runs from boot, so every restore of the snapshot has it listening).
func watchResizes(dev string) {
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, unix.NETLINK_KOBJECT_UEVENT)
	if err != nil {
		fmt.Fprintln(os.Stderr, "moat-vminit: uevent socket:", err)
		return
	}
	if err := unix.Bind(fd, &unix.SockaddrNetlink{Family: unix.AF_NETLINK, Groups: 1}); err != nil {
		fmt.Fprintln(os.Stderr, "moat-vminit: uevent bind:", err)
		unix.Close(fd)
		return
	}
	name := "/" + strings.TrimPrefix(dev, "/dev/")
	buf := make([]byte, 8192)
	for {
		n, _, err := unix.Recvfrom(fd, buf, 0)
		if err == unix.EINTR || err == unix.ENOBUFS {
			continue
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "moat-vminit: uevent:", err)
			return
		}
		if !diskResized(buf[:n], name) {
			continue
		}
		if size, err := growRoot(dev); err != nil {
			fmt.Println(GrowFailedMarker + ": " + err.Error())
		} else {
			fmt.Printf("%s: %d bytes\n", GrownMarker, size)
		}
	}
}

// diskResized reports whether uevent msg ("change@<devpath>\0KEY=VAL\0…")
// announces a new capacity of the block device whose devpath ends in name.
func diskResized(msg []byte, name string) bool {
	fields := bytes.Split(msg, []byte{0})
	if len(fields) == 0 || !bytes.HasPrefix(fields[0], []byte("change@")) || !bytes.HasSuffix(fields[0], []byte(name)) {
		return false
	}
	for _, f := range fields[1:] {
		if string(f) == "RESIZE=1" {
			return true
		}
	}
	return false
}

// growRoot grows the ext4 file system mounted at / to fill dev, online,
// and returns its new size as statfs reports it.
func growRoot(dev string) (uint64, error) {
	f, err := os.Open(dev)
	if err != nil {
		return 0, err
	}
	size, err := unix.IoctlGetUint64(int(f.Fd()), unix.BLKGETSIZE64)
	f.Close()
	if err != nil {
		return 0, fmt.Errorf("%s size: %w", dev, err)
	}
	var st unix.Statfs_t
	if err := unix.Statfs("/", &st); err != nil {
		return 0, err
	}
	if st.Bsize <= 0 {
		return 0, fmt.Errorf("statfs /: block size %d", st.Bsize)
	}
	root, err := os.Open("/")
	if err != nil {
		return 0, err
	}
	defer root.Close()
	blocks := size / uint64(st.Bsize)
	if err := resizeFS(int(root.Fd()), blocks); err != nil {
		return 0, fmt.Errorf("EXT4_IOC_RESIZE_FS to %d blocks: %w", blocks, err)
	}
	if err := unix.Statfs("/", &st); err != nil {
		return 0, err
	}
	return st.Blocks * uint64(st.Bsize), nil
}

// resizeFS issues EXT4_IOC_RESIZE_FS on the ext4 file fd lives on.
func resizeFS(fd int, blocks uint64) error {
	_, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), ext4IocResizeFS, uintptr(unsafe.Pointer(&blocks)))
	if errno != 0 {
		return errno
	}
	return nil
}
