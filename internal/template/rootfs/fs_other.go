//go:build !linux

package rootfs

import "os"

// SwapDirs moves src to dst; see fs_linux.go. Elsewhere the replacement is
// two renames and not atomic.
func SwapDirs(src, dst string) error {
	if _, err := os.Lstat(dst); err == nil {
		old := dst + ".old"
		if err := os.Rename(dst, old); err != nil {
			return err
		}
		if err := os.Rename(src, dst); err != nil {
			return err
		}
		return os.Rename(old, src)
	}
	return os.Rename(src, dst)
}

func RemoveTree(dir string) error { return os.RemoveAll(dir) }

func LockFile(string) (func(), error) { return func() {}, nil }

func InUseAsLowerdir(string) (bool, error) { return false, nil }
func IsMountRoot(string) (bool, error)     { return false, nil }
