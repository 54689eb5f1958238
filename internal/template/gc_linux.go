package template

import (
	"errors"
	"io/fs"
	"os"
	"syscall"
)

// tryLockFile takes the lock rootfs.LockFile takes, without waiting: ok is false
// when another holder (a build, in any process) has it.
func tryLockFile(path string) (unlock func(), ok bool, err error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, false, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, false, nil
		}
		return nil, false, err
	}
	return func() { f.Close() }, true, nil
}

// fileKey identifies a file (device, inode) so hard links count once.
type fileKey [2]uint64

// allocated is the space fi takes on disk, zero when seen already.
func allocated(fi fs.FileInfo, seen map[fileKey]bool) int64 {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return fi.Size()
	}
	k := fileKey{uint64(st.Dev), st.Ino}
	if seen[k] {
		return 0
	}
	seen[k] = true
	return st.Blocks * 512
}
