package sparse

import (
	"errors"
	"fmt"
	"io"
	"os"

	"golang.org/x/sys/unix"
)

// Copy copies src to a new file dst (mode 0600) so that src's holes
// stay holes: it walks the data ranges with SEEK_DATA/SEEK_HOLE and copies
// each with copy_file_range, which shares blocks on filesystems with
// reflinks and copies inside the kernel elsewhere. A guest memory file of
// 512 MiB with 130 MiB of data costs 130 MiB, not 512. It returns the
// bytes of data copied. dst must not exist; it is removed on error.
func Copy(src, dst string) (_ int64, retErr error) {
	in, err := os.Open(src)
	if err != nil {
		return 0, fmt.Errorf("sparse copy: %w", err)
	}
	defer in.Close()
	fi, err := in.Stat()
	if err != nil {
		return 0, fmt.Errorf("sparse copy: %w", err)
	}
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return 0, fmt.Errorf("sparse copy: %w", err)
	}
	defer func() {
		if cerr := out.Close(); cerr != nil && retErr == nil {
			retErr = fmt.Errorf("sparse copy to %s: %w", dst, cerr)
		}
		if retErr != nil {
			_ = os.Remove(dst)
		}
	}()
	size := fi.Size()
	if err := out.Truncate(size); err != nil {
		return 0, fmt.Errorf("sparse copy to %s: %w", dst, err)
	}
	ifd := int(in.Fd())
	var copied int64
	for off := int64(0); off < size; {
		data, err := unix.Seek(ifd, off, unix.SEEK_DATA)
		if errors.Is(err, unix.ENXIO) {
			break // only a hole is left
		}
		if err != nil {
			return copied, fmt.Errorf("sparse copy %s: seek data at %d: %w", src, off, err)
		}
		hole, err := unix.Seek(ifd, data, unix.SEEK_HOLE)
		if err != nil {
			return copied, fmt.Errorf("sparse copy %s: seek hole at %d: %w", src, data, err)
		}
		hole = min(hole, size)
		if err := copyRange(in, out, data, hole-data); err != nil {
			return copied, fmt.Errorf("sparse copy %s to %s: %w", src, dst, err)
		}
		copied += hole - data
		off = hole
	}
	return copied, nil
}

// copyRange copies n bytes at offset off from in to the same offset in out:
// copy_file_range, or pread/pwrite where the kernel cannot (another
// filesystem type, old kernel).
func copyRange(in, out *os.File, off, n int64) error {
	roff, woff := off, off
	for n > 0 {
		k, err := unix.CopyFileRange(int(in.Fd()), &roff, int(out.Fd()), &woff, int(min(n, 1<<30)), 0)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if errors.Is(err, unix.EXDEV) || errors.Is(err, unix.ENOSYS) || errors.Is(err, unix.EOPNOTSUPP) || errors.Is(err, unix.EINVAL) {
			return copyRangeRW(in, out, roff, n)
		}
		if err != nil {
			return fmt.Errorf("copy_file_range at %d: %w", roff, err)
		}
		if k == 0 {
			return fmt.Errorf("copy_file_range at %d: %w", roff, io.ErrUnexpectedEOF)
		}
		n -= int64(k)
	}
	return nil
}

func copyRangeRW(in, out *os.File, off, n int64) error {
	buf := make([]byte, 1<<20)
	for n > 0 {
		k, err := in.ReadAt(buf[:min(n, int64(len(buf)))], off)
		if k > 0 {
			if _, werr := out.WriteAt(buf[:k], off); werr != nil {
				return werr
			}
			off, n = off+int64(k), n-int64(k)
		}
		if err != nil && n > 0 {
			if errors.Is(err, io.EOF) {
				return fmt.Errorf("read at %d: %w", off, io.ErrUnexpectedEOF)
			}
			return err
		}
	}
	return nil
}
